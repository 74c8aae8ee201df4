# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an uninstall removes from a cluster: the objects the collection applied and the Node labels it set.

Nothing here is a list kept by hand. An object is the collection's when it carries the collection's
`app.kubernetes.io/managed-by` label (every template sets it) or when the collection's field manager applied it
(server-side apply) and no other manager wrote to it outside its status. A Node label is the collection's when the
collection's field manager owns it in the Node's managedFields (node_labels patches with that manager). The
API server's own records say it, so an object renamed or dropped from a template in a later version is still
found, and a label someone else has since changed is theirs and stays.

Pure functions over plain API data (discovery documents, metadata lists, Nodes), so unit tests feed them
recorded answers; the module makes the calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import drain

MANAGED_BY = "app.kubernetes.io/managed-by"
# Never deleted, whoever applied them: Nodes carry labels only (removed one by one), events are the cluster's.
_NEVER = {("", "nodes"), ("", "events"), ("events.k8s.io", "events"), ("", "componentstatuses"), ("", "bindings")}
# Removed first, and waited for: what runs (its pods go with it, before the RBAC and config they use).
_WORKLOADS = {("apps", "daemonsets"), ("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets"),
              ("batch", "jobs"), ("batch", "cronjobs"), ("", "pods")}
# What a namespace always holds that nobody put there: it does not keep the namespace.
_NAMESPACE_DEFAULTS = {("", "serviceaccounts", "default"), ("", "configmaps", "kube-root-ca.crt")}


def resource_types(core: Mapping | None, groups: Iterable[Mapping]) -> list[dict[str, Any]]:
    """The types that can be listed and deleted, from discovery: the core APIResourceList and one APIResourceList per
    group (its preferred version). Each: group, version, resource, kind, namespaced, path (the collection URL without
    a namespace)."""
    out: list[dict[str, Any]] = []
    for doc in [core or {}, *groups]:
        group_version = str(doc.get("groupVersion") or "")
        group, _slash, version = group_version.rpartition("/")
        for res in doc.get("resources") or []:
            name = str(res.get("name") or "")
            verbs = set(res.get("verbs") or [])
            if not name or "/" in name or not {"list", "delete"} <= verbs or (group, name) in _NEVER:
                continue
            base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
            out.append({"group": group, "version": version, "resource": name, "kind": str(res.get("kind") or ""),
                        "namespaced": bool(res.get("namespaced")), "path": f"{base}/{name}"})
    return sorted(out, key=lambda t: (t["group"], t["resource"]))


def object_path(rtype: Mapping, meta: Mapping) -> str:
    """The URL of one object of a type."""
    base = str(rtype["path"])
    if rtype["namespaced"]:
        prefix, _slash, resource = base.rpartition("/")
        return f"{prefix}/namespaces/{meta['namespace']}/{resource}/{meta['name']}"
    return f"{base}/{meta['name']}"


def _status_only(entry: Mapping) -> bool:
    return entry.get("subresource") == "status"


def _holders(meta: Mapping, field_manager: str, managed_by: Iterable[str]) -> tuple[bool, bool, bool]:
    """(marked with the managed-by label, applied by the field manager, written by another manager outside the status)."""
    entries = meta.get("managedFields") or []
    return ((meta.get("labels") or {}).get(MANAGED_BY) in set(managed_by),
            any(e.get("manager") == field_manager and e.get("operation") == "Apply" for e in entries),
            any(e.get("manager") != field_manager and not _status_only(e) for e in entries))


def is_ours(meta: Mapping, field_manager: str, managed_by: Iterable[str]) -> bool:
    """Whether an object is the collection's: its managed-by label, or applied by the field manager alone (another
    manager's write outside the status means someone else holds it too, and it stays)."""
    marked, applied, others = _holders(meta, field_manager, managed_by)
    return marked or (applied and not others)


def is_shared(meta: Mapping, field_manager: str, managed_by: Iterable[str]) -> bool:
    """Whether the field manager applied part of an object someone else holds too (a CRD the cluster's own NFD installed,
    applied over by the collection's NFD role): it stays, and only the collection's part of it is let go."""
    marked, applied, others = _holders(meta, field_manager, managed_by)
    return not marked and applied and others


def describe(rtype: Mapping, meta: Mapping) -> str:
    """"Kind namespace/name" or "Kind name"."""
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{rtype['kind'] or rtype['resource']} {where}{meta['name']}"


