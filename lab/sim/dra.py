"""The lab's stand-in for the NVIDIA DRA driver's kubelet plugin: the ResourceSlice it publishes for a node's GPUs.

KWOK runs no container, so no kubelet plugin reads the simulated GPUs. The simulated device plugin
(devplugin.py) also watches the DRA driver's kubelet plugin pods (`app=dra-driver-nvidia-gpu-kubelet-plugin`, the
collection's dra role's label): while one runs on a node, the node's ResourceSlice of driver `gpu.nvidia.com` is there,
as the plugin publishes it (one pool named after the node, one slice), and it goes with the last pod, as the kubelet
removes the slices of a driver that unregisters. The lab's real kube-scheduler allocates ResourceClaims from them.

The devices are made from the node's hardware profile (in the MIG layout the MIG manager stand-in last applied), the
way the DRA driver names and describes them (its deviceinfo and MIG naming): a GPU not in MIG mode is `gpu-<minor>`
(its index here), of type `gpu`; a GPU in MIG mode offers its MIG devices instead,
`gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>`, of type `mig`, with the parent's UUID and the
profile. Attributes: uuid, productName, brand, architecture, cudaComputeCapability, driverVersion, cudaDriverVersion
(versions as semver, leading zeros dropped) and the PCI bus ID; capacity: memory.
"""

from __future__ import annotations

import hashlib
import re

DRIVER = "gpu.nvidia.com"
PLUGIN_APP = "dra-driver-nvidia-gpu-kubelet-plugin"
# Compute capability major -> the architecture name the driver's attribute carries (8.9 is Ada Lovelace).
_ARCH = {5: "Maxwell", 6: "Pascal", 7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}


def semver(text: str, parts: int = 3) -> str:
    """A version as the driver publishes it: numeric parts without leading zeros, padded to three."""
    numbers = [str(int(p)) for p in re.findall(r"\d+", str(text))][:parts]
    return ".".join(numbers + ["0"] * (parts - len(numbers)))


def architecture(cc: str) -> str:
    major, _dot, minor = str(cc).partition(".")
    if (major, minor) == ("8", "9"):
        return "Ada Lovelace"
    if (major, minor) == ("7", "5"):
        return "Turing"
    return _ARCH.get(int(major), "Unknown")


def _uuid(node: str, what: str) -> str:
    digest = hashlib.sha256(f"{node}/{what}".encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _profile_ids(gpus: dict) -> dict[str, tuple[int, int]]:
    """MIG profile name -> (GPU instance profile id, memory MiB), from the profile's NVML profile table."""
    out = {}
    for line in gpus.get("mig_profiles") or []:
        fields = str(line).split()
        out[fields[-1]] = (int(fields[1]), int(fields[-2]))
    return out


def _placements(gpus: dict, profile: str) -> tuple[list[int], int]:
    """Where the profile's GPU instances may start among the GPU's memory slices, and how many they span."""
    starts, _slash, size = str((gpus.get("mig_placements") or {}).get(profile, "0/1")).partition("/")
    return [int(s) for s in starts.split(",") if s], int(size or 1)


def place(gpus: dict, layout: list[str]) -> list[int]:
    """A start for each MIG device of the layout, their memory slices apart (as the GPU places them), whatever the
    layout's order: the largest devices are placed first, each at its first free start; the devices' positions in the
    layout where no such placement exists."""
    options = [_placements(gpus, str(name)) for name in layout]
    order = sorted(range(len(layout)), key=lambda i: (-options[i][1], str(layout[i])))

    def search(k: int, used: frozenset[int]) -> list[int] | None:
        if k == len(order):
            return []
        starts, size = options[order[k]]
        for start in starts:
            span = frozenset(range(start, start + size))
            if not span & used:
                rest = search(k + 1, used | span)
                if rest is not None:
                    return [start, *rest]
        return None

    found = search(0, frozenset())
    if found is None:
        return list(range(len(layout)))
    starts = [0] * len(layout)
    for k, i in enumerate(order):
        starts[i] = found[k]
    return starts


def devices(node: str, profile: dict | None) -> list[dict]:
    """The devices the plugin publishes for this hardware (none without a loaded driver)."""
    gpus = (profile or {}).get("gpus")
    driver = (profile or {}).get("driver") or {}
    if not gpus or not driver.get("loaded"):
        return []
    count = len(gpus["bus_ids"])
    enabled = [bool(e) for e in (gpus.get("mig_enabled") or [])] + [False] * count
    layouts = [list(d) for d in (gpus.get("mig_devices") or [])] + [[]] * count
    ids = _profile_ids(gpus)
    common = {
        "productName": {"string": gpus["name"]},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": architecture(gpus["compute_capability"])},
        "cudaComputeCapability": {"version": semver(gpus["compute_capability"])},
        "driverVersion": {"version": semver(driver["version"])},
        "cudaDriverVersion": {"version": semver(driver.get("cuda", "0.0"))},
    }
    out: list[dict] = []
    for index in range(count):
        parent = f"GPU-{_uuid(node, str(index))}"
        bus = {"resource.kubernetes.io/pciBusID": {"string": gpus["bus_ids"][index]}}
        if not enabled[index]:
            out.append({"name": f"gpu-{index}",
                        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": parent}, **common, **bus},
                        "capacity": {"memory": {"value": f"{int(gpus['memory_mib'])}Mi"}}})
            continue
        for name, start in zip(layouts[index], place(gpus, [str(n) for n in layouts[index]]), strict=True):
            profile_id, memory = ids.get(str(name), (0, 0))
            clean = re.sub(r"[^a-z0-9-]", "-", str(name).lower().replace(".", ""))
            out.append({"name": f"gpu-{index}-mig-{clean}-{profile_id}-{start}",
                        "attributes": {"type": {"string": "mig"}, "uuid": {"string": f"MIG-{_uuid(node, f'{index}/{clean}/{start}')}"},
                                       "parentUUID": {"string": parent}, "profile": {"string": str(name)}, **common, **bus},
                        "capacity": {"memory": {"value": f"{memory}Mi"}}})
    return out


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice(node: str, profile: dict | None, owner: tuple[str, str] | None = None) -> dict | None:
    """The node's ResourceSlice (resource.k8s.io/v1), owned by its Node when `owner` (name, uid) is given; None when
    the plugin would publish no device."""
    found = devices(node, profile)
    if not found:
        return None
    meta: dict = {"name": slice_name(node), "labels": {"app.kubernetes.io/managed-by": "gpuops-lab"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": owner[0], "uid": owner[1]}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta,
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": found}}
