"""A node that stops answering mid-rollout stops it: ansible-playbook on this machine, a batch of two where one host is
unreachable (SSH to a closed port), with the day-2 roles' own variables (vars/main.yml) deciding. Without the check,
Ansible runs no rescue for the lost host, max_fail_percentage does not count it, and the next batch starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]
PLAY = """
- hosts: nodes
  gather_facts: false
  serial: 2
  max_fail_percentage: 0
  vars_files: [{vars}]
  tasks:
    - name: Start the change (delegated, as the role's first step is)
      ansible.builtin.debug: {{msg: start}}
      delegate_to: localhost
      register: {started}
    - name: Change the host
      ansible.builtin.command: "true"
      changed_when: false
    - name: End the change
      ansible.builtin.debug: {{msg: end}}
      delegate_to: localhost
      register: {ended}
    - name: Stop the rollout where a node of the batch was lost
      run_once: true
      when: {removed} | length > 0
      block:
        - name: Say which
          ansible.builtin.debug: {{msg: "LOST={{{{ {lost} | to_json }}}} REMOVED={{{{ {removed} | to_json }}}}"}}
        - name: Stop
          ansible.builtin.fail: {{msg: stop}}
"""


@pytest.mark.parametrize(("role", "started", "ended", "removed", "lost"), [
    ("driver_upgrade", "__gpuops_upgrade_marked", "__gpuops_upgrade_ended", "__gpuops_upgrade_removed", "__gpuops_upgrade_lost"),
    ("mig_reconfigure", "unused", "unused_end", "__gpuops_mig_reconfigure_removed", "[]"),
])
def test_an_unreachable_node_stops_the_rollout_and_is_named(tmp_path, role, started, ended, removed, lost):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[nodes]\ngpu-a ansible_connection=local\n"
        "gpu-b ansible_host=127.0.0.1 ansible_port=1 ansible_connection=ssh gpuops_cluster_node_name=node-b "
        "ansible_ssh_common_args='-o ConnectTimeout=2'\ngpu-c ansible_connection=local\ngpu-d ansible_connection=local\n"
        f"[nodes:vars]\nansible_python_interpreter={sys.executable}\n")
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(vars=ROOT / "roles" / role / "vars" / "main.yml", started=started, ended=ended, removed=removed, lost=lost))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".build" / "collections"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_HOST_KEY_CHECKING": "false", "ANSIBLE_RETRY_FILES_ENABLED": "false"}
    run = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(play)],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    out = json.loads(run.stdout)
    stats = out["stats"]
    assert stats["gpu-b"]["unreachable"] == 1
    assert "gpu-c" not in stats and "gpu-d" not in stats, "the next batch started"
    assert stats["gpu-a"]["failures"] == 1
    said = [r["msg"] for p in out["plays"] for t in p["tasks"] if t["task"]["name"] == "Say which" for r in t["hosts"].values()]
    assert said and "REMOVED=[\"gpu-b\"]" in said[0]
    if role == "driver_upgrade":
        assert 'LOST={"gpu-b": "node-b"}' in said[0]
