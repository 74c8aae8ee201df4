"""The day-2 roles' expressions that decide what a drain evicts and which units a run starts again, templated as a
play would (the role's defaults and vars, the collection's filters)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.template import trust_as_template

from tests.unit.harness import role_templar

ROLES = Path(__file__).parents[3] / "roles"
PLAN = {"kernel_change": False, "unload": ["nvidia_uvm", "nvidia"], "at_target": False, "state": ""}


def upgrade(expr: str, **overrides):
    values = {"__gpuops_upgrade_plan": PLAN, "__gpuops_upgrade_node_object": {}, **overrides}
    return role_templar(ROLES / "driver_upgrade", **values).template(trust_as_template("{{ " + expr + " }}"))


def test_the_upgrade_drains_every_pod_of_a_node_it_will_reboot():
    assert upgrade("__gpuops_upgrade_drain_scope") == {"pods": "gpu", "pod_selector": "", "reboots": False}
    assert upgrade("__gpuops_upgrade_drain_scope", gpuops_upgrade_reboot="always")["pods"] == "all"
    assert upgrade("__gpuops_upgrade_drain_scope", gpuops_upgrade_drain_pod_selector="app=x",
                   __gpuops_upgrade_plan={**PLAN, "kernel_change": True}) == {"pods": "all", "pod_selector": "", "reboots": True}


def test_a_resumed_upgrade_starts_again_the_units_the_failed_run_stopped():
    node = {"metadata": {"annotations": {"gpuops.nvidia/driver-upgrade.stopped-units": "nvidia-persistenced,nvidia-fabricmanager"}}}
    units = {"stdout_lines": ["inactive"] * 6}
    assert upgrade("__gpuops_upgrade_running", __gpuops_upgrade_units=units) == []
    assert upgrade("__gpuops_upgrade_running", __gpuops_upgrade_units=units, __gpuops_upgrade_node_object=node) == [
        "nvidia-persistenced", "nvidia-fabricmanager"]


@pytest.mark.parametrize(("with_reboot", "expected"), [(None, False), (False, False), (True, True)])
def test_mig_reconfigure_drains_every_pod_where_the_mig_manager_may_reboot(with_reboot, expected):
    overrides = {} if with_reboot is None else {"gpuops_mig_manager_with_reboot": with_reboot}
    templar = role_templar(ROLES / "mig_reconfigure", **overrides)
    assert templar.template(trust_as_template("{{ __gpuops_mig_reconfigure_drain_all }}")) is expected


def test_the_batch_check_counts_the_nodes_of_the_batch_that_change():
    hostvars = {
        "a": {"__gpuops_upgrade_plan": {"skip": "", "done": False}, "__gpuops_day2_node": "node-a"},
        "b": {"__gpuops_upgrade_plan": {"skip": "", "done": True}, "__gpuops_day2_node": "node-b"},
        "c": {"__gpuops_upgrade_plan": {"skip": "labelled skip", "done": False}, "__gpuops_day2_node": "node-c"},
    }
    nodes = [{"metadata": {"name": n, "labels": {}}, "spec": {"unschedulable": n == "node-d"},
              "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for n in ("node-a", "node-b", "node-c", "node-d")]
    values = {"ansible_play_batch": ["a", "b", "c"], "ansible_play_hosts_all": ["a", "b", "c"], "hostvars": hostvars,
              "__gpuops_upgrade_gpu_nodes": {"resources": nodes}}
    assert upgrade("__gpuops_upgrade_changing", **values) == ["node-a"]
    got = upgrade("__gpuops_upgrade_batch_budget", **values, gpuops_upgrade_max_unavailable=2)
    assert (got["limit"], got["unavailable"], got["errors"]) == (2, {"node-d": "cordoned"}, [])
    assert upgrade("__gpuops_upgrade_batch_budget", **values)["errors"]
    assert upgrade("__gpuops_upgrade_budget", **values, gpuops_upgrade_max_unavailable="50%")["size"] == 1


@pytest.mark.parametrize(("drained", "expected"), [([False, False], False), ([False, True], True), (["false"], False)])
def test_the_uninstall_goes_in_batches_where_some_host_is_drained(drained, expected):
    hostvars = {f"h{i}": {"__gpuops_uninstall_drained": d} for i, d in enumerate(drained)}
    templar = role_templar(ROLES / "uninstall", ansible_play_hosts=list(hostvars), hostvars=hostvars)
    assert templar.template(trust_as_template("{{ __gpuops_uninstall_any_drain }}")) is expected


@pytest.mark.parametrize(("driver", "cluster", "drain", "expected"), [
    (False, None, None, False), (True, None, None, True), (True, False, None, False), (True, True, False, False)])
def test_the_uninstall_drains_where_the_driver_goes_on_a_kubernetes_node(driver, cluster, drain, expected):
    overrides = {"gpuops_uninstall_driver": driver, **({"gpuops_uninstall_cluster": cluster} if cluster is not None else {}),
                 **({"gpuops_uninstall_drain": drain} if drain is not None else {})}
    templar = role_templar(ROLES / "uninstall", **overrides)
    assert templar.template(trust_as_template("{{ __gpuops_uninstall_drains }}")) is expected


@pytest.mark.parametrize(("components", "expected"), [
    (None, True), (["device-plugin", "gpu-feature-discovery", "mig-manager"], True), (["device-plugin", "gpu-feature-discovery"], False)])
def test_the_default_mig_config_is_set_only_where_the_mig_manager_is_deployed(components, expected):
    """A node whose MIG manager is left out got mig.config=all-disabled, which no one applies (issue 61's real node)."""
    overrides = {} if components is None else {"gpuops_cluster_prereqs_deploy_components": components}
    templar = role_templar(ROLES / "mig_manager", **overrides)
    assert templar.template(trust_as_template("{{ __gpuops_mig_manager_deployed | bool }}")) is expected