def plan(listed: Iterable[tuple[Mapping, Iterable[Mapping]]], field_manager: str, managed_by: Iterable[str]) -> dict[str, Any]:
    """What to delete, from every type's objects (their metadata): {"workloads": [...], "objects": [...],
    "definitions": [...], "namespaces": [...], "released": [...], "kept_namespaces": {ns: [what lives there]}}. Each
    entry is {"type", "meta", "what"}; "released" are the objects held with someone else, of which only the field
    manager's part goes (an empty apply by it: the fields it alone set are removed, its managedFields entry with them).

    An object owned (ownerReferences) by one that goes is left to the garbage collector. A namespace of ours goes only
    when nothing but what goes with it lives there: objects owned by another object are counted through their owner,
    the namespace's default ServiceAccount and root CA ConfigMap not at all."""
    managed_by = list(managed_by)
    everything: list[tuple[Mapping, Mapping]] = [(t, m) for t, metas in listed for m in metas]
    ours = [(t, m) for t, m in everything if is_ours(m, field_manager, managed_by)]
    uids = {m.get("uid") for _t, m in ours if m.get("uid")}
    result: dict[str, Any] = {"workloads": [], "objects": [], "definitions": [], "namespaces": [], "kept_namespaces": {},
                              "released": [{"type": t, "meta": m, "what": describe(t, m)} for t, m in everything
                                           if is_shared(m, field_manager, managed_by)]}
    our_namespaces: list[tuple[Mapping, Mapping]] = []
    for rtype, meta in ours:
        owners = [o.get("uid") for o in meta.get("ownerReferences") or []]
        if owners and any(uid in uids for uid in owners):
            continue
        entry = {"type": rtype, "meta": meta, "what": describe(rtype, meta)}
        key = (rtype["group"], rtype["resource"])
        if key == ("", "namespaces"):
            our_namespaces.append((rtype, meta))
        elif key in _WORKLOADS:
            result["workloads"].append(entry)
        elif key == ("apiextensions.k8s.io", "customresourcedefinitions"):
            result["definitions"].append(entry)
        else:
            result["objects"].append(entry)
    for rtype, meta in our_namespaces:
        name = meta.get("name")
        others = sorted(
            describe(t, m) for t, m in everything
            if m.get("namespace") == name and m.get("uid") not in uids and not m.get("ownerReferences")
            and (t["group"], t["resource"], m.get("name")) not in _NAMESPACE_DEFAULTS)
        if others:
            result["kept_namespaces"][name] = others
        else:
            result["namespaces"].append({"type": rtype, "meta": meta, "what": describe(rtype, meta)})
    for step in ("workloads", "objects", "definitions", "namespaces", "released"):
        result[step].sort(key=lambda e: e["what"])
    return result


def release_body(rtype: Mapping, meta: Mapping) -> dict[str, Any]:
    """The server-side apply that gives up every field of the manager's: the object's identity and nothing else."""
    identity = {"name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})}
    api_version = f"{rtype['group']}/{rtype['version']}" if rtype["group"] else rtype["version"]
    return {"apiVersion": api_version, "kind": rtype["kind"], "metadata": identity}


def _label_keys(fields: Any) -> set[str]:
    labels = ((fields or {}).get("f:metadata") or {}).get("f:labels") or {}
    return {k[2:] for k in labels if k.startswith("f:")}


def node_labels_to_remove(nodes: Iterable[Mapping], field_manager: str, operand_labels: Iterable[str] = ()) -> dict[str, list[str]]:
    """Node -> the labels to remove: those the field manager owns (it set them and nobody changed them since), and the
    state labels the collection's components write (operand_labels), where present."""
    operand = set(operand_labels)
    out: dict[str, list[str]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        labels = meta.get("labels") or {}
        owned: set[str] = set()
        for entry in meta.get("managedFields") or []:
            if entry.get("manager") == field_manager and not _status_only(entry):
                owned |= _label_keys(entry.get("fieldsV1"))
        keys = sorted(k for k in labels if k in owned or k in operand)
        if keys:
            out[str(meta.get("name"))] = keys
    return out


def user_gpu_pods(pods: Iterable[Mapping[str, Any]], runtime_class: str, namespace: str, managed_by: str = "gpuops.nvidia") -> list[str]:
    """The users' Pods an uninstall would pull the GPU from under, as `ns/name on node`: Pods not finished, outside the
    collection's namespace and not its own (the managed-by label), that run on the nvidia RuntimeClass, request an
    `nvidia.com/` resource or use a ResourceClaim (the DRA driver goes too)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or meta.get("namespace") == namespace:
            continue
        if (meta.get("labels") or {}).get(MANAGED_BY) == managed_by:
            continue
        if spec.get("runtimeClassName") == runtime_class or drain.requests_gpu(pod) or drain.holds_gpu_claim(pod, None):
            out.append(f"{drain.key(pod)} on {spec.get('nodeName') or 'no node yet'}")
    return sorted(out)
