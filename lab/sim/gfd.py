"""The lab's stand-in for GPU Feature Discovery's labeller: what GFD would write for a node, from its hardware profile.

KWOK runs no container, so no GFD reads the simulated GPUs. The simulated device plugin (devplugin.py)
also watches GFD's pods (`app=gpu-feature-discovery`, the GPU Operator's label, which the collection's role
keeps): when one runs on a node whose profile has a loaded driver, it writes the NodeFeature object GFD writes
(`nvidia-features-for-<node>` in the pod's namespace, labelled `nfd.node.kubernetes.io/node-name`), and the
lab's real nfd-master publishes its labels on the Node.

The labels are computed here from the profile, apart from the collection's own GFD model
(plugins/module_utils/cluster/gfd.py), so that validation comparing the two checks something: the full-GPU
labels (product, count, memory, family, compute capability), MIG capability, the sharing the node's config
gives (replicas, strategy, the -SHARED product, mps.capable) and, with the mixed strategy, one count per MIG
profile. The single strategy is not simulated (nothing is written), nor are driver and CUDA versions.
"""

from __future__ import annotations

import re

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
PREFIX = "nvidia-features-for-"
# Compute capability major -> GFD's family; 8.9 is Ada, 7.5 Turing.
_FAMILY = {5: "maxwell", 6: "pascal", 7: "volta", 8: "ampere", 9: "hopper", 10: "blackwell", 12: "blackwell"}


def _product(name: str) -> str:
    return re.sub(r"\s+", "-", re.sub(r"[^A-Za-z0-9\-_. ]", "", name).strip())


def _family(cc: str) -> str:
    major, _dot, minor = cc.partition(".")
    if (major, minor) == ("8", "9"):
        return "ada-lovelace"
    if (major, minor) == ("7", "5"):
        return "turing"
    return _FAMILY.get(int(major), "undefined")


def sharing_of(config: dict | None) -> tuple[str, int, bool]:
    """(strategy, replicas of nvidia.com/gpu, renameByDefault) of a device plugin config."""
    sharing = (config or {}).get("sharing") or {}
    for key, strategy in (("mps", "mps"), ("timeSlicing", "time-slicing")):
        block = sharing.get(key)
        if block:
            for res in block.get("resources") or []:
                if str(res.get("name", "")).rsplit("/", 1)[-1] == "gpu":
                    return strategy, int(res["replicas"]), bool(block.get("renameByDefault"))
    return "none", 1, False


def gfd_labels(profile: dict | None, mig_strategy: str, config: dict | None) -> dict[str, str] | None:
    """The labels GFD would write for a node of this profile, or None where GFD would write none (no GPU, no
    driver, or the single MIG strategy, not simulated)."""
    gpus = (profile or {}).get("gpus")
    if not gpus or not ((profile or {}).get("driver") or {}).get("loaded") or mig_strategy == "single":
        return None
    count = len(gpus["bus_ids"])
    enabled = [bool(e) for e in (gpus.get("mig_enabled") or [])] + [False] * count
    devices = [list(d) for d in (gpus.get("mig_devices") or [])] + [[]] * count
    all_mig = all(enabled[:count])
    strategy, replicas, renamed = sharing_of(config)
    if all_mig or replicas < 2:
        strategy, replicas = "none", 1
    product = _product(gpus["name"])
    if replicas > 1 and not renamed:
        product += "-SHARED"
    cc = str(gpus["compute_capability"])
    major, _dot, minor = cc.partition(".")
    labels = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(gpus["memory_mib"]),
        "nvidia.com/gpu.family": _family(cc),
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor or "0",
        "nvidia.com/gpu.replicas": "0" if all_mig else str(replicas),
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/mig.capable": "true" if gpus.get("mig_capable") else "false",
        "nvidia.com/mps.capable": "true" if sharing_of(config)[0] == "mps" else "false",
    }
    if mig_strategy == "mixed":
        labels["nvidia.com/mig.strategy"] = "mixed"
        per_profile: dict[str, int] = {}
        for i in range(count):
            if enabled[i]:
                for name in devices[i]:
                    key = str(name).replace("+", ".")
                    per_profile[key] = per_profile.get(key, 0) + 1
        for name, n in sorted(per_profile.items()):
            labels[f"nvidia.com/mig-{name}.count"] = str(n)
    return labels


def node_feature(node: str, namespace: str, labels: dict[str, str], owners: tuple = ()) -> dict:
    """The NodeFeature object GFD writes for a node. Owned, as GFD's own are, by its DaemonSet (the controller) and its
    pod, so that the garbage collector removes it with the DaemonSet, and nfd-master the Node labels it gave."""
    meta: dict = {"name": PREFIX + node, "namespace": namespace, "labels": {NODE_NAME_LABEL: node}}
    if owners:
        meta["ownerReferences"] = [{"apiVersion": a, "kind": k, "name": n, "uid": u, **({"controller": True} if i == 0 else {})}
                                   for i, (a, k, n, u) in enumerate(owners)]
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature", "metadata": meta,
            "spec": {"features": {}, "labels": labels}}
