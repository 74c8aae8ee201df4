# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What draining a Node means, without the API calls: which of its Pods go, which stop the drain before the
Node is cordoned, which PodDisruptionBudgets hold a Pod back, and how the Node's schedulability before the
drain is recorded so that undoing it puts back what was there (a Node cordoned before stays cordoned).

The Pods are the API's JSON (dicts), as listed with `_preload_content=False`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube_common import selector_matches

__all__ = ["DRA_VERSIONS", "GPU_PREFIX", "Selection", "blocking_pdbs", "claimed", "cordon_patch", "holds_gpu_claim", "key", "record",
           "requests_gpu", "running", "select", "uncordon_patch", "unschedulable"]

GPU_PREFIX = "nvidia.com/"
MIRROR = "kubernetes.io/config.mirror"
# The resource API's versions that carry ResourceClaims with allocated devices, newest first (tried in this order).
DRA_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")


class Selection(TypedDict):
    evict: list[dict]  # Pods to evict
    terminating: list[dict]  # Pods already being deleted: waited for, not evicted again
    kept: dict[str, str]  # ns/name -> why it stays (DaemonSet, static Pod, finished)
    refused: dict[str, str]  # ns/name -> why the drain stops before anything is changed


def key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def requests_gpu(pod: Mapping[str, Any], prefix: str = GPU_PREFIX) -> bool:
    """Whether a container (init containers too) requests or limits a resource under `prefix` (nvidia.com/gpu,
    nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared): the Pods that hold the node's GPUs."""
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.get("resources") or {}
        for amounts in (resources.get("requests") or {}, resources.get("limits") or {}):
            if any(str(name).startswith(prefix) for name in amounts):
                return True
    return False


def _claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a Pod uses, by name: those it names, and those made for it from a ResourceClaimTemplate
    (its status names them)."""
    spec = pod.get("spec") or {}
    names = [str(c["resourceClaimName"]) for c in spec.get("resourceClaims") or [] if c.get("resourceClaimName")]
    names += [str(s["resourceClaimName"]) for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    return names


def _nvidia_driver(name: object) -> bool:
    return isinstance(name, str) and (name == "nvidia.com" or name.endswith(".nvidia.com"))


def holds_gpu_claim(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]] | None) -> bool:
    """Whether the Pod holds a ResourceClaim allocated with devices of NVIDIA's DRA drivers (gpu.nvidia.com: GPUs and
    MIG devices; compute-domain.nvidia.com: IMEX channels): a Pod on the node holds them there, and loses them with
    the driver. `claims`: ns/name -> ResourceClaim as the API lists them; None when they could not be read, and then
    any Pod with a claim counts."""
    if not (pod.get("spec") or {}).get("resourceClaims"):
        return False
    if claims is None:
        return True
    namespace = (pod.get("metadata") or {}).get("namespace")
    for name in _claim_names(pod):
        allocation = ((claims.get(f"{namespace}/{name}") or {}).get("status") or {}).get("allocation") or {}
        if any(_nvidia_driver(r.get("driver")) for r in (allocation.get("devices") or {}).get("results") or []):
            return True
    return False


def claimed(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The namespaces of the Pods that use ResourceClaims: where the claims are read."""
    return sorted({str((p.get("metadata") or {}).get("namespace")) for p in pods if (p.get("spec") or {}).get("resourceClaims")})


def running(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The Pods still running (phase Running), as ns/name: what a wait for completion waits on, as the operator's does."""
    return sorted(key(p) for p in pods if (p.get("status") or {}).get("phase") == "Running")


def _controller(pod: Mapping[str, Any]) -> dict | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def select(pods: Iterable[Mapping[str, Any]], gpu_only: bool, force: bool, delete_emptydir_data: bool,
           names: Mapping[str, str], claims: Mapping[str, Mapping[str, Any]] | None = None) -> Selection:
    """Sort the Node's Pods as kubectl drain does (--ignore-daemonsets): DaemonSet and static Pods stay, finished
    Pods hold nothing; of the others (with gpu_only, those that request a GPU resource or hold a GPU through a
    ResourceClaim, see holds_gpu_claim), a Pod no controller
    would recreate is refused unless `force`, one with emptyDir data unless `delete_emptydir_data`. `names` gives
    the name each option has in the caller's messages (its role variable)."""
    out: Selection = {"evict": [], "terminating": [], "kept": {}, "refused": {}}
    for pod in sorted(pods, key=key):
        meta = pod.get("metadata") or {}
        name = key(pod)
        if gpu_only and not (requests_gpu(pod) or holds_gpu_claim(pod, claims)):
            continue
        owner = _controller(pod)
        if MIRROR in (meta.get("annotations") or {}):
            out["kept"][name] = "static Pod (its manifest is on the node)"
        elif owner and owner.get("kind") == "DaemonSet":
            out["kept"][name] = f"DaemonSet {owner.get('name')} (cordoning does not stop it)"
        elif (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            out["kept"][name] = "finished"
        elif meta.get("deletionTimestamp"):
            out["terminating"].append(dict(pod))
        else:
            reasons = []
            if not owner and not force:
                reasons.append(f"no controller would recreate it (set {names['force']} to evict it anyway)")
            if not delete_emptydir_data and any("emptyDir" in v for v in (pod.get("spec") or {}).get("volumes") or []):
                reasons.append(f"its emptyDir data would be lost (set {names['delete_emptydir_data']} to accept)")
            if reasons:
                out["refused"][name] = "; ".join(reasons)
            else:
                out["evict"].append(dict(pod))
    return out


def blocking_pdbs(pod: Mapping[str, Any], pdbs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The PodDisruptionBudgets of the Pod's namespace that select it, as ns/name (allowed disruptions)."""
    meta = pod.get("metadata") or {}
    out = []
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") == meta.get("namespace") and \
                selector_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels") or {}, absent=False):
            allowed = (pdb.get("status") or {}).get("disruptionsAllowed", "?")
            out.append(f"{pmeta.get('namespace')}/{pmeta.get('name')} (disruptions allowed: {allowed})")
    return sorted(out)


def unschedulable(node: Mapping[str, Any]) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def record(node: Mapping[str, Any], annotation: str) -> str | None:
    """The Node's record of its state before a drain ("true": it was cordoned already), None without one."""
    return ((node.get("metadata") or {}).get("annotations") or {}).get(annotation)


def cordon_patch(node: Mapping[str, Any], annotation: str) -> dict | None:
    """The patch that cordons the Node and records whether it was schedulable before (`annotation`: "true" when
    it was already unschedulable); None when the record is there already (a drain resumed: the first record
    stands) and the Node is cordoned."""
    patch: dict[str, Any] = {}
    if record(node, annotation) is None:
        patch["metadata"] = {"annotations": {annotation: "true" if unschedulable(node) else "false"}}
    if not unschedulable(node):
        patch["spec"] = {"unschedulable": True}
    return patch or None


def uncordon_patch(node: Mapping[str, Any], annotation: str) -> dict | None:
    """The patch that undoes cordon_patch: schedulable again only when the record says it was; the record
    removed. None when there is no record (nothing of ours to undo)."""
    recorded = record(node, annotation)
    if recorded is None:
        return None
    patch: dict[str, Any] = {"metadata": {"annotations": {annotation: None}}}
    if recorded != "true" and unschedulable(node):
        patch["spec"] = {"unschedulable": None}
    return patch
