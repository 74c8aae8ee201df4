"""gpuops.nvidia.role_inputs, run by ansible-playbook on this machine against the collection's own roles: each role's
argument spec and its own checks in one task, every error in one message, no_log values masked; and the roles'
standalone checks read the same variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = ["cluster_prereqs", "gpu_feature_discovery", "dcgm_exporter", "validation"]
NODE_ROLES = ["preflight", "container_toolkit"]

# The roles imported (never run: when false) so that their defaults and vars are the play's, as in cluster.yml.
PLAY = [{
    "name": "check",
    "hosts": "localhost",
    "connection": "local",
    "gather_facts": False,
    "tasks": [
        {"name": "Check", "gpuops.nvidia.role_inputs": {"roles": "{{ roles_to_check }}"}, "register": "checked",
         "ignore_errors": True},
        {"name": "Show", "ansible.builtin.copy": {"content": "{{ checked | to_json }}", "dest": "{{ result_file }}"}},
        *({"name": f"Import {role}", "when": False,
           "ansible.builtin.import_role": {"name": f"gpuops.nvidia.{role}", "rolespec_validate": False}}
          for role in [*ROLES, *NODE_ROLES]),
    ],
}]


def run(tmp_path: Path, extra: dict, roles: list[str] | None = None) -> dict:
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(PLAY))
    out = tmp_path / "result.json"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"n1": {}}}}}}))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build/collections"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    variables = {"roles_to_check": roles or ROLES, "result_file": str(out), **extra}
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-i", str(inventory), "-e", json.dumps(variables)],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_defaults_pass_and_nothing_changes(tmp_path):
    # cluster_prereqs' own checks need the GPU nodes cluster_common reads: given here as cluster.yml's read leaves them.
    res = run(tmp_path, {"__gpuops_cluster_common_nodes": {}})
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert res["roles"] == ROLES


def test_every_role_s_spec_and_own_errors_come_in_one_message(tmp_path):
    res = run(tmp_path, {
        "__gpuops_cluster_common_nodes": {},
        # dcgm_exporter: a spec error (not a dict) whose own check (dict2items) cannot even run; then an own error.
        "gpuops_dcgm_exporter_service_monitor_labels": ["team", "gpu"],
        "gpuops_dcgm_exporter_service_monitor_interval": "15 seconds",
        # gpu_feature_discovery: an own error only.
        "gpuops_gpu_feature_discovery_sleep_interval": "45 seconds",
        # validation: the spec's choice and the role's own, longer, message.
        "gpuops_validation_smoke": "sometimes",
        # cluster_prereqs: a spec choice.
        "gpuops_cluster_prereqs_pod_security": "open",
    })
    assert res["failed"] is True
    errors = res["input_errors"]
    assert any("gpuops_cluster_prereqs_pod_security must be one of: privileged, baseline, restricted, got: open" in e for e in errors)
    assert any("gpuops_dcgm_exporter_service_monitor_labels" in e and "dict" in e for e in errors), errors
    assert "gpuops_gpu_feature_discovery_sleep_interval: 45 seconds is not a Go duration such as 60s or 5m, nor infinite" in errors
    assert any(e.startswith('gpuops_validation_smoke: "sometimes" is not one of changed') for e in errors), errors
    assert any("gpuops_validation_smoke must be one of" in e for e in errors), errors
    # The role whose spec refused a value: its own checks are left out where they cannot run, not reported as a crash.
    assert not any("dict2items" in e or "template" in e.lower() for e in errors), errors
    assert res["msg"] == "; ".join(errors)


def test_an_own_check_that_breaks_without_a_spec_error_is_not_hidden(tmp_path):
    # cluster_prereqs' own check reads the GPU nodes: without them (and nothing wrong in its spec) the task must fail
    # loudly, not pass.
    res = run(tmp_path, {}, roles=["cluster_prereqs"])
    assert res["failed"] is True
    assert "__gpuops_cluster_common_nodes" in res["msg"], res["msg"]


def test_no_log_values_never_reach_the_message(tmp_path):
    res = run(tmp_path, {
        "__gpuops_cluster_common_nodes": {},
        "gpuops_cluster_prereqs_registry_credentials": [{"name": "nvcr", "server": "nvcr.io", "username": "$oauthtoken",
                                                         "password": "hunter2-secret"}],
        "gpuops_cluster_prereqs_pod_security": "hunter2-secret",
    }, roles=["cluster_prereqs"])
    assert res["failed"] is True
    assert "hunter2-secret" not in json.dumps(res)
    assert "gpuops_cluster_prereqs_pod_security must be one of" in res["msg"]


def test_an_unknown_role_is_named_with_the_roles_there_are(tmp_path):
    res = run(tmp_path, {}, roles=["device_plugins"])
    assert res["failed"] is True
    assert "roles: 'device_plugins' is not a role of gpuops.nvidia; its roles are" in res["msg"]
    assert "device_plugin," in res["msg"]


def test_the_host_roles_own_checks_name_the_variable_the_value_came_from(tmp_path):
    # node.yml's check: the driver method given as the driver role's variable is named so (preflight takes it from
    # there), with the driver role's choices; a toolkit version that is no package version.
    res = run(tmp_path, {"gpuops_driver_method": "kmod", "gpuops_container_toolkit_version": "latest"}, roles=NODE_ROLES)
    assert res["failed"] is True
    assert 'gpuops_driver_method: "kmod" is not one of auto, precompiled, dkms, containerized' in res["input_errors"]
    assert any(e.startswith('gpuops_container_toolkit_version: "latest" is not a package version') for e in res["input_errors"])
    res = run(tmp_path, {"gpuops_preflight_driver_method": "kmod"}, roles=NODE_ROLES)
    assert 'gpuops_preflight_driver_method: "kmod" is not one of auto, precompiled, dkms, containerized, none' in res["msg"]
    assert not run(tmp_path, {}, roles=NODE_ROLES).get("failed")


def test_nri_mode_without_the_plugin_s_source_is_refused_before_anything_changes(tmp_path):
    # NRI mode runs the toolkit's NRI plugin, which NVIDIA's packages do not ship: its source must be named (issue 63).
    res = run(tmp_path, {"gpuops_container_toolkit_mode": "nri"}, roles=NODE_ROLES)
    assert res["failed"] is True
    assert res["input_errors"] == [
        'gpuops_container_toolkit_nri_plugin_source: "" is not an https, http or file URL nor an absolute path on the '
        "controller: NRI mode (gpuops_container_toolkit_mode: nri) runs the toolkit's NRI plugin, which NVIDIA's "
        "packages do not ship; name its binary there (docs/nri.md)"]
    assert not run(tmp_path, {"gpuops_container_toolkit_mode": "nri",
                              "gpuops_container_toolkit_nri_plugin_source": "https://mirror.example/nri-plugin"},
                   roles=NODE_ROLES).get("failed")


def _tasks(path: Path) -> list[dict]:
    return [t for t in yaml.safe_load(path.read_text()) or [] if isinstance(t, dict)]


@pytest.mark.parametrize("role", ["cluster_prereqs", "driver_container", "device_plugin", "dra", "node_feature_discovery",
                                  "gpu_feature_discovery", "dcgm_exporter", "mig_manager", "validation", *NODE_ROLES, "cluster_common"])
def test_each_role_checks_itself_with_the_declaration_role_inputs_reads(role):
    """A role run on its own checks its inputs with the same action and declaration as the playbooks' first task (one place
    for its checks), in one task of its own."""
    assert (REPO / "roles" / role / "meta/inputs.yml").exists()
    own = [(path.name, task) for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")) for task in _tasks(path)
           if "gpuops.nvidia.role_inputs" in task]
    assert len(own) == 1, own
    where, task = own[0]
    assert task["gpuops.nvidia.role_inputs"]["roles"] == [role]
    if role == "cluster_common":
        # Its shared settings, before the connection: an entry point without an argument spec, its own checks only.
        assert where == "settings.yml" and task["gpuops.nvidia.role_inputs"]["entry_point"] == "settings"
    elif role in NODE_ROLES:
        assert where == "main.yml" and _tasks(REPO / "roles" / role / "tasks/main.yml")[0] == task, "not the role's first task"
    else:
        assert where.startswith("validate")


STANDALONE = [{
    "name": "roles on their own",
    "hosts": "n1",
    "connection": "local",
    "gather_facts": False,
    "tasks": [
        {"name": "GFD's check", "block": [{"name": "Check", "ansible.builtin.include_role": {
            "name": "gpuops.nvidia.gpu_feature_discovery", "tasks_from": "validate"}}],
         "rescue": [{"name": "Keep", "ansible.builtin.set_fact": {"gfd": "{{ ansible_failed_result }}"}}]},
        {"name": "The preflight's", "block": [{"name": "Run", "ansible.builtin.include_role": {"name": "gpuops.nvidia.preflight"}}],
         "rescue": [{"name": "Keep", "ansible.builtin.set_fact": {"preflight": "{{ ansible_failed_result }}"}}]},
        {"name": "Show", "ansible.builtin.copy": {"content": "{{ {'gfd': gfd, 'preflight': preflight} | to_json }}",
                                                  "dest": "{{ result_file }}"}, "delegate_to": "localhost"},
    ],
}]


def test_a_role_on_its_own_checks_its_inputs_before_anything_else(tmp_path):
    """Outside node.yml and cluster.yml, a role's first task of its own says what is wrong, with the same messages."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(STANDALONE))
    out = tmp_path / "result.json"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"n1": {}}}}}}))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build/collections"), "ANSIBLE_NOCOLOR": "1"}
    variables = {"result_file": str(out), "gpuops_gpu_feature_discovery_sleep_interval": "45 seconds",
                 "gpuops_preflight_driver_repository": "ppa"}
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-i", str(inventory), "-e", json.dumps(variables)],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["gfd"]["msg"] == "gpuops_gpu_feature_discovery_sleep_interval: 45 seconds is not a Go duration such as 60s or 5m, nor infinite"
    assert result["preflight"]["msg"] == 'gpuops_preflight_driver_repository: "ppa" is not one of distro, cuda'
    # Nothing ran before: the preflight's first task is its check (its read of the GPUs comes after).
    assert "Read the GPUs" not in res.stdout
