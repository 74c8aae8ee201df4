# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node labels: which Nodes a set of wanted labels patches, and with what, and the labelling itself (one list of the
Nodes' metadata, one strategic-merge patch per Node that differs, its annotations in the same patch). Modules
`node_labels` and `cluster_apply` (which labels before it applies, in the same run) use it."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import STRATEGIC_MERGE, JsonApi, api_error, in_parallel

# The options of one label set, as node_labels' `sets` and cluster_apply's `label_sets` take them.
SET_OPTIONS: dict[str, dict[str, Any]] = {
    "name": {"type": "str"},
    "labels": {"type": "dict", "required": True},
    "keep_existing": {"type": "list", "elements": "str", "default": []},
}


class LabelError(Exception):
    """A labelling that cannot go on: the message, and what the result holds so far."""

    def __init__(self, msg: str, **result: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result


def plan(current: dict[str, dict], wanted: dict[str, dict], keep_existing: set[str]) -> dict[str, dict]:
    """Node -> the label patch it needs (only what differs); Nodes already right are left out."""
    patches: dict[str, dict] = {}
    for node, labels in wanted.items():
        have = current.get(node)
        if have is None:
            continue
        patch: dict[str, str | None] = {}
        for key, given in (labels or {}).items():
            value = None if given is None else str(given)
            if key in keep_existing and have.get(key):
                continue
            if value is None and key in have:
                patch[key] = None
            elif value is not None and have.get(key) != value:
                patch[key] = value
        if patch:
            patches[node] = patch
    return patches


def plan_sets(current: dict[str, dict], sets: list[dict]) -> tuple[dict[str, dict], list[list[str]]]:
    """The merged patch per Node of several label sets (a later set's value wins for a key two sets name), and
    each set's own changed Nodes, in order."""
    merged: dict[str, dict] = {}
    changed: list[list[str]] = []
    for one in sets:
        patches = plan(current, one["labels"] or {}, set(one.get("keep_existing") or []))
        changed.append(sorted(patches))
        for node, patch in patches.items():
            merged.setdefault(node, {}).update(patch)
    return merged, changed


def set_errors(sets: list[dict], option: str | None) -> list[str]:
    """Sets whose labels give a Node something else than a mapping of labels (or null), each named as
    option[index].labels, or as labels where option is None (one set, given as a module's labels)."""
    errors = []
    for index, one in enumerate(sets):
        bad = [n for n, v in (one["labels"] or {}).items() if v is not None and not isinstance(v, dict)]
        if bad:
            where = "labels" if option is None else f"{option}[{index}].labels"
            errors.append(f"{where}: the value for node(s) {bad} must be a mapping of label to value")
    return errors


def label(api: JsonApi, sets: list[dict], field_manager: str, missing: str, check_mode: bool, diff: bool,
          annotations: dict[str, dict] | None = None) -> dict[str, Any]:
    """Lists the Nodes once and patches each Node the sets (or the annotations: Node -> annotation -> value, null
    removes) change, not in check mode. The result: changed, changed_nodes, missing_nodes, sets (each set's name and
    changed Nodes, in order) and, with diff, the labels before and after (and annotations_diff, the annotations').
    Raises LabelError for a Node not in the cluster (with missing fail) or a failed call. Sets that name no Node (none
    at all, no MIG-capable node, no sharing config) need no list of the Nodes, and make no call."""
    annotations = annotations or {}
    if not any(one["labels"] for one in sets) and not annotations:
        return {"changed": False, "changed_nodes": [], "missing_nodes": [],
                "sets": [{"name": one.get("name"), "changed_nodes": []} for one in sets]}
    try:
        listed = api.list_metadata("/api/v1/nodes")
    except Exception as exc:  # an API error, an unreachable server
        raise LabelError(f"listing the Nodes failed: {api_error(exc)}") from exc
    current = {str(meta.get("name")): dict(meta.get("labels") or {}) for meta in listed}
    annotated = {str(meta.get("name")): dict(meta.get("annotations") or {}) for meta in listed}
    named = {n for one in sets for n in (one["labels"] or {})} | set(annotations)
    missing_nodes = sorted(n for n in named if n not in current)
    if missing_nodes and missing == "fail":
        raise LabelError(f"{len(missing_nodes)} node(s) are not in the cluster: {', '.join(missing_nodes[:20])}"
                         f"{' ...' if len(missing_nodes) > 20 else ''}; each host's Node must carry its name "
                         "(gpuops_cluster_node_name sets another)", missing_nodes=missing_nodes)
    patches, changed = plan_sets(current, sets)
    annotation_patches = plan(annotated, annotations, set())
    nodes = sorted(set(patches) | set(annotation_patches))
    result: dict[str, Any] = {
        "changed": bool(nodes), "changed_nodes": nodes, "missing_nodes": missing_nodes,
        "sets": [{"name": one.get("name"), "changed_nodes": changed[index]} for index, one in enumerate(sets)],
    }
    if diff and patches:
        result["diff"] = {
            "before": {n: {k: current[n].get(k) for k in patch} for n, patch in sorted(patches.items())},
            "after": dict(sorted(patches.items())),
        }
    if diff and annotation_patches:
        result["annotations_diff"] = {
            "before": {n: {k: annotated[n].get(k) for k in patch} for n, patch in sorted(annotation_patches.items())},
            "after": dict(sorted(annotation_patches.items())),
        }

    def body(node: str) -> dict[str, Any]:
        meta = {key: part[node] for key, part in (("labels", patches), ("annotations", annotation_patches)) if node in part}
        return {"metadata": meta}

    if not check_mode:
        failed = in_parallel(lambda node: api.call("PATCH", f"/api/v1/nodes/{node}", query=[("fieldManager", field_manager)],
                                                   body=body(node), content_type=STRATEGIC_MERGE), nodes)
        if failed:
            node = sorted(failed)[0]
            raise LabelError(f"labelling {len(failed)} node(s) failed, {node} first: {api_error(failed[node])}", **result)
    return result
