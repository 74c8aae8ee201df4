# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions computed from gpu_info's structure: pure functions, no I/O.

- which kernel module flavour (open or proprietary) the node's GPUs need,
- whether the node needs NVIDIA Fabric Manager,
- the MIG profile name of a GPU instance, as GFD and the MIG manager spell it.
"""

from __future__ import annotations

import math

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import FabricManager, KernelModuleType, PciFacts, PciGpu
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hwdb import OPEN_CAPABLE, OPEN_ONLY

LEGACY_ARCHITECTURES = frozenset(("maxwell", "pascal", "volta"))
# Blackwell data-center parts on NVLink5 HGX boards, whose NVSwitches are not PCI devices.
NVLINK5_HGX_DEVICE_IDS = frozenset(("2901",))
# GB200 (2941) and GB300 (31c2, 31c3) NVL compute trays: their NVSwitches live in switch trays managed off
# the host, and the tray runs IMEX instead of Fabric Manager (the ids a Fabric Manager ExecCondition skips on).
IMEX_TRAY_DEVICE_IDS = frozenset(("2941", "31c2", "31c3"))

# NVML's GPU-instance profile enum (NVML_GPU_INSTANCE_PROFILE_*): slices and the name's attribute suffix.
GPU_INSTANCE_PROFILES = {
    0: (1, ""), 1: (2, ""), 2: (3, ""), 3: (4, ""), 4: (7, ""), 5: (8, ""), 6: (6, ""),
    7: (1, "+me"), 8: (2, "+me"), 9: (1, ""),
    10: (1, "+gfx"), 11: (2, "+gfx"), 12: (4, "+gfx"),
    13: (1, "-me"), 14: (2, "-me"), 15: (1, "+me.all"), 16: (2, "+me.all"),
}
_MIB = 1024 * 1024
_GIB = 1024 * _MIB


def recommend_kernel_module_type(gpus: list[PciGpu]) -> KernelModuleType:
    """Which kernel module flavour the GPUs need.

    Maxwell, Pascal and Volta need the proprietary modules; Blackwell and Grace Hopper need the open
    ones; anything else from Turing on works with both and gets open (NVIDIA's default since 560).
    GPUs with no common answer are an error to report; ids the table does not know are named.
    """
    if not gpus:
        return {"type": None, "reason": "no NVIDIA GPU on the PCI bus", "error": None}
    unknown = sorted({str(g["device_id"]) for g in gpus if g["architecture"] == "unknown"})
    known = [g for g in gpus if g["architecture"] != "unknown"]
    need_proprietary = sorted({g["architecture"] for g in known if g["architecture"] in LEGACY_ARCHITECTURES})
    need_open = sorted({g["architecture"] + (" (Grace)" if g["grace"] else "") for g in known
                        if g["architecture"] in OPEN_ONLY or g["grace"]})
    if need_proprietary and need_open:
        return {
            "type": None,
            "reason": None,
            "error": f"GPUs need different kernel module types: {', '.join(need_proprietary)} need proprietary, "
                     f"{', '.join(need_open)} need open; no driver serves both on one node",
        }
    if not known:
        return {
            "type": None,
            "reason": None,
            "error": f"device ids {', '.join(unknown)} are not in the collection's GPU table; set the kernel module type explicitly",
        }
    note = f"; device ids {', '.join(unknown)} are not in the GPU table" if unknown else ""
    if need_proprietary:
        return {"type": "proprietary", "reason": f"{', '.join(need_proprietary)} GPUs need the proprietary modules{note}", "error": None}
    if need_open:
        return {"type": "open", "reason": f"{', '.join(need_open)} GPUs need the open modules{note}", "error": None}
    archs = sorted({g["architecture"] for g in known if g["architecture"] in OPEN_CAPABLE})
    return {"type": "open", "reason": f"{', '.join(archs)} GPUs support the open modules, NVIDIA's default{note}", "error": None}


def fabric_manager_required(pci: PciFacts) -> FabricManager:
    """What the node runs for its NVLink fabric, and why.

    GB200/GB300 compute trays run IMEX; NVSwitches on the PCI bus (NVLink4 and older) need Fabric Manager;
    ConnectX bridge functions with SW_MNG in their VPD (or, when those are not visible, several NVLink5 HGX
    GPUs) mark an NVLink5 board, whose NVSwitches are not PCI devices: Fabric Manager with the NVLink
    Subnet Manager.
    """
    trays = [g for g in pci["gpus"] if g["device_id"] in IMEX_TRAY_DEVICE_IDS]
    if trays:
        return {"required": False, "nvlink5": True, "mode": "imex",
                "reason": f"{len(trays)}x {trays[0]['name'] or trays[0]['device_id']} on an NVL compute tray: its NVSwitches "
                          "are managed off the host; the tray runs IMEX, not Fabric Manager"}
    switches = pci["nvswitches"]
    if switches:
        return {"required": True, "reason": f"{len(switches)} NVSwitch device(s) on the PCI bus", "nvlink5": False,
                "mode": "fabricmanager"}
    bridges = [n for n in pci["network"] if n.get("switch_managed")]
    if bridges and pci["gpus"]:
        return {"required": True, "nvlink5": True, "mode": "nvlsm",
                "reason": f"NVLink5 board: {len(bridges)} switch management bridge function(s) (SW_MNG in the VPD of "
                          f"{', '.join(n['bus_id'] for n in bridges)}); Fabric Manager runs with the NVLink Subnet Manager"}
    nvlink5 = [g for g in pci["gpus"] if g["device_id"] in NVLINK5_HGX_DEVICE_IDS]
    if len(nvlink5) > 1:
        return {
            "required": True,
            "reason": f"NVLink5 HGX board ({len(nvlink5)}x {nvlink5[0]['name']}): its NVSwitches are not PCI devices "
                      "(no SW_MNG bridge function visible); Fabric Manager runs with the NVLink Subnet Manager",
            "nvlink5": True,
            "mode": "nvlsm",
        }
    return {"required": False, "reason": "no NVSwitch and no NVLink5 HGX board", "nvlink5": False, "mode": "none"}


def mig_memory_gb(memory_mb: int, device_memory_bytes: int) -> int:
    """A MIG instance's memory in the profile name: its share of the GPU rounded up to eighths, in whole GB."""
    fraction = math.ceil(memory_mb * _MIB / device_memory_bytes * 8) / 8
    total_gb = (device_memory_bytes + _GIB - 1) // _GIB
    return math.floor(fraction * total_gb + 0.5)


def mig_profile_name(gi_profile: int, memory_mb: int, device_memory_bytes: int, ci_slices: int | None = None) -> str | None:
    """The profile name ("1g.10gb", "1c.3g.40gb", "1g.10gb+me") of a GPU instance, or None for an unknown enum.

    gi_profile is NVML's profile enum (the index nvmlDeviceGetGpuInstanceProfileInfo takes, not the
    profile's id); ci_slices, when smaller than the GPU instance, names the compute instance too.
    """
    if gi_profile not in GPU_INSTANCE_PROFILES or device_memory_bytes <= 0:
        return None
    slices, suffix = GPU_INSTANCE_PROFILES[gi_profile]
    name = f"{slices}g.{mig_memory_gb(memory_mb, device_memory_bytes)}gb{suffix}"
    return f"{ci_slices}c.{name}" if ci_slices and ci_slices != slices else name
