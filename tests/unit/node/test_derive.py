from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.derive import (
    fabric_manager_required,
    mig_memory_gb,
    mig_profile_name,
    recommend_kernel_module_type,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hwdb import lookup_gpu


def pci_gpu(device_id: str) -> dict:
    return {"device_id": device_id, **lookup_gpu(device_id)}


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        (["2330"] * 8, "open"),  # H100: both work, open is the default
        (["20b5", "20b5"], "open"),  # A100
        (["1eb8"], "open"),  # T4, Turing: the oldest open-capable
        (["26b9"] * 4, "open"),  # L40S
        (["2901"] * 8, "open"),  # B200: open only
        (["2342"], "open"),  # GH200: Grace Hopper, open only
        (["1db1"] * 4, "proprietary"),  # V100
        (["1b38"], "proprietary"),  # P40, Pascal
        (["17fd"], "proprietary"),  # M40, Maxwell
        (["1db1", "1eb8"], "proprietary"),  # Volta with Turing: proprietary serves both
    ],
)
def test_recommended_kernel_module_type(ids, expected):
    result = recommend_kernel_module_type([pci_gpu(i) for i in ids])
    assert result["error"] is None
    assert result["type"] == expected


def test_volta_with_blackwell_has_no_common_answer():
    result = recommend_kernel_module_type([pci_gpu("1db1"), pci_gpu("2901")])
    assert result["type"] is None
    assert "volta need proprietary" in result["error"] and "blackwell need open" in result["error"]


def test_grace_hopper_with_pascal_is_an_error_naming_grace():
    result = recommend_kernel_module_type([pci_gpu("2342"), pci_gpu("1b38")])
    assert "hopper (Grace) need open" in result["error"]


def test_no_gpu_recommends_nothing():
    assert recommend_kernel_module_type([]) == {"type": None, "reason": "no NVIDIA GPU on the PCI bus", "error": None}


def test_unknown_ids_are_named_not_guessed():
    only_unknown = recommend_kernel_module_type([pci_gpu("ffff")])
    assert only_unknown["type"] is None and "ffff" in only_unknown["error"]
    mixed = recommend_kernel_module_type([pci_gpu("ffff"), pci_gpu("2330")])
    assert mixed["type"] == "open" and "ffff are not in the GPU table" in mixed["reason"]


def _pci(gpus: list, switches: int = 0, nics: int = 0, bridges: int = 0) -> dict:
    network = [{"bus_id": f"0000:{i:02x}:00.0", "switch_managed": False} for i in range(nics)]
    network += [{"bus_id": f"0000:8a:00.{i}", "switch_managed": True} for i in range(bridges)]
    return {"gpus": gpus, "nvswitches": [{"device_id": "22a3"}] * switches, "network": network}


def test_fabric_manager_for_nvswitches_on_pci():
    result = fabric_manager_required(_pci([pci_gpu("2330")] * 8, switches=4, nics=8))
    assert (result["required"], result["nvlink5"], result["mode"]) == (True, False, "fabricmanager")
    assert result["reason"] == "4 NVSwitch device(s) on the PCI bus"


def test_nvlink5_from_the_switch_bridges_vpd():
    result = fabric_manager_required(_pci([pci_gpu("2901")] * 8, nics=8, bridges=2))
    assert (result["required"], result["nvlink5"], result["mode"]) == (True, True, "nvlsm")
    assert "SW_MNG in the VPD of 0000:8a:00.0, 0000:8a:00.1" in result["reason"]


def test_nvlink5_hgx_without_visible_bridges_still_needs_the_subnet_manager():
    result = fabric_manager_required(_pci([pci_gpu("2901")] * 8))
    assert (result["required"], result["nvlink5"], result["mode"]) == (True, True, "nvlsm")
    assert "8x NVIDIA B200" in result["reason"] and "no SW_MNG bridge" in result["reason"]


@pytest.mark.parametrize("device_id", ["2941", "31c2", "31c3"])
def test_gb200_and_gb300_trays_run_imex_not_fabric_manager(device_id):
    # A tray's NICs may well be switch managed too: the tray rule wins.
    result = fabric_manager_required(_pci([pci_gpu(device_id)] * 4, nics=4, bridges=1))
    assert (result["required"], result["mode"]) == (False, "imex")
    assert "IMEX" in result["reason"]


@pytest.mark.parametrize(
    "pci",
    [
        _pci([pci_gpu("20b5")] * 2),  # PCIe A100s
        _pci([pci_gpu("2901")]),  # a single B200 has no fabric
        _pci([pci_gpu("2342")], nics=1),  # GH200
        _pci([pci_gpu("26b9")] * 4, bridges=0, nics=2),  # L40S with ordinary NICs
        _pci([], bridges=2),  # bridges without a GPU: nothing to manage here
        _pci([]),
    ],
)
def test_no_fabric_manager(pci):
    result = fabric_manager_required(pci)
    assert (result["required"], result["mode"]) == (False, "none")


A100_80GB = 81920 * 1024 * 1024
H100_80GB = 81559 * 1024 * 1024
A100_40GB = 40960 * 1024 * 1024


@pytest.mark.parametrize(
    ("gi_profile", "memory_mb", "device_bytes", "ci_slices", "expected"),
    [
        (0, 9728, A100_80GB, None, "1g.10gb"),
        (0, 4864, A100_40GB, None, "1g.5gb"),
        (7, 9728, A100_80GB, None, "1g.10gb+me"),
        (9, 19968, A100_80GB, None, "1g.20gb"),
        (1, 19968, A100_80GB, 2, "2g.20gb"),
        (2, 40192, A100_80GB, 1, "1c.3g.40gb"),
        (4, 80896, A100_80GB, 7, "7g.80gb"),
        (0, 9984, H100_80GB, 1, "1g.10gb"),  # 81559 MiB rounds up to 80 GB
        (2, 40320, H100_80GB, None, "3g.40gb"),
        (13, 9984, H100_80GB, None, "1g.10gb-me"),
        (15, 9984, H100_80GB, None, "1g.10gb+me.all"),
        (12, 40320, H100_80GB, None, "4g.40gb+gfx"),
        (99, 9728, A100_80GB, None, None),  # an enum this table does not know is not guessed
        (0, 9728, 0, None, None),
    ],
)
def test_mig_profile_name_as_gfd_spells_it(gi_profile, memory_mb, device_bytes, ci_slices, expected):
    assert mig_profile_name(gi_profile, memory_mb, device_bytes, ci_slices) == expected


def test_mig_memory_rounds_the_share_up_to_eighths():
    # 5 GB of an 80 GB GPU is a sixteenth; rounded up to an eighth it is named 10 GB, as nvidia-smi does.
    assert mig_memory_gb(5120, A100_80GB) == 10
    assert mig_memory_gb(10241, A100_80GB) == 20
