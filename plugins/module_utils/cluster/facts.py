# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster side's view of each node's gpu_info: a typed projection, and the facts read from it. Pure, no I/O.

`slim` turns a host's gpuops_gpu_info (the module's GpuInfo, declared in _common/facts.py) into
SlimFacts, the part the cluster roles read, in gpu_info's own shape: a thousand nodes' facts stay
small. Everything else on the cluster side (rules.py, the cluster filters) reads SlimFacts only.
A host without facts never gets here: the cluster_nodes filter names it and stops.
"""

from __future__ import annotations

import math
from typing import TypedDict

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo


class SlimSummary(TypedDict):
    gpu_count: int
    mig_capable: bool | None


class SlimPciGpu(TypedDict):
    bus_id: str
    device_id: str | None


class SlimPci(TypedDict):
    gpus: list[SlimPciGpu]


class SlimMigDevice(TypedDict):
    profile: str | None


class SlimMigProfile(TypedDict):
    name: str | None
    instances: int
    slices: int
    memory_mib: int


class SlimMig(TypedDict):
    capable: bool
    current: bool
    devices: list[SlimMigDevice]
    profiles: list[SlimMigProfile]  # the first GPU of each model only


class SlimGpu(TypedDict):
    bus_id: str
    name: str
    mig: SlimMig


class SlimNvml(TypedDict):
    gpus: list[SlimGpu]


class SlimOs(TypedDict):
    id: str | None
    version_id: str | None


class SlimNode(TypedDict):
    os: SlimOs | None  # None in facts from before gpu_info's schema 5
    kernel: str | None  # the running kernel


class SlimFacts(TypedDict):
    """The part of gpu_info the cluster side reads."""

    summary: SlimSummary
    pci: SlimPci
    nvml: SlimNvml
    node: SlimNode


class MigProfileSpan(TypedDict):
    max: int  # instances of the profile one GPU holds
    slices: int  # compute slices
    size: int  # span in memory slices


class GpuModel(TypedDict):
    name: str
    profiles: dict[str, MigProfileSpan]


def slim(info: GpuInfo) -> SlimFacts:
    """GPU count and MIG capability, each GPU's bus id, PCI device id, name and MIG state (its devices' profiles),
    the MIG profile table of the first GPU of each model only, and the node's OS and running kernel.
    """
    pci: list[SlimPciGpu] = [{"bus_id": g["bus_id"], "device_id": g["device_id"]} for g in info["pci"]["gpus"]]
    ids = {g["bus_id"]: g["device_id"] for g in pci}
    seen: set[str | None] = set()
    gpus: list[SlimGpu] = []
    for g in info["nvml"]["gpus"]:
        mig = g["mig"]
        model = ids.get(g["bus_id"])
        profiles: list[SlimMigProfile] = [] if model in seen else [
            {"name": p["name"], "instances": p["instances"], "slices": p["slices"], "memory_mib": p["memory_mib"]}
            for p in mig["profiles"]]
        if profiles:
            seen.add(model)
        gpus.append({"bus_id": g["bus_id"], "name": g["name"],
                     "mig": {"capable": mig["capable"], "current": mig["current"],
                             "devices": [{"profile": d["profile"]} for d in mig["devices"]],
                             "profiles": profiles}})
    summary = info["summary"]
    node = info.get("node") or {}
    found = node.get("os")
    return {"summary": {"gpu_count": summary["gpu_count"], "mig_capable": summary["mig_capable"]},
            "pci": {"gpus": pci}, "nvml": {"gpus": gpus},
            "node": {"os": {"id": found.get("id"), "version_id": found.get("version_id")} if isinstance(found, dict) else None,
                     "kernel": (node.get("kernel") or {}).get("running")}}


def gpu_count(info: SlimFacts) -> int:
    return info["summary"]["gpu_count"]


def nvml_gpus(info: SlimFacts) -> list[SlimGpu]:
    return info["nvml"]["gpus"]


def mig_capable(info: SlimFacts) -> bool:
    return bool(info["summary"]["mig_capable"])


def filter_id(device_id: str) -> str:
    """mig-parted's device filter for an NVIDIA PCI device id: 0x<DEVICE><VENDOR>, upper case."""
    return f"0x{device_id.upper()}10DE"


def gpu_models(info: SlimFacts) -> dict[str, GpuModel]:
    """The node's MIG-capable GPU models: device filter -> {name, profiles {name: {max, slices, size}}}.

    Profiles come from the node's NVML (the profiles the GPU offers, with their instance counts).
    `size` is the profile's span in memory slices, from its memory relative to the smallest profile.
    """
    models: dict[str, GpuModel] = {}
    pci = {g["bus_id"]: g for g in info["pci"]["gpus"]}
    for gpu in nvml_gpus(info):
        mig = gpu["mig"]
        pci_gpu = pci.get(gpu["bus_id"])
        device_id = pci_gpu["device_id"] if pci_gpu else None
        if not mig["capable"] or not device_id:
            continue
        key = filter_id(device_id)
        profiles = mig["profiles"]
        if key in models and models[key]["profiles"]:
            continue
        smallest = min((p["memory_mib"] for p in profiles if p["memory_mib"]), default=0)
        table: dict[str, MigProfileSpan] = {}
        for p in profiles:
            if not p["name"]:
                continue  # NVML gave the GPU no memory size to name it by: nothing to configure with it
            ratio = p["memory_mib"] / smallest if smallest else 1
            table[p["name"]] = {"max": int(p["instances"]), "slices": int(p["slices"]),
                                "size": 2 ** round(math.log2(max(ratio, 1)))}
        models[key] = {"name": gpu["name"] or key, "profiles": table}
    return models


def run_hosts(hosts: list[str], limited: list[str] | None) -> list[str]:
    """The GPU hosts whose Nodes this run labels and validates: those of `hosts` (the group's, in its order) that
    `limited` names (the hosts of the run's --limit), or all of them without a limit."""
    if limited is None:
        return list(hosts)
    wanted = set(limited)
    return [host for host in hosts if host in wanted]
