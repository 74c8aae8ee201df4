"""The cluster_nodes filter: the one read of the GPU hosts, with the GFD labels each Node should carry."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_nodes

TS4 = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
KEYS = {"gpuops_device_plugin_config": ""}


@pytest.fixture
def hostvars(info_of):
    return {
        "h100-a": {"gpuops_gpu_info": info_of("hgx-h100")},
        "h100-b": {"gpuops_gpu_info": info_of("hgx-h100"), "gpuops_device_plugin_config": "ts-4"},
        "a100": {"gpuops_gpu_info": info_of("a100-pcie-mig"), "gpuops_cluster_node_name": "a100-node"},
        "l40s": {"gpuops_gpu_info": info_of("l40s")},
        "cpu": {"gpuops_gpu_info": info_of("no-gpu")},
    }


def test_each_node_carries_the_gfd_labels_of_its_hardware_and_sharing_config(hostvars):
    nodes = cluster_nodes(list(hostvars), hostvars, KEYS, {"mig_strategy": "mixed", "configs": {"ts-4": TS4}, "default_config": ""})
    assert sorted(nodes) == ["a100-node", "cpu", "h100-a", "h100-b", "l40s"]
    assert nodes["h100-a"]["gfd_labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert nodes["h100-b"]["gfd_labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert nodes["h100-b"]["gfd_labels"]["nvidia.com/gpu.memory"] == "81559"  # read from the full facts, not the slim ones
    assert all("memory_mib" not in gpu for gpu in nodes["h100-b"]["info"]["nvml"]["gpus"])
    assert nodes["a100-node"]["gfd_labels"]["nvidia.com/mig-3g.40gb.count"] == "1"
    assert nodes["l40s"]["gfd_labels"] is None  # no driver when its facts were read
    assert nodes["cpu"]["gfd_labels"] is None


def test_the_default_config_and_gfds_mig_strategy_apply(hostvars):
    nodes = cluster_nodes(["h100-a", "a100"], hostvars, KEYS, {"mig_strategy": "single", "configs": {"ts-4": TS4}, "default_config": "ts-4"})
    assert nodes["h100-a"]["gfd_labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert nodes["a100-node"]["gfd_labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-80GB-PCIe-MIG-INVALID"


def test_without_gfd_settings_there_is_no_expectation(hostvars):
    nodes = cluster_nodes(["h100-a"], hostvars, KEYS)
    assert nodes["h100-a"]["gfd_labels"] is None


def test_a_host_without_facts_is_named(hostvars):
    with pytest.raises(AnsibleFilterError, match="host bare has no gpuops_gpu_info"):
        cluster_nodes(["h100-a", "bare"], {**hostvars, "bare": {}}, KEYS, {"mig_strategy": "mixed", "configs": {}, "default_config": ""})


def test_gpudirect_comes_from_the_loaded_modules_or_the_rdma_roles_fact(hostvars, info_of):
    loaded = copy.deepcopy(info_of("l40s"))
    loaded["node"]["rdma"]["modules"] = ["nvidia_fs", "gdrdrv"]
    old_schema = copy.deepcopy(info_of("a100-pcie-mig"))
    del old_schema["node"]["rdma"]
    hosts = {**hostvars, "l40s": {"gpuops_gpu_info": loaded}, "a100": {"gpuops_gpu_info": old_schema},
             "h100-b": {"gpuops_gpu_info": info_of("hgx-h100"), "gpuops_rdma": {"path": "dmabuf", "gds": False, "gdrcopy": True}}}
    nodes = cluster_nodes(list(hosts), hosts, KEYS)
    assert nodes["l40s"]["gpudirect"] == {"gds": True, "gdrcopy": True}
    assert nodes["h100-b"]["gpudirect"] == {"gds": False, "gdrcopy": True}
    assert nodes["h100-a"]["gpudirect"] == nodes["a100"]["gpudirect"] == {"gds": False, "gdrcopy": False}


MPS2 = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}


def test_a_limited_run_keeps_only_the_nodes_of_its_hosts(hostvars):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_run_nodes
    nodes = cluster_nodes(list(hostvars), hostvars, KEYS)
    # Node names and host names differ where gpuops_cluster_node_name is set: the run is of hosts.
    assert sorted(cluster_run_nodes(nodes, ["a100", "cpu"])) == ["a100-node", "cpu"]
    assert cluster_run_nodes(nodes, []) == {}


def test_device_plugin_labels_name_the_config_and_whether_it_uses_mps(hostvars):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import device_plugin_labels
    hv = copy.deepcopy(hostvars)
    hv["h100-a"]["gpuops_device_plugin_config"] = "mps-2"
    nodes = cluster_nodes(list(hv), hv, KEYS)
    labels = device_plugin_labels(nodes, {"ts-4": TS4, "mps-2": MPS2})
    assert labels["h100-a"] == {"nvidia.com/device-plugin.config": "mps-2", "nvidia.com/mps.capable": "true"}
    assert labels["h100-b"] == {"nvidia.com/device-plugin.config": "ts-4", "nvidia.com/mps.capable": "false"}
    assert labels["l40s"] == {"nvidia.com/device-plugin.config": None, "nvidia.com/mps.capable": "false"}
    assert labels["cpu"] == {"nvidia.com/device-plugin.config": None, "nvidia.com/mps.capable": None}
    # A node that chooses nothing gets the default config, and MPS with it; its config label stays unset.
    assert device_plugin_labels(nodes, {"mps-2": MPS2}, "mps-2")["l40s"] == {
        "nvidia.com/device-plugin.config": None, "nvidia.com/mps.capable": "true"}


def test_mig_config_labels_split_what_the_host_names_from_the_default(hostvars):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import mig_config_labels
    hv = copy.deepcopy(hostvars)
    hv["a100"]["gpuops_mig_manager_config"] = "all-balanced"
    nodes = cluster_nodes(list(hv), hv, {"gpuops_mig_manager_config": ""})
    assert mig_config_labels(nodes, "all-disabled", True) == {"a100-node": {"nvidia.com/mig.config": "all-balanced"}}
    # The H100s can do MIG and name nothing; the L40S and the CPU host cannot do MIG and are left out.
    assert mig_config_labels(nodes, "all-disabled", False) == {
        "h100-a": {"nvidia.com/mig.config": "all-disabled"}, "h100-b": {"nvidia.com/mig.config": "all-disabled"}}


@pytest.mark.parametrize(("setting", "cdi", "expected"), [
    ("true", {}, True), ("false", {"h100-a": True, "l40s": True}, False),
    ("auto", {"h100-a": True, "l40s": True}, True), ("auto", {"h100-a": True}, False),
])
def test_cdi_is_on_when_asked_or_when_every_gpu_host_reports_it(hostvars, setting, cdi, expected):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_cdi
    hv = {h: {**hostvars[h], "gpuops_container_toolkit_cdi": cdi.get(h, False)} for h in ("h100-a", "l40s")}
    nodes = cluster_nodes(list(hv), hv, {"gpuops_container_toolkit_cdi": False})
    assert cluster_cdi(nodes, setting) is expected
    assert cluster_cdi({}, "auto") is False
