"""The cluster side's decisions: node labels, device plugin config rules, expected resources, MIG configs (their rules
shared with the host side, _common/mig.py), DCGM CSV.

Facts are the cluster side's projection of gpu_info (test_facts.py) for real hardware (A100 80GB PCIe with MIG,
L40S), with the NVML profile table the driver reports for the A100.
"""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import mig
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.mig import gpu_models
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import rules as cluster
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.labels import plan

from .test_facts import A30_PROFILES, A100, CPU, L40S, gpu, info

TS4 = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}


def test_node_labels_follow_the_gpus():
    assert cluster.node_labels(CPU, cluster.COMPONENTS) == {"nvidia.com/gpu.present": "false"}
    l40s = cluster.node_labels(L40S, ["device-plugin", "mig-manager"])
    assert l40s == {"nvidia.com/gpu.present": "true", "nvidia.com/mig.capable": "false",
                    "nvidia.com/gpu.deploy.device-plugin": "true"}
    assert cluster.node_labels(A100, ["mig-manager"])["nvidia.com/gpu.deploy.mig-manager"] == "true"


@pytest.mark.parametrize(("config", "strategy", "fragment"), [
    ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}}, "none",
     "resources[0].replicas: 1 is not accepted"),
    ({"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": True}]}}}, "none", "replicas: True"),
    ({"sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2}]}}}, "mixed", "MPS is not supported with MIG strategy mixed"),
    ({"sharing": {"timeSlicing": TS4["sharing"]["timeSlicing"], "mps": TS4["sharing"]["timeSlicing"]}}, "none",
     "mutually exclusive"),
    ({"sharing": {"timeSlicing": {"renameByDefault": "yes", "resources": [{"name": "gpu", "replicas": 2}]}}}, "none",
     "renameByDefault: 'yes' must be a boolean"),
    ({"sharing": {"timeSlicing": {"failRequestsGreaterThanOne": 1, "resources": [{"name": "gpu", "replicas": 2}]}}}, "none",
     "failRequestsGreaterThanOne: 1 must be a boolean"),
    ({"sharing": {"timeSlicing": {"resources": []}}}, "none", "no resources specified"),
    ({"sharing": {"timeslicing": {}}}, "none", "unknown key(s) ['timeslicing']"),
    ({"version": "v2"}, "none", "version: 'v2'"),
    ({"flags": {"migStrategy": "single"}}, "mixed", "differs from gpuops_device_plugin_mig_strategy"),
    ({"sharing": {"mps": {"resources": [{"name": "mig-1g.10gb", "replicas": 2}]}}}, "single", "MPS cannot share MIG devices"),
])
def test_device_plugin_rules(config, strategy, fragment):
    errors = cluster.check_plugin_configs("gpuops_device_plugin_configs", {"c": config}, "", strategy)
    assert any(fragment in e for e in errors), errors
    assert all(e.startswith(("gpuops_device_plugin_configs", "gpuops_device_plugin")) for e in errors)


def test_a_good_config_passes_and_the_default_must_exist():
    assert cluster.check_plugin_configs("v", {"ts-4": TS4}, "ts-4", "mixed") == []
    assert "gpuops_device_plugin_default_config: 'nope'" in cluster.check_plugin_configs("v", {"ts-4": TS4}, "nope", "none")[0]


