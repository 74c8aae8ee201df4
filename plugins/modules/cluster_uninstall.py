#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_uninstall
short_description: Remove from a cluster every object the collection applied and the Node labels it set
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Finds what to remove from the API server's own records, not from a list kept by hand - every type the server
    serves (discovery) is listed (object metadata only, paginated, in parallel), and an object is the collection's
    when it carries the label C(app.kubernetes.io/managed-by) with a value of O(managed_by), or when O(field_manager)
    applied it (server-side apply) and no other manager wrote to it outside its status.
  - Removes the workloads first (DaemonSets, Deployments, Jobs; their pods go with them, foreground deletion) and
    waits until they are gone, then the other objects (ConfigMaps, Services, RBAC, RuntimeClasses, ...), then the
    CustomResourceDefinitions, waiting for each step. An object owned by one that goes is left to the garbage
    collector (GPU Feature Discovery's NodeFeature objects, owned by its DaemonSet).
  - A namespace of the collection's goes only when nothing else lives in it (the namespace's default ServiceAccount
    and root CA ConfigMap aside); RV(kept_namespaces) names what keeps one.
  - An object O(field_manager) applied that another manager holds too (a CRD the cluster's own NFD installed) stays; the
    collection lets go of its part of it (RV(released)).
  - Removes from each Node the labels O(field_manager) owns in its managedFields (node_labels sets them with that
    manager; a label someone changed since is theirs and stays), and the labels named in O(operand_labels).
  - Nodes and events are never removed.
options:
  field_manager:
    description: The field manager of the collection's server-side apply and label patches.
    type: str
    default: gpuops-nvidia
  managed_by:
    description: Values of the C(app.kubernetes.io/managed-by) label that mark the collection's objects.
    type: list
    elements: str
    default: [gpuops.nvidia]
  operand_labels:
    description:
      - Node labels the collection's components write (not the collection itself), removed with them, for example the
        MIG manager's C(nvidia.com/mig.config.state).
    type: list
    elements: str
    default: []
  wait_timeout:
    description: Seconds to wait for each step's objects to be gone.
    type: int
    default: 300
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
attributes:
  check_mode:
    support: full
    details:
      - Everything is listed and decided as in a real run; RV(removed) and RV(node_labels) say what would go. Nothing
        is deleted or patched.
  diff_mode:
    support: full
    details:
      - The objects and the Node labels before (what is there) and after (nothing).
  idempotent:
    support: full
    details:
      - A second run finds nothing of the collection's and changes nothing. A run stopped half-way is finished by the next.
notes:
  - The account needs list on every type it should look in (a type it may not list is named in RV(not_readable), with
    a warning), delete on the collection's objects and patch on Nodes.
"""

EXAMPLES = r"""
- name: Remove the GPU components from the cluster
  gpuops.nvidia.cluster_uninstall:
    kubeconfig: ~/.kube/config
    operand_labels: [nvidia.com/mig.config.state]
"""

RETURN = r"""
released:
  description:
    - The objects the collection applied part of and someone else holds too (a CRD the cluster's own NFD installed), left
      in place; only the fields the collection alone set are removed, by a server-side apply of nothing.
  returned: always
  type: list
  elements: str
removed:
  description: The objects removed (or, in check mode, that would be), as C(Kind namespace/name), in the order removed.
  returned: always
  type: list
  elements: str
node_labels:
  description: Node name to the labels removed from it (or that would be).
  returned: always
  type: dict
kept_namespaces:
  description: The collection's namespaces left in place, each with what else lives in it.
  returned: always
  type: dict
not_readable:
  description: The types that could not be listed (forbidden to the account, or an API that did not answer), as C(resource.group).
  returned: always
  type: list
  elements: str
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import uninstall
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import AUTH_ARGS, api_error, api_status, connect, in_parallel
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import JsonApi as Api


def discover(api: Api) -> tuple[list[dict], list[str]]:
    core = api.call("GET", "/api/v1")
    groups = api.call("GET", "/apis").get("groups") or []
    versions = sorted({str((g.get("preferredVersion") or {}).get("groupVersion") or "") for g in groups} - {""})
    docs: dict[str, dict] = {}
    failed = in_parallel(lambda gv: docs.__setitem__(gv, api.call("GET", f"/apis/{gv}")), versions)
    return uninstall.resource_types(core, [docs[gv] for gv in versions if gv in docs]), sorted(failed)


def delete_all(api: Api, entries: list[dict], policy: str) -> dict[int, Exception]:
    """Deletes the entries' objects in parallel (one already gone is fine); {index: error} for the ones that failed."""

    def delete(index: int) -> None:
        entry = entries[index]
        try:
            api.call("DELETE", uninstall.object_path(entry["type"], entry["meta"]),
                     body={"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy})
        except Exception as exc:
            if api_status(exc) != 404:
                raise

    return in_parallel(delete, range(len(entries)))


def still_there(api: Api, entries: list[dict]) -> list[dict]:
    """The entries whose object the server still has (anything but a 404 counts as there)."""
    there: list[dict] = []

    def probe(index: int) -> None:
        entry = entries[index]
        try:
            api.call("GET", uninstall.object_path(entry["type"], entry["meta"]))
            there.append(entry)
        except Exception as exc:  # 404: gone
            if api_status(exc) != 404:
                there.append(entry)

    in_parallel(probe, range(len(entries)))
    return there


def wait_gone(api: Api, entries: list[dict], timeout: int) -> list[str]:
    """Waits until every entry's object answers 404; returns the ones still there at the deadline."""
    pending = list(entries)
    deadline = time.monotonic() + timeout
    while pending:
        pending = still_there(api, pending)
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(2)
    return sorted(e["what"] for e in pending)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "field_manager": {"type": "str", "default": "gpuops-nvidia"},
            "managed_by": {"type": "list", "elements": "str", "default": ["gpuops.nvidia"]},
            "operand_labels": {"type": "list", "elements": "str", "default": []},
            "wait_timeout": {"type": "int", "default": 300},
            **AUTH_ARGS,
        },
        supports_check_mode=True,
    )
    p = module.params
    if not p["field_manager"]:
        module.fail_json(msg="field_manager: must not be empty")
    api = Api(connect(module))
    try:
        types, unanswered = discover(api)
        nodes = api.list_metadata("/api/v1/nodes")
    except Exception as exc:  # an API error, an unreachable server
        module.fail_json(msg=f"reading the cluster's types and Nodes failed: {api_error(exc)}")
    listed: dict[int, list[dict]] = {}
    failed = in_parallel(lambda i: listed.__setitem__(i, api.list_metadata(types[i]["path"])), range(len(types)))
    not_readable = sorted([f"{types[i]['resource']}.{types[i]['group'] or 'core'}" for i in failed] + unanswered)
    if not_readable:
        module.warn(f"could not look for the collection's objects in {', '.join(not_readable)} "
                    f"({api_error(next(iter(failed.values()))) if failed else 'the API group did not answer'})")
    found = uninstall.plan([(types[i], listed[i]) for i in sorted(listed)], p["field_manager"], p["managed_by"])
    labels = uninstall.node_labels_to_remove([{"metadata": m} for m in nodes], p["field_manager"], p["operand_labels"])
    steps = [found["workloads"], found["objects"], found["definitions"], found["namespaces"]]
    removed = [e["what"] for step in steps for e in step]
    released = [e["what"] for e in found["released"]]
    result: dict[str, Any] = {"changed": bool(removed or released or labels), "removed": removed, "released": released, "node_labels": labels,
                              "kept_namespaces": found["kept_namespaces"], "not_readable": not_readable}
    if module._diff:
        result["diff"] = {"before": {"objects": removed, "released": released, "node_labels": labels},
                          "after": {"objects": [], "released": [], "node_labels": {}}}
    if module.check_mode or not result["changed"]:
        module.exit_json(**result)

    for step in steps:
        # Each step is sorted by what it names: the lowest index is the first named.
        errors = delete_all(api, step, "Foreground" if step is found["workloads"] else "Background")
        if errors:
            first = min(errors)
            module.fail_json(msg=f"removing {len(errors)} object(s) failed, {step[first]['what']} first: {api_error(errors[first])}",
                             **result)
        left = wait_gone(api, step, p["wait_timeout"])
        if left:
            module.fail_json(msg=f"{len(left)} object(s) still there after {p['wait_timeout']} s: {', '.join(left[:10])}"
                                 " (a finalizer or a stopped controller holds them; run again to finish)", **result)

    def release(index: int) -> None:
        entry = found["released"][index]
        try:
            api.call("PATCH", uninstall.object_path(entry["type"], entry["meta"]), query=[("fieldManager", p["field_manager"])],
                     body=uninstall.release_body(entry["type"], entry["meta"]), content_type="application/apply-patch+yaml")
        except Exception as exc:  # gone with its namespace: nothing left to let go of
            if api_status(exc) != 404:
                raise

    errors = in_parallel(release, range(len(found["released"])))
    if errors:
        first = min(errors)
        module.fail_json(msg=f"letting go of {len(errors)} shared object(s) failed, {found['released'][first]['what']} first: "
                             f"{api_error(errors[first])}", **result)

    def unlabel(node: str) -> None:
        api.call("PATCH", f"/api/v1/nodes/{node}", query=[("fieldManager", p["field_manager"])],
                 body={"metadata": {"labels": dict.fromkeys(labels[node])}}, content_type="application/merge-patch+json")

    unlabelled = in_parallel(unlabel, sorted(labels))
    if unlabelled:
        node = sorted(unlabelled)[0]
        module.fail_json(msg=f"removing the labels of {len(unlabelled)} node(s) failed, {node} first: {api_error(unlabelled[node])}",
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
