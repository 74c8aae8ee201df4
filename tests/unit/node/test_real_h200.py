"""What the collection makes of a real GPU: gpu_info's reading of an NVIDIA H200 (driver 580.159.04, open modules, a
Firecracker VM on the device machine this project is sometimes lent), recorded on 2026-11-28 in
recorded/h200-580.159.04-gpu_info.json, and read again on 2026-12-04 (lab/device_check.sh) on another such machine:
the same but for the GPU's UUID and the VM's kernel, and schema 6 (node.runfile: null). The file is the second reading.

The lab's GPUs are fakes; this is the one reading here that real NVML made. The checks compare what the collection derives
from it with what NVIDIA publishes for that GPU (shared/reference/cluster-facts.md: mig-parted's default configs)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import facts
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.mig import check_mig_entry, generated_mig_configs, gpu_models
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import slim
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd import node_gfd_labels
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.preflight import findings, report_lines

RECORDED = json.loads((Path(__file__).parent / "recorded/h200-580.159.04-gpu_info.json").read_text())


@pytest.fixture
def h200() -> dict:
    """The reading brought to the current schema: a later schema adds its keys here, as that machine would answer them."""
    info = copy.deepcopy(RECORDED["gpu_info"])
    assert info["schema_version"] == 6
    info["schema_version"] = facts.SCHEMA_VERSION
    info["node"]["container_runtimes"] = []  # 7: not read then; that VM had no containerd or CRI-O
    return info


def test_the_real_reading_has_the_declared_structure(h200, schema_errors):
    assert schema_errors(h200, facts.GpuInfo) == []


def test_the_device_table_names_the_gpu_as_nvml_does(h200):
    (pci,), (nvml,) = h200["pci"]["gpus"], h200["nvml"]["gpus"]
    assert (pci["device_id"], pci["name"], pci["architecture"]) == ("2335", nvml["name"], "hopper")
    assert pci["compute_capability"] == nvml["compute_capability"]


def test_the_preflight_finds_nothing_to_block_and_says_what_it_will_do(h200):
    # That VM has no kernel under /lib/modules (kernel.installed is empty): the driver role would refuse to plan there
    # unless told the kernel, so the preflight judges it as told (test_that_vm_s_root_without_a_kernel_blocks below).
    found = findings(h200, "Ubuntu", "24", {"driver_method": "auto", "fabricmanager_enabled": True,
                                            "driver_kernel_release": h200["node"]["kernel"]["running"]})
    assert found == []
    assert report_lines("gpu", h200, found) == [
        "== gpu ==",
        "GPUs: 1x NVIDIA H200 (hopper)",
        "NVSwitches: 0; NVIDIA NICs: 0",
        "Driver: loaded, 580.159.04 (CUDA 13.0); Secure Boot: not_efi",
        "Will use: open kernel modules (hopper GPUs support the open modules, NVIDIA's default)",
        "Fabric Manager: not needed (no NVSwitch and no NVLink5 HGX board)",
        "Nothing blocks the install.",
    ]


def test_that_vm_s_root_without_a_kernel_blocks(h200):
    assert h200["node"]["kernel"]["installed"] == []
    found = findings(h200, "Ubuntu", "24", {"driver_method": "auto", "fabricmanager_enabled": True})
    assert [f["id"] for f in found] == ["no_kernel_installed"]
    assert "Nothing blocks the install." not in report_lines("gpu", h200, found)


def test_gfd_labels_from_real_nvml(h200):
    labels, source = node_gfd_labels(h200)
    assert source == "nvml"
    assert {k: labels[k] for k in ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.family",
                                   "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor", "nvidia.com/cuda.driver.major",
                                   "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev", "nvidia.com/mig.capable")} == {
        "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.memory": "143771",
        "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver.major": "580", "nvidia.com/cuda.driver.minor": "159", "nvidia.com/cuda.driver.rev": "04",
        "nvidia.com/mig.capable": "true"}


def test_the_generated_mig_configs_are_nvidias_for_the_h200(h200):
    """mig-parted's default config for 0x233510DE: every profile at its maximum, and all-balanced 1g.18gb:2, 2g.35gb:1,
    3g.71gb:1. The collection derives them from the profiles NVML lists, not from a table of its own."""
    configs = generated_mig_configs(gpu_models(slim(h200)))
    wanted = {"all-1g.18gb": {"1g.18gb": 7}, "all-1g.18gb.me": {"1g.18gb+me": 1}, "all-1g.35gb": {"1g.35gb": 4},
              "all-2g.35gb": {"2g.35gb": 3}, "all-3g.71gb": {"3g.71gb": 2}, "all-4g.71gb": {"4g.71gb": 1},
              "all-7g.141gb": {"7g.141gb": 1}, "all-balanced": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}
    assert {k: v[0]["mig-devices"] for k, v in configs.items() if k.startswith("all-") and k not in ("all-disabled", "all-enabled")} \
        == wanted
    assert all(v[0]["devices"] == "all" and "device-filter" not in v[0] for v in configs.values())


@pytest.mark.parametrize(("devices", "error"), [
    ({"3g.71gb": 2}, None),
    ({"4g.71gb": 1, "3g.71gb": 1}, None),
    ({"4g.71gb": 1, "2g.35gb": 1, "1g.18gb": 1}, None),
    ({"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2}, None),
    ({"2g.35gb": 3, "1g.18gb": 1}, None),
    ({"4g.71gb": 2}, "2 x 4g.71gb (at most 1) on NVIDIA H200 (0x233510DE)"),
    ({"3g.71gb": 3}, "3 x 3g.71gb (at most 2) on NVIDIA H200 (0x233510DE)"),
    ({"3g.71gb": 2, "1g.18gb": 1}, "do not fit together on one NVIDIA H200 (0x233510DE)"),
    ({"1g.20gb": 1}, "1g.20gb is not a MIG profile NVIDIA H200 (0x233510DE) can host; it offers 1g.18gb, 1g.18gb+me, 1g.35gb"),
])
def test_mig_layouts_are_judged_by_the_real_profiles(h200, devices, error):
    """The placements NVIDIA's MIG user guide allows on a 7-slice GPU: 3g+3g, 4g+3g, 4g+2g+1g, 3g+2g+1g+1g and 2g x 3 + 1g
    fit; 4g+4g, 3g x 3 and 3g+3g+1g do not."""
    errors = check_mig_entry("c[0]", {"devices": "all", "mig-enabled": True, "mig-devices": devices}, gpu_models(slim(h200)))
    assert (errors == []) if error is None else (len(errors) == 1 and error in errors[0]), errors
