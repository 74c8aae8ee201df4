# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node labels GPU Feature Discovery sets, computed from a node's gpu_info: pure functions, no I/O.

Labels depend on cluster policy (the device plugin's sharing config, the MIG strategy GFD runs with), so
they belong to the cluster side; gpu_info itself reports hardware only.
"""

from __future__ import annotations

import re
from typing import TypedDict

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo, MigDevice, NvmlFacts, PciFacts
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.pci import CLASS_3D, CLASS_VGA

SHARING_STRATEGIES = ("none", "time-slicing", "mps")
MIG_STRATEGIES = ("none", "single", "mixed")

_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")
_SPACES = re.compile(r"\s+")


class Sharing(TypedDict, total=False):
    """The device plugin's sharing, as the labels see it; every key has a default."""

    strategy: str  # none, time-slicing, mps
    replicas: int
    rename_by_default: bool


class LabelGpu(TypedDict, total=False):
    """One GPU as the labels see it: from NVML when the driver answers, else from the PCI table (no memory, no MIG)."""

    name: str | None
    memory_mib: int
    compute_capability: str | None
    pci_class: str | None
    mig_capable: bool
    mig_enabled: bool
    mig_devices: list[MigDevice]


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


def _sharing_labels(prefix: str, product: str, sharing: Sharing) -> dict[str, str]:
    replicas = int(sharing.get("replicas") or 1)
    strategy = sharing.get("strategy", "none") if replicas > 1 else "none"
    if replicas > 1 and not sharing.get("rename_by_default", False):
        product += "-SHARED"
    return {
        f"{prefix}.product": product,
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": strategy,
    }


def _mig_device_labels(prefix: str, parent: str, profile: str, devices: list[MigDevice], sharing: Sharing) -> dict[str, str]:
    first = devices[0]
    engines = first["engines"]
    labels = _sharing_labels(prefix, sanitise(parent, "MIG", profile), sharing)
    labels[f"{prefix}.count"] = str(len(devices))
    labels[f"{prefix}.memory"] = str(first.get("memory_mib", 0))
    for key, value in (
        ("multiprocessors", first.get("multiprocessors")),
        ("slices.gi", first.get("slices_gi")),
        ("slices.ci", first.get("slices_ci")),
        ("engines.copy", engines["copy"]),
        ("engines.decoder", engines["decoder"]),
        ("engines.encoder", engines["encoder"]),
        ("engines.jpeg", engines["jpeg"]),
        ("engines.ofa", engines["ofa"]),
    ):
        if value is not None:
            labels[f"{prefix}.{key}"] = str(value)
    return labels


def validate_strategies(sharing: Sharing, mig_strategy: str) -> None:
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


def gfd_labels(gpus: list[LabelGpu], driver_version: str | None = None, cuda_version: str | None = None,
               sharing: Sharing | None = None, mig_strategy: str = "none", machine: str | None = None) -> dict[str, str]:
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
    unshared: Sharing = {"strategy": "none", "replicas": 1}
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

    by_profile: dict[str, list[MigDevice]] = {}
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


def label_inputs(pci: PciFacts, nvml: NvmlFacts) -> tuple[list[LabelGpu], str]:
    """Per-GPU inputs for the labels: NVML's view when the driver answers, else the PCI table's."""
    by_bus = {g["bus_id"]: g for g in pci["gpus"]}
    gpus: list[LabelGpu] = []
    if nvml["status"] == "ok" and nvml["gpus"]:
        for g in nvml["gpus"]:
            pci_gpu = by_bus.get(g["bus_id"])
            gpus.append({
                "name": g["name"],
                "memory_mib": g["memory_mib"],
                "compute_capability": g["compute_capability"],
                "pci_class": pci_gpu["class"] if pci_gpu else None,
                "mig_capable": g["mig"]["capable"],
                "mig_enabled": g["mig"]["current"],
                "mig_devices": g["mig"]["devices"],
            })
        return gpus, "nvml"
    known = [g for g in pci["gpus"] if g["name"]]
    if not known:
        return [], "none"
    gpus = [{"name": g["name"], "compute_capability": g["compute_capability"], "pci_class": g["class"]} for g in known]
    return gpus, "pci"


def node_gfd_labels(info: GpuInfo, sharing: Sharing | None = None, mig_strategy: str = "none") -> tuple[dict[str, str], str]:
    """GFD's labels for the node gpu_info describes, and where the GPU facts came from (nvml, pci or none)."""
    gpus, source = label_inputs(info["pci"], info["nvml"])
    nvml = info["nvml"]
    return gfd_labels(gpus, nvml["driver_version"], nvml["cuda_driver_version"], sharing, mig_strategy), source
