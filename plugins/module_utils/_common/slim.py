# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""The slim view of a node's gpu_info: a typed projection, and the facts read from it. Pure, no I/O.

`slim` turns a host's gpuops_gpu_info (the module's GpuInfo, declared in _common/facts.py) into
SlimFacts, the part the cluster roles read, in gpu_info's own shape: a thousand nodes' facts stay
small. Everything else on the cluster side (cluster/rules.py, the cluster filters) reads SlimFacts only,
and so do the MIG rules both sides apply (_common/mig.py): the host's mig_config module reads its node
through the same projection. A host without facts never gets here: the cluster_nodes filter names it and stops.
"""

from __future__ import annotations

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
