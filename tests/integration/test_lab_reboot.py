"""End to end: ansible.builtin.reboot against a lab machine; the supervisor boots it again on the same port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from lab.machines import Lab, process_alive

from .test_lab_machines import free_base_port, lab, processes_rooted_under

REPO = Path(__file__).resolve().parents[2]
NAME = "t-reboot"


def status_row(state: Path) -> dict:
    rows = {r["name"]: r for r in json.loads(lab(state, "status", "--json").stdout)}
    return rows[NAME]


def ssh_out(state: Path, *cmd: str) -> str:
    return lab(state, "ssh", NAME, *cmd).stdout.strip()


def test_ansible_reboot_boots_the_machine_again_on_the_same_port_with_its_files(tmp_path):
    state = tmp_path / "state"
    inventory = tmp_path / "hosts.yml"
    base = free_base_port(1)
    lab(state, "up", "--base-port", str(base), "--inventory", str(inventory), f"--machine={NAME}=bookworm")
    pids: list[int] = []
    try:
        before = status_row(state)
        assert before["running"] and before["port"] == base
        supervisor, nspawn = before["pid"], before["nspawn_pid"]
        pids = [supervisor, nspawn]
        assert nspawn > 0 and nspawn != supervisor
        boot_id = ssh_out(state, "cat", "/proc/sys/kernel/random/boot_id")
        ssh_out(state, "sh", "-c", "'echo kept > /root/reboot-marker; sync'")

        env = {**os.environ, "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_NOCOLOR": "1"}
        t0 = time.monotonic()
        res = subprocess.run(
            [str(Path(sys.executable).parent / "ansible"), "-i", str(inventory), NAME, "-m", "ansible.builtin.reboot", "-a", "reboot_timeout=120"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
            env=env,
        )
        took = time.monotonic() - t0
        assert res.returncode == 0, f"ansible.builtin.reboot failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
        result = json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"][NAME]
        assert result.get("rebooted") is True, result
        print(f"the reboot took {took:.0f}s")  # the module's reboot_timeout bounds it; not a timed assertion

        after = status_row(state)
        assert after["running"]
        assert after["port"] == base
        assert after["pid"] == supervisor, "the supervisor must survive the machine's reboot"
        assert after["nspawn_pid"] > 0 and after["nspawn_pid"] != nspawn, "the reboot must start a new systemd-nspawn"
        pids.append(after["nspawn_pid"])
        assert ssh_out(state, "cat", "/root/reboot-marker") == "kept"
        # The second boot is a whole one, in fresh cgroups as the first: systemd finishes it without a failed unit.
        assert ssh_out(state, "systemctl", "is-system-running", "--wait") == "running"
        assert ssh_out(state, "cat", "/proc/sys/kernel/random/boot_id") != boot_id
        console = (Path(Lab(state).load()[NAME].directory) / "console.log").read_text(errors="replace")
        assert "machine rebooted" in console, console
    finally:
        lab(state, "down", "--inventory", str(inventory))
    for pid in pids:
        assert not process_alive(pid), pid
    assert processes_rooted_under(state) == []
    assert not state.exists()
