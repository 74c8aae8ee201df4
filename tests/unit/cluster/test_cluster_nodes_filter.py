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


def _daemonset(name: str, env: list[dict]) -> dict:
    return {"kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [{"name": "x", "env": env}]}}}}


ON = [_daemonset("nvidia-device-plugin-daemonset", [{"name": "CDI_ENABLED", "value": "true"}]),
      _daemonset("nvidia-mig-manager", [{"name": "CDI_ENABLED", "value": "true"}])]
OFF = [_daemonset("nvidia-device-plugin-daemonset", [{"name": "MIG_STRATEGY", "value": "mixed"}])]


# cluster.yml run on its own (AWX, or a day-2 run): the hosts' GPUs are read again, but nothing of their toolkit,
# whose facts a site.yml run set. Taking "not reported" for "off" rolled the device plugin and the MIG manager on
# every node, and the next site.yml rolled them back.
@pytest.mark.parametrize(("cdi", "deployed", "expected"), [
    ({"h100-a": None, "l40s": None}, ON, True),          # nothing known: what the cluster runs stays
    ({"h100-a": None, "l40s": None}, OFF, False),
    ({"h100-a": None, "l40s": None}, [], False),         # nothing known, nothing deployed: off
    ({"h100-a": None, "l40s": None}, None, False),
    ({"h100-a": True, "l40s": None}, ON, True),          # the unknown host votes with the cluster
    ({"h100-a": True, "l40s": None}, OFF, False),
    ({"h100-a": True, "l40s": None}, None, True),        # nothing deployed to vote: the known decide
    ({"h100-a": False, "l40s": None}, ON, False),        # a host known without CDI turns it off
    ({"h100-a": True, "l40s": True}, OFF, True),         # every host known: the hosts decide, not the cluster
    # A host whose runtime the collection leaves alone (gpuops_node_container_toolkit: false) has no CDI of ours.
    ({"h100-a": True, "l40s": "not ours"}, None, False),
    ({"h100-a": True, "l40s": "not ours"}, ON, False),
])
def test_cdi_auto_counts_a_host_whose_toolkit_is_not_known_as_the_cluster_runs_it(hostvars, cdi, deployed, expected):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_cdi
    hv = {h: {**hostvars[h], **({} if cdi[h] is None else {"gpuops_node_container_toolkit": "false"} if cdi[h] == "not ours"
                                else {"gpuops_container_toolkit_cdi": cdi[h]})} for h in cdi}
    nodes = cluster_nodes(list(hv), hv, {"gpuops_container_toolkit_cdi": None, "gpuops_node_container_toolkit": True})
    assert cluster_cdi(nodes, "auto", deployed) is expected
    assert cluster_cdi(nodes, "false", ON) is False


@pytest.mark.parametrize(("setting", "handlers", "existing", "expected"), [
    ("", {"h100-a": "nvidia-cdi", "l40s": None}, "other", "nvidia-cdi"),   # a host that reports it names it
    ("", {"h100-a": None, "l40s": None}, "nvidia-cdi", "nvidia-cdi"),      # none known: the RuntimeClass's stays
    ("", {"h100-a": None, "l40s": None}, None, "nvidia"),                   # none known, none there: the default
    ("mine", {"h100-a": "nvidia-cdi", "l40s": None}, "nvidia-cdi", "mine"),  # the setting wins
])
def test_the_runtimeclass_keeps_its_handler_while_no_host_reports_one(hostvars, setting, handlers, existing, expected):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import runtime_class_handler
    hv = {h: {**hostvars[h], **({} if handlers[h] is None else {"gpuops_container_toolkit_runtime_handler": handlers[h]})}
          for h in handlers}
    nodes = cluster_nodes(list(hv), hv, {"gpuops_container_toolkit_runtime_handler": ""})
    found = [] if existing is None else [{"kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": existing}]
    assert runtime_class_handler(nodes, setting, found) == expected


def test_expected_resources_follow_the_mig_config_the_manager_applies(hostvars):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import expected_allocatable
    nodes = cluster_nodes(["a100"], hostvars, KEYS)
    assert expected_allocatable(nodes, "mixed", {}, "") == {"a100-node": {
        "nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}}
    all_1g = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    assert expected_allocatable(nodes, "mixed", {}, "", mig_applied={"a100-node": all_1g}) == {
        "a100-node": {"nvidia.com/mig-1g.10gb": 14}}
    # An entry for another model, or for GPU 1 only: GPU 0 keeps its devices.
    other = [{"devices": "all", "device-filter": ["0x233010DE"], "mig-enabled": False}]
    gpu1 = [{"devices": [1], "device-filter": "0x20B510DE", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]
    assert expected_allocatable(nodes, "mixed", {}, "", mig_applied={"a100-node": other})["a100-node"]["nvidia.com/gpu"] == 1
    assert expected_allocatable(nodes, "mixed", {}, "", mig_applied={"a100-node": gpu1}) == {"a100-node": {
        "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-7g.80gb": 1}}
    disabled = [{"devices": "all", "mig-enabled": False}]
    assert expected_allocatable(nodes, "mixed", {}, "", mig_applied={"a100-node": disabled}) == {"a100-node": {"nvidia.com/gpu": 2}}


def test_the_mig_configs_a_run_set_and_their_entries(hostvars):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import mig_applied, mig_configs_set
    hv = copy.deepcopy(hostvars)
    hv["a100"]["gpuops_mig_manager_config"] = "all-1g.10gb"
    nodes = cluster_nodes(list(hv), hv, {"gpuops_mig_manager_config": ""})
    # Only the Nodes whose label changed; the L40S (not MIG-capable) never is.
    assert mig_configs_set(nodes, "all-disabled", ["a100-node", "h100-a", "l40s"]) == {"a100-node": "all-1g.10gb", "h100-a": "all-disabled"}
    parted = {"version": "v1", "mig-configs": {"all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}
    assert mig_applied({"a100-node": "all-1g.10gb", "h100-a": "no-such"}, parted) == {"a100-node": parted["mig-configs"]["all-1g.10gb"]}


def test_the_single_strategy_is_refused_where_a_nodes_mig_config_leaves_a_layout_it_cannot_advertise(hostvars):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import mig_errors
    hv = {h: copy.deepcopy(hostvars[h]) for h in ("a100", "h100-a")}
    nodes = cluster_nodes(list(hv), hv, {"gpuops_mig_manager_config": ""})
    # all-disabled everywhere: no GPU in MIG mode, single advertises whole GPUs.
    assert mig_errors({}, nodes, "all-disabled", mig_strategy="single") == []
    hv["a100"]["gpuops_mig_manager_config"] = "all-balanced"
    nodes = cluster_nodes(list(hv), hv, {"gpuops_mig_manager_config": ""})
    errors = mig_errors({}, nodes, "all-disabled", mig_strategy="single")
    assert errors == ["gpuops_device_plugin_mig_strategy: single advertises no GPU on a100-node, whose MIG config all-balanced "
                      "leaves MIG devices of 3 profiles (1g.10gb, 2g.20gb, 3g.40gb); use mixed, or a config with one profile "
                      "on every GPU (gpuops_mig_manager_config, all-<profile>)"]
    assert mig_errors({}, nodes, "all-disabled", mig_strategy="mixed") == []
    hv["a100"]["gpuops_mig_manager_config"] = "all-1g.10gb"
    nodes = cluster_nodes(list(hv), hv, {"gpuops_mig_manager_config": ""})
    assert mig_errors({}, nodes, "all-disabled", mig_strategy="single") == []
    # Half the GPUs in MIG mode (a config for GPU 1 only, GPU 0 left whole).
    custom = {"gpu1": [{"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}, {"devices": [0], "mig-enabled": False}]}
    hv["a100"]["gpuops_mig_manager_config"] = "gpu1"
    nodes = cluster_nodes(list(hv), hv, {"gpuops_mig_manager_config": ""})
    assert "leaves 1 of its 2 GPUs in MIG mode" in mig_errors(custom, nodes, "all-disabled", mig_strategy="single")[0]


def test_each_node_carries_how_its_driver_runs_its_rdma_stack_and_os(hostvars, info_of):
    old_schema = copy.deepcopy(info_of("l40s"))
    del old_schema["node"]["os"]
    hosts = {**hostvars, "l40s": {"gpuops_gpu_info": old_schema, "gpuops_driver_method": "containerized",
                                  "gpuops_rdma": {"peermem": True, "stack": "doca"}},
             "h100-a": {"gpuops_gpu_info": info_of("hgx-h100"), "gpuops_driver_method": "containerized",
                        "gpuops_driver": {"method": "precompiled", "packages": [f"p{i}" for i in range(9)]}}}
    nodes = cluster_nodes(list(hosts), hosts, KEYS)
    # The driver role's method where it ran wins over the setting; a few of its packages are kept, for a message.
    assert nodes["h100-a"]["driver"] == {"method": "precompiled", "packages": ["p0", "p1", "p2", "p3", "p4", "p5"]}
    assert nodes["l40s"]["driver"] == {"method": "containerized", "packages": []}
    assert nodes["cpu"]["driver"] == {"method": "auto", "packages": []}
    assert nodes["l40s"]["rdma"] == {"peermem": True, "host_ofed": True}
    assert nodes["h100-b"]["rdma"] == {"peermem": False, "host_ofed": False}
    # Facts from before gpu_info's schema 5 name no OS; the running kernel is there either way.
    assert nodes["l40s"]["info"]["node"]["os"] is None and nodes["l40s"]["info"]["node"]["kernel"]
    assert nodes["h100-b"]["info"]["node"]["os"]["id"]
