# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decisions computed from gpu_info's structure: pure functions, no I/O.

- which kernel module flavour (open or proprietary) the node's GPUs need,
- whether the node needs NVIDIA Fabric Manager,
- the node labels GPU Feature Discovery would set, in GFD's own value formats,
- the MIG profile name of a GPU instance, as GFD and the MIG manager spell it.
"""

from __future__ import annotations

import math
import re

from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hwdb import CLASS_3D, CLASS_VGA, OPEN_CAPABLE, OPEN_ONLY

SHARING_STRATEGIES = ("none", "time-slicing", "mps")
MIG_STRATEGIES = ("none", "single", "mixed")
LEGACY_ARCHITECTURES = frozenset(("maxwell", "pascal", "volta"))
# Blackwell data-center parts on NVLink5 HGX boards, whose NVSwitches are not PCI devices.
NVLINK5_HGX_DEVICE_IDS = frozenset(("2901",))

# NVML's GPU-instance profile enum (NVML_GPU_INSTANCE_PROFILE_*): slices and the name's attribute suffix.
GPU_INSTANCE_PROFILES = {
    0: (1, ""), 1: (2, ""), 2: (3, ""), 3: (4, ""), 4: (7, ""), 5: (8, ""), 6: (6, ""),
    7: (1, "+me"), 8: (2, "+me"), 9: (1, ""),
    10: (1, "+gfx"), 11: (2, "+gfx"), 12: (4, "+gfx"),
    13: (1, "-me"), 14: (2, "-me"), 15: (1, "+me.all"), 16: (2, "+me.all"),
}
_MIB = 1024 * 1024
_GIB = 1024 * _MIB

_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")
_SPACES = re.compile(r"\s+")


def recommend_kernel_module_type(gpus: list[dict]) -> dict[str, object]:
    """Which kernel module flavour the GPUs need.

    Maxwell, Pascal and Volta need the proprietary modules; Blackwell and Grace Hopper need the open
    ones; anything else from Turing on works with both and gets open (NVIDIA's default since 560).
    GPUs with no common answer are an error to report; ids the table does not know are named.
    """
    if not gpus:
        return {"type": None, "reason": "no NVIDIA GPU on the PCI bus", "error": None}
    unknown = sorted({str(g["device_id"]) for g in gpus if g.get("architecture") in (None, "unknown")})
    known = [g for g in gpus if g.get("architecture") not in (None, "unknown")]
    need_proprietary = sorted({str(g["architecture"]) for g in known if g["architecture"] in LEGACY_ARCHITECTURES})
    need_open = sorted({str(g["architecture"]) + (" (Grace)" if g.get("grace") else "") for g in known
                        if g["architecture"] in OPEN_ONLY or g.get("grace")})
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
    archs = sorted({str(g["architecture"]) for g in known if g["architecture"] in OPEN_CAPABLE})
    return {"type": "open", "reason": f"{', '.join(archs)} GPUs support the open modules, NVIDIA's default{note}", "error": None}


def fabric_manager_required(pci: dict) -> dict[str, object]:
    """Whether Fabric Manager must run: NVSwitches on PCI, or an NVLink5 HGX board (no NVSwitch on PCI)."""
    switches = pci.get("nvswitches") or []
    if switches:
        return {"required": True, "reason": f"{len(switches)} NVSwitch device(s) on the PCI bus", "nvlink5": False}
    nvlink5 = [g for g in pci.get("gpus") or [] if g.get("device_id") in NVLINK5_HGX_DEVICE_IDS]
    if len(nvlink5) > 1:
        return {
            "required": True,
            "reason": f"NVLink5 HGX board ({len(nvlink5)}x {nvlink5[0].get('name')}): its NVSwitches are not PCI devices; "
                      "Fabric Manager runs with the NVLink Subnet Manager",
            "nvlink5": True,
        }
    return {"required": False, "reason": "no NVSwitch and no NVLink5 HGX board", "nvlink5": False}


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


def sanitise(*parts: str) -> str:
    """GFD's product value: each part stripped to [A-Za-z0-9-_. ], spaces to '-', parts joined by '-'."""
    return "-".join(_SPACES.sub("-", _UNSAFE.sub("", p).strip()) for p in parts)


def arch_family(major: int, minor: int) -> str:
    """GFD's family label from the compute capability."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell",
            12: "blackwell", 13: "rubin"}.get(major, "undefined")


def _version_labels(driver_version: str | None, cuda_version: str | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    if driver_version:
        parts = driver_version.split(".")
        major, minor = parts[0], parts[1] if len(parts) > 1 else ""
        revision = parts[2] if len(parts) > 2 else ""
        labels.update({
            "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor,
            "nvidia.com/cuda.driver-version.revision": revision,
            "nvidia.com/cuda.driver-version.full": driver_version,
            "nvidia.com/cuda.driver.major": major,
            "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": revision,
        })
    if cuda_version:
        cmajor, _sep, cminor = cuda_version.partition(".")
        labels.update({
            "nvidia.com/cuda.runtime-version.major": cmajor,
            "nvidia.com/cuda.runtime-version.minor": cminor,
            "nvidia.com/cuda.runtime-version.full": cuda_version,
            "nvidia.com/cuda.runtime.major": cmajor,
            "nvidia.com/cuda.runtime.minor": cminor,
        })
    return labels


def _sharing_labels(prefix: str, product: str, sharing: dict) -> dict[str, str]:
    replicas = int(sharing.get("replicas") or 1)
    strategy = sharing.get("strategy", "none") if replicas > 1 else "none"
    if replicas > 1 and not sharing.get("rename_by_default", False):
        product += "-SHARED"
    return {
        f"{prefix}.product": product,
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": strategy,
    }


def _mig_device_labels(prefix: str, parent: str, profile: str, devices: list[dict], sharing: dict) -> dict[str, str]:
    first = devices[0]
    labels = _sharing_labels(prefix, sanitise(parent, "MIG", profile), sharing)
    labels[f"{prefix}.count"] = str(len(devices))
    labels[f"{prefix}.memory"] = str(first.get("memory_mib", 0))
    for key, value in (
        ("multiprocessors", first.get("multiprocessors")),
        ("slices.gi", first.get("slices_gi")),
        ("slices.ci", first.get("slices_ci")),
        ("engines.copy", (first.get("engines") or {}).get("copy")),
        ("engines.decoder", (first.get("engines") or {}).get("decoder")),
        ("engines.encoder", (first.get("engines") or {}).get("encoder")),
        ("engines.jpeg", (first.get("engines") or {}).get("jpeg")),
        ("engines.ofa", (first.get("engines") or {}).get("ofa")),
    ):
        if value is not None:
            labels[f"{prefix}.{key}"] = str(value)
    return labels


def validate_strategies(sharing: dict, mig_strategy: str) -> None:
    """Raise ValueError naming the bad input, before any label is computed."""
    strategy = sharing.get("strategy", "none")
    if strategy not in SHARING_STRATEGIES:
        raise ValueError(f"sharing strategy {strategy!r} is not one of {', '.join(SHARING_STRATEGIES)}")
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"MIG strategy {mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}")
    replicas = sharing.get("replicas", 1)
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"sharing replicas {replicas!r} must be an integer of at least 1")
    if strategy != "none" and replicas < 2:
        raise ValueError(f"sharing strategy {strategy} needs replicas of at least 2, got {replicas}")


def gfd_labels(gpus: list[dict], driver_version: str | None = None, cuda_version: str | None = None,
               sharing: dict | None = None, mig_strategy: str = "none", machine: str | None = None) -> dict[str, str]:
    """The node labels GPU Feature Discovery sets for these GPUs (no timestamp label).

    Each GPU: name, memory_mib, compute_capability ("9.0"), pci_class ("0302"), mig_capable,
    mig_enabled, and mig_devices (list of {profile, memory_mib, multiprocessors, slices_gi,
    slices_ci, engines}) when MIG is enabled. GFD labels a node by its first GPU's model.
    """
    sharing = sharing or {"strategy": "none", "replicas": 1}
    validate_strategies(sharing, mig_strategy)
    if not gpus:
        return {}
    first = gpus[0]
    model = str(first.get("name") or "unknown")
    labels = _version_labels(driver_version, cuda_version)
    classes = {g.get("pci_class") for g in gpus}
    labels["nvidia.com/gpu.mode"] = "compute" if classes == {CLASS_3D} else "graphics" if classes == {CLASS_VGA} else "unknown"
    labels["nvidia.com/mig.capable"] = "true" if any(g.get("mig_capable") for g in gpus) else "false"
    labels["nvidia.com/mps.capable"] = "true" if sharing.get("strategy") == "mps" else "false"
    if machine is not None:
        labels["nvidia.com/gpu.machine"] = sanitise(machine) if machine else "unknown"
    if mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = mig_strategy

    # Full-GPU labels. GPUs in MIG mode count but are labelled without sharing (replicas 0); a GPU
    # not in MIG mode labels them with the sharing config, as GFD's full-GPU labeler overrides.
    mig_gpus = [g for g in gpus if g.get("mig_enabled")]
    unshared = {"strategy": "none", "replicas": 1}
    full = _sharing_labels("nvidia.com/gpu", sanitise(model), unshared if len(mig_gpus) == len(gpus) else sharing)
    if len(mig_gpus) == len(gpus):
        full["nvidia.com/gpu.replicas"] = "0"
    full["nvidia.com/gpu.count"] = str(len(gpus))
    if first.get("memory_mib"):
        full["nvidia.com/gpu.memory"] = str(first["memory_mib"])
    cc = str(first.get("compute_capability") or "0.0")
    major, _sep, minor = cc.partition(".")
    if int(major or 0) > 0:
        full["nvidia.com/gpu.family"] = arch_family(int(major), int(minor or 0))
        full["nvidia.com/gpu.compute.major"] = major
        full["nvidia.com/gpu.compute.minor"] = minor or "0"
    labels.update(full)

    by_profile: dict[str, list[dict]] = {}
    for g in mig_gpus:
        for dev in g.get("mig_devices") or []:
            # The device plugin's resource name: the profile with '+' as '.', valid in a label key.
            by_profile.setdefault(str(dev["profile"]).replace("+", "."), []).append(dev)
    if mig_strategy == "mixed":
        for profile, devices in sorted(by_profile.items()):
            labels.update(_mig_device_labels(f"nvidia.com/mig-{profile}", model, profile, devices, sharing))
    elif mig_strategy == "single" and mig_gpus:
        empty = any(not g.get("mig_devices") for g in mig_gpus)
        if empty or len(mig_gpus) != len(gpus) or len(by_profile) != 1:
            # GFD's answer for a node that single strategy cannot describe: these four, the rest kept.
            labels.update({
                "nvidia.com/gpu.product": sanitise(model, "MIG-INVALID"),
                "nvidia.com/gpu.count": "0",
                "nvidia.com/gpu.replicas": "0",
                "nvidia.com/gpu.memory": "0",
            })
        else:
            profile = next(iter(by_profile))
            labels.update(_mig_device_labels("nvidia.com/gpu", model, profile, by_profile[profile], sharing))
    return labels
