"""The rolling driver upgrade's decisions (module_utils/cluster/upgrade.py, through the filters the role calls)."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpuops.nvidia.plugins.filter.cluster import (
    day2_lost_hosts,
    driver_upgrade_drain,
    driver_upgrade_plan,
    driver_upgrade_restore,
    driver_upgrade_running,
    driver_upgrade_waiting,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import upgrade

STATE = "nvidia.com/gpu-driver-upgrade-state"


def driver(install: bool = True, installed: str | None = "570.195.03", branch: int = 580, kernel: str = "6.8.0-31-generic") -> dict:
    return {"plan": {"install": install, "branch": branch, "method": "dkms", "kernel": kernel,
                     "packages": ["nvidia-dkms-580-server-open", "nvidia-utils-580-server"] if install else []},
            "installed": {"version": installed, "branch": int(installed.split(".")[0]) if installed else None}}


def node(labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "gpu-01", "labels": {"nvidia.com/gpu.deploy.device-plugin": "true", **(labels or {})},
                         "annotations": annotations or {}}}


def facts(info_of, loaded: str | None = "570.195.03", kernel: str = "6.8.0-31-generic", modules: list | None = None) -> dict:
    info = copy.deepcopy(info_of("hgx-h100"))
    info["node"]["modules"]["version"] = loaded
    info["node"]["modules"]["nvidia"] = ["nvidia", "nvidia_uvm"] if modules is None else modules
    info["node"]["kernel"]["running"] = kernel
    return info


def test_a_node_on_the_old_branch_is_upgraded_and_its_components_paused(info_of):
    out = driver_upgrade_plan(facts(info_of), driver(), node({"nvidia.com/gpu.deploy.dcgm-exporter": "true"}), "", "gpu-01")
    assert out["errors"] == [] and out["skip"] == "" and not out["done"] and out["install"] and not out["resume"]
    assert out["pause"] == {"nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade",
                            "nvidia.com/gpu.deploy.dcgm-exporter": "paused-for-driver-upgrade"}
    assert out["unload"] == ["nvidia_uvm", "nvidia"]
    assert out["summary"] == "driver 570.195.03 -> branch 580 dkms: installs nvidia-dkms-580-server-open, nvidia-utils-580-server"


def test_a_node_at_the_target_is_done_and_its_cluster_left_alone(info_of):
    out = driver_upgrade_plan(facts(info_of, loaded="580.95.05"), driver(False, "580.95.05"), node(), "", "gpu-01")
    assert out["done"] and out["at_target"] and out["summary"] == "driver 580.95.05 (branch 580) at the target"


def test_installed_but_not_loaded_is_not_the_target(info_of):
    out = driver_upgrade_plan(facts(info_of, loaded="570.195.03"), driver(False, "580.95.05"), node(), "", "gpu-01")
    assert not out["done"] and not out["install"]
    assert out["summary"] == "driver 570.195.03 (installed 580.95.05): installed, not running yet"


@pytest.mark.parametrize("meta", [
    {"labels": {STATE: "upgrade-failed"}},
    {"labels": {STATE: "validation-required"}},
    {"annotations": {upgrade.INITIAL_STATE: "false"}},
])
def test_an_upgrade_an_earlier_run_left_is_resumed_even_at_the_target(info_of, meta):
    out = driver_upgrade_plan(facts(info_of, loaded="580.95.05"), driver(False, "580.95.05"), node(**meta), "", "gpu-01")
    assert out["at_target"] and out["resume"] and not out["done"]


def test_a_done_state_from_an_earlier_upgrade_is_not_a_resume(info_of):
    out = driver_upgrade_plan(facts(info_of, loaded="580.95.05"), driver(False, "580.95.05"), node({STATE: "upgrade-done"}), "", "gpu-01")
    assert out["done"] and not out["resume"]


def test_the_skip_label_leaves_the_node_alone(info_of):
    out = driver_upgrade_plan(facts(info_of), driver(), node({"nvidia.com/gpu-driver-upgrade.skip": "true"}), "", "gpu-01")
    assert out["skip"].startswith("nvidia.com/gpu-driver-upgrade.skip=true")


def test_a_missing_node_is_an_error_that_names_the_variable(info_of):
    out = driver_upgrade_plan(facts(info_of), driver(), {}, "", "gpu-01")
    assert out["errors"] and "gpuops_cluster_node_name" in out["errors"][0] and not out["done"]


def test_a_new_kernel_takes_a_reboot_even_when_the_driver_is_at_the_target(info_of):
    out = driver_upgrade_plan(facts(info_of, loaded="580.95.05"), driver(False, "580.95.05", kernel="6.8.0-60-generic"), node(),
                              "6.8.0-60-generic", "gpu-01")
    assert out["kernel_change"] and not out["done"]
    assert out["reboot_reasons"] == ["the node runs kernel 6.8.0-31-generic; the upgrade boots 6.8.0-60-generic"]
    assert out["summary"].endswith("; kernel 6.8.0-31-generic -> 6.8.0-60-generic")
    # Once it runs that kernel, the node is at the target.
    at = driver_upgrade_plan(facts(info_of, loaded="580.95.05", kernel="6.8.0-60-generic"),
                             driver(False, "580.95.05", kernel="6.8.0-60-generic"), node(), "6.8.0-60-generic", "gpu-01")
    assert at["done"]


@pytest.mark.parametrize(("value", "paused"), [
    ("true", "paused-for-driver-upgrade"),
    ("false", "false_paused-for-driver-upgrade"),
    ("paused-for-driver-upgrade", "paused-for-driver-upgrade"),
    ("false_paused-for-driver-upgrade", "false_paused-for-driver-upgrade"),
])
def test_pausing_follows_the_driver_managers_rule_and_restoring_undoes_it(value, paused):
    assert upgrade.paused_value(value) == paused
    assert upgrade.restored_value(paused) == ("true" if value in ("true", "paused-for-driver-upgrade") else "false")


def test_the_drivers_own_label_is_never_paused_and_restore_names_only_paused_labels():
    labels = {"nvidia.com/gpu.deploy.driver": "pre-installed", "nvidia.com/gpu.deploy.device-plugin": "true",
              "nvidia.com/gpu.deploy.dcgm": "paused-for-driver-upgrade", "nvidia.com/gpu.present": "true"}
    assert upgrade.pause_labels(labels) == {"nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade"}
    assert driver_upgrade_restore(labels) == {"nvidia.com/gpu.deploy.dcgm": "true"}


def _ds(name: str, selector: dict) -> dict:
    return {"metadata": {"name": name}, "spec": {"template": {"spec": {"nodeSelector": selector}}}}


def _pod(name: str, owner: str, phase: str = "Running") -> dict:
    return {"metadata": {"name": name, "namespace": "gpu-operator", "ownerReferences": [{"kind": "DaemonSet", "name": owner}]},
            "status": {"phase": phase}}


def test_the_wait_is_for_the_pods_of_the_daemonsets_the_paused_node_no_longer_matches():
    daemonsets = [_ds("nvidia-device-plugin-daemonset", {"nvidia.com/gpu.deploy.device-plugin": "true"}),
                  _ds("gpu-feature-discovery", {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}),
                  _ds("other", {"kubernetes.io/os": "linux"})]
    pods = [_pod("dp-1", "nvidia-device-plugin-daemonset"), _pod("gfd-1", "gpu-feature-discovery"), _pod("o-1", "other"),
            _pod("dp-old", "nvidia-device-plugin-daemonset", phase="Succeeded")]
    labels = {"nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade", "nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}
    assert driver_upgrade_waiting(pods, daemonsets, labels) == ["gpu-operator/dp-1"]


def test_modules_are_unloaded_users_first():
    assert upgrade.unload_order(["nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia-fs"]) == [
        "nvidia_peermem", "nvidia_fs", "nvidia_drm", "nvidia_modeset", "nvidia_uvm", "nvidia"]
    assert upgrade.unload_order(["nvidia_current", "nvidia_uvm"]) == ["nvidia_uvm", "nvidia_current"]
    assert upgrade.unload_order([]) == []


def test_the_units_that_were_running_are_those_systemctl_says_are_active():
    units = ["nvidia-dcgm.service", "nvidia-fabricmanager.service", "nvidia-persistenced.service", "dcgm-exporter.service"]
    states = ["active", "inactive", "active", "failed"]
    assert driver_upgrade_running(units, states) == ["nvidia-dcgm.service", "nvidia-persistenced.service"]
    # An output cut short (a unit systemctl said nothing of) names none more; no units, none.
    assert upgrade.running_units(units, ["inactive", "active"]) == ["nvidia-fabricmanager.service"]
    assert driver_upgrade_running([], []) == []
    assert driver_upgrade_running(["a.service"], ["activating"]) == []


def test_units_a_failed_run_stopped_are_started_again_by_the_run_that_resumes():
    # The failed run stopped Fabric Manager and recorded it on the Node; now systemctl says it is inactive.
    units = ["nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm"]
    assert driver_upgrade_running(units, ["active", "inactive", "inactive"], "nvidia-fabricmanager") == [
        "nvidia-persistenced", "nvidia-fabricmanager"]
    # A unit recorded that the list no longer names is started too; a record of none adds none.
    assert driver_upgrade_running(units, ["inactive"] * 3, "nvidia-imex,nvidia-persistenced") == ["nvidia-persistenced", "nvidia-imex"]
    assert driver_upgrade_running(units, ["inactive"] * 3, "") == []
    assert driver_upgrade_running(units, ["inactive"] * 3, None) == []


@pytest.mark.parametrize(("kernel_change", "reboot", "unload", "pods", "selector", "expected"), [
    # Only the GPU pods where the driver can be swapped in place; the selector narrows them.
    (False, "auto", ["nvidia_uvm", "nvidia"], "gpu", "app=train", {"pods": "gpu", "pod_selector": "app=train", "reboots": False}),
    # A reboot that will happen (new kernel, reboot: always, no module loaded to unload) takes every pod: all go.
    (True, "auto", ["nvidia"], "gpu", "app=train", {"pods": "all", "pod_selector": "", "reboots": True}),
    (False, "always", ["nvidia"], "gpu", "", {"pods": "all", "pod_selector": "", "reboots": True}),
    (False, "auto", [], "gpu", "", {"pods": "all", "pod_selector": "", "reboots": True}),
    (False, "auto", ["nvidia"], "all", "", {"pods": "all", "pod_selector": "", "reboots": False}),
])
def test_a_node_that_will_reboot_is_drained_of_every_pod(kernel_change, reboot, unload, pods, selector, expected):
    plan = {"kernel_change": kernel_change, "unload": unload, "at_target": False}
    assert driver_upgrade_drain(plan, reboot, pods, selector) == expected


def test_hosts_lost_mid_change_are_the_removed_ones_that_started_and_neither_ended_nor_ran_their_rescue():
    hostvars = {
        "gpu-1": {"marked": {"changed": True}},  # unreachable mid-upgrade: no rescue, no end
        "gpu-2": {"marked": {"changed": True}, "rescued": {"resources": []}},  # failed: its rescue recorded it
        "gpu-3": {"marked": {"skipped": True}},  # at the target: never started
        "gpu-4": {"gpuops_cluster_node_name": "node-4", "marked": {"changed": False}},
        "gpu-5": {},  # unreachable before anything changed
        "gpu-6": {"marked": {"changed": True}, "done": {"changed": True}},
    }
    removed = ["gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6"]
    assert day2_lost_hosts(removed, hostvars, "marked", ["done", "rescued"]) == {"gpu-1": "gpu-1", "gpu-4": "node-4"}
    assert day2_lost_hosts([], hostvars, "marked", ["done"]) == {}
    # Without `started`: every removed host that did not end.
    assert list(day2_lost_hosts(removed, hostvars, "", ["rescued"])) == ["gpu-1", "gpu-3", "gpu-4", "gpu-5", "gpu-6"]


def gpu_node(name, unschedulable=False, ready="True", state=None):
    labels = {"nvidia.com/gpu.present": "true", **({upgrade.STATE_LABEL: state} if state else {})}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def test_the_batch_is_the_limit_over_the_cluster_less_the_nodes_already_unavailable_outside_the_run():
    nodes = [gpu_node(f"n{i}") for i in range(8)] + [gpu_node("c", unschedulable=True), gpu_node("d", ready="False")]
    got = upgrade.budget(nodes, ["n0", "n1"], None, "50%")
    assert (got["total"], got["limit"], got["size"], got["errors"]) == (10, 5, 3, [])
    assert got["unavailable"] == {"c": "cordoned", "d": "not Ready"}
    # A percent of the cluster's GPU nodes rounded up, not of the hosts of the run (the play's serial did that before).
    assert upgrade.budget(nodes, ["n0"], None, "25%")["limit"] == 3
    assert upgrade.budget(nodes, ["n0"], None, 4)["size"] == 2


def test_no_room_left_is_refused_naming_the_variable_and_the_unavailable_nodes():
    nodes = [gpu_node("a"), gpu_node("b", state="upgrade-failed", unschedulable=True)]
    got = upgrade.budget(nodes, ["a"], None, 1)
    assert got["size"] == 0
    assert got["errors"] == [
        "gpuops_upgrade_max_unavailable: 1 allows 1 of the cluster's 2 GPU nodes unavailable at a time, and 1 already are: "
        "b (cordoned, upgrade-failed); bring them back (uncordon, Ready) or raise it"]
    # A node of the run that is unavailable (an earlier run's failure, resumed now) takes nothing from the room.
    assert upgrade.budget(nodes, ["a", "b"], None, 1)["errors"] == []


def test_a_batch_fits_when_its_changing_nodes_and_those_unavailable_outside_it_stay_within_the_limit():
    nodes = [gpu_node("a"), gpu_node("b"), gpu_node("c"), gpu_node("d", unschedulable=True)]
    assert upgrade.budget(nodes, ["a", "b", "c", "d"], ["d"], 1)["errors"] == []
    late = upgrade.budget(nodes, ["a", "b", "c", "d"], ["a"], 1)
    assert late["unavailable"] == {"d": "cordoned"}
    assert "already are outside this batch: d (cordoned)" in late["errors"][0]
    assert upgrade.budget(nodes, ["a", "b"], ["a", "b"], 3)["errors"] == []
    assert upgrade.budget(nodes, ["a", "b"], ["a", "b"], 2)["errors"]
    # Nothing of the batch changes (every node at the target): nothing to fit, whatever the cluster has down.
    assert upgrade.budget(nodes, ["a"], [], 1)["errors"] == []


def test_a_node_of_the_run_not_yet_labelled_counts_in_the_total():
    assert upgrade.budget([gpu_node("a")], ["a", "new"], None, "50%")["total"] == 2