def test_node_choices_are_checked():
    mps = {"sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2}]}}}
    errors = cluster.check_node_plugin_configs({"a100": "mps-2", "l40s": "nope"}, {"mps-2": mps}, {"a100": A100, "l40s": L40S})
    assert any("on a100: 'mps-2' uses MPS" in e for e in errors)
    assert any("on l40s: 'nope' names no config" in e for e in errors)
    assert cluster.check_node_plugin_configs({"l40s": "mps-2"}, {"mps-2": mps}, {"l40s": L40S}) == []


def test_expected_resources_multiply_shared_gpus():
    assert cluster.advertised(L40S, "mixed", TS4) == {"nvidia.com/gpu": 16}
    assert cluster.advertised(L40S, "none", None) == {"nvidia.com/gpu": 4}
    renamed = {"sharing": {"timeSlicing": {"renameByDefault": True, "resources": [{"name": "gpu", "replicas": 2}]}}}
    assert cluster.advertised(L40S, "none", renamed) == {"nvidia.com/gpu.shared": 8}
    assert cluster.advertised(A100, "mixed", None) == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1,
                                                       "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}
    assert cluster.advertised(A100, "single", None) == {}  # one GPU in MIG mode, one not
    assert cluster.advertised(CPU, "mixed", TS4) == {}


@pytest.mark.parametrize(("devices", "fits"), [
    ({"1g.10gb": 7}, True), ({"3g.40gb": 2}, True), ({"4g.40gb": 1, "3g.40gb": 1}, True),
    ({"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}, True), ({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, True),
    ({"2g.20gb": 3, "1g.10gb": 1}, True), ({"1g.20gb": 4}, True),
    ({"2g.20gb": 3, "1g.10gb": 2}, False), ({"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}, False),
    ({"7g.80gb": 1, "1g.10gb": 1}, False), ({"1g.20gb": 4, "1g.10gb": 1}, False),
])
def test_placement_matches_the_known_layouts(devices, fits):
    assert mig._fits(gpu_models(A100)["0x20B510DE"]["profiles"], devices) is fits


def test_a_four_slice_gpu():
    table = gpu_models(info("20b7", [gpu(0, "a", profiles=A30_PROFILES, name="NVIDIA A30")]))["0x20B710DE"]["profiles"]
    assert mig._fits(table, {"2g.12gb": 1, "1g.6gb": 2}) and not mig._fits(table, {"4g.24gb": 1, "1g.6gb": 1})


@pytest.mark.parametrize(("mig_devices", "fragment"), [
    ({"1g.12gb": 1}, "1g.12gb is not a MIG profile NVIDIA A100 80GB PCIe (0x20B510DE) can host"),
    ({"1g.10gb": 8}, "8 x 1g.10gb (at most 7)"),
    ({"2g.20gb": 3, "1g.10gb": 2}, "do not fit together"),
    ({"1gb": 1}, "'1gb' is not a MIG profile name"),
    ({"1g.10gb": 0}, "every count is 0"),
])
def test_mig_configs_are_checked_against_the_model(mig_devices, fragment):
    models = gpu_models(A100)
    errors = mig.check_mig_configs("gpuops_mig_manager_configs",
                                   {"c": [{"devices": "all", "mig-enabled": True, "mig-devices": mig_devices}]}, models)
    assert any(fragment in e for e in errors), errors
    assert all(e.startswith("gpuops_mig_manager_configs['c'][0]") for e in errors)


def test_a_device_filter_limits_the_models_checked():
    models = {**gpu_models(A100), "0x233010DE": {"name": "H100", "profiles": {}}}
    entry = {"device-filter": "0x20B510DE", "devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}
    assert mig.check_mig_configs("v", {"c": [entry]}, models) == []
    assert "are unknown" in mig.check_mig_configs("v", {"c": [{**entry, "device-filter": None}]}, models)[0]


def test_generated_configs_match_nvidia_defaults_for_the_a100():
    configs = mig.generated_mig_configs(gpu_models(A100))
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs["all-balanced"] == [{"devices": "all", "mig-enabled": True,
                                        "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}]
    assert configs["all-1g.10gb.me"][0]["mig-devices"] == {"1g.10gb+me": 1}
    assert configs["all-1g.20gb"][0]["mig-devices"] == {"1g.20gb": 4}
    both = mig.generated_mig_configs({**gpu_models(A100), **gpu_models(
        info("20b7", [gpu(0, "x", profiles=A30_PROFILES, name="NVIDIA A30")]))})
    assert [e["device-filter"] for e in both["all-balanced"]] == ["0x20B510DE", "0x20B710DE"]
    assert both["all-balanced"][1]["mig-devices"] == {"1g.6gb": 2, "2g.12gb": 1}
    assert mig.check_mig_configs("v", both, {**gpu_models(A100)}) == []


def test_node_mig_choice_must_exist_and_cover_the_gpu():
    configs = mig.generated_mig_configs(gpu_models(A100))
    assert cluster.check_node_mig_configs({"a": "all-balanced"}, configs, {"a": ["0x20B510DE"]}) == []
    assert "'nope' is not a MIG config" in cluster.check_node_mig_configs({"a": "nope"}, configs, {"a": ["0x20B510DE"]})[0]
    filtered = {"x": [{"device-filter": "0x233010DE", "devices": "all", "mig-enabled": False}]}
    assert "has no entry for the node's GPUs" in cluster.check_node_mig_configs({"a": "x"}, filtered, {"a": ["0x20B510DE"]})[0]


def test_a_typo_in_the_default_mig_config_names_the_default_once():
    # It was reported as gpuops_mig_manager_config on every node, a variable the user had not set.
    configs = mig.generated_mig_configs(gpu_models(A100))
    models = {"a": ["0x20B510DE"], "b": ["0x20B510DE"], "c": ["0x20B510DE"]}
    variables = {"a": "gpuops_mig_manager_default_config", "b": "gpuops_mig_manager_default_config", "c": "gpuops_mig_manager_config"}
    errors = cluster.check_node_mig_configs({"a": "all-balancd", "b": "all-balancd", "c": "all-1g.5gbb"}, configs, models, variables)
    assert errors == [
        "gpuops_mig_manager_default_config: 'all-balancd' is not a MIG config (known: " + ", ".join(sorted(configs)) + ")",
        "gpuops_mig_manager_config on c: 'all-1g.5gbb' is not a MIG config (known: " + ", ".join(sorted(configs)) + ")",
    ]


@pytest.mark.parametrize(("csv", "fragment"), [
    ("DCGM_FI_DEV_GPU_UTIL, gauge\n", "has 2 field(s)"),
    ("DCGM_FI_DEV_GPU_UTIL, gauge, GPU, util\n", "has 4 field(s)"),
    ("DCGM_FI_DEV_GPU_UTILS, gauge, GPU utilization.\n", "'DCGM_FI_DEV_GPU_UTILS' is not a DCGM field name"),
    ("DCGM_FI_DEV_GPU_UTIL, gage, GPU utilization.\n", "type 'gage'"),
    ("# only a comment\n", "no metric records"),
])
def test_metrics_csv_is_checked(csv, fragment):
    errors = cluster.check_metrics_csv("gpuops_dcgm_exporter_metrics", csv)
    assert any(fragment in e for e in errors), errors


def test_good_metrics_pass_and_extra_fields_are_accepted():
    csv = ("# c\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock.\nDCGM_FI_DRIVER_VERSION, label, Driver.\n"
           "DCGM_FI_PROF_NVLINK_L17_RX_BYTES, counter, x.\nDCGM_FI_DEV_ECC_DBE_AGG_SRM, counter, y.\n"
           "DCGM_EXP_XID_ERRORS_COUNT, gauge, z.\ndcgm_gpu_temp, gauge, legacy.\n")
    assert cluster.check_metrics_csv("v", csv) == []
    assert cluster.check_metrics_csv("v", "DCGM_FI_DEV_NEW_THING, gauge, x.\n", ["DCGM_FI_DEV_NEW_THING"]) == []
    # Range markers are not fields.
    assert cluster.check_metrics_csv("v", "DCGM_FI_FIRST_VGPU_FIELD_ID, gauge, x.\n")


def test_node_label_plan_patches_only_what_differs_and_keeps_set_values():
    current = {"n1": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "false", "x": "1"},
               "n2": {"nvidia.com/gpu.present": "true"}}
    wanted = {"n1": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true", "x": None},
              "n2": {"nvidia.com/gpu.present": "true"}, "n3": {"a": "b"}}
    assert plan(current, wanted, {"nvidia.com/gpu.deploy.device-plugin"}) == {"n1": {"x": None}}
    assert plan(current, wanted, set()) == {"n1": {"nvidia.com/gpu.deploy.device-plugin": "true", "x": None}}
