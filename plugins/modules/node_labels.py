#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_labels
short_description: Set labels on many Kubernetes Nodes, one API call per Node that changes
version_added: 0.1.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Reads every Node once (one list call), compares each named Node's labels with the ones wanted, and
    patches only the Nodes that differ, one merge patch each. A thousand Nodes already right cost one call.
  - Labels named in O(keep_existing) are set only where the Node has no non-empty value for them, so a
    value someone else set (C(false), C(paused-for-mig-change)) stays.
  - Supports check mode and diff mode (the labels before and after, per Node that would change).
options:
  labels:
    description:
      - Node name to the labels it should carry. A value of C(null) removes the label.
      - Exactly one of O(labels) and O(sets) is given.
    type: dict
  keep_existing:
    description: Label keys whose existing non-empty value wins over the one given (with O(labels)).
    type: list
    elements: str
    default: []
  sets:
    description:
      - Several label sets in one run (one list of the Nodes, one patch per Node that changes), each with its own
        O(sets[].keep_existing) and each compared with the Node as it is; where two sets name the same key for a Node,
        the later one's value is the one set.
      - RV(sets) says, for each set in this order, which Nodes it changed.
    type: list
    elements: dict
    suboptions:
      name:
        description: What the set is; returned with its changed Nodes in RV(sets).
        type: str
      labels:
        description: Node name to the labels it should carry, as O(labels).
        type: dict
        required: true
      keep_existing:
        description: As O(keep_existing), for this set.
        type: list
        elements: str
        default: []
  field_manager:
    description:
      - The field manager of the patches, recorded in each Node's managedFields as the owner of the labels it set, so
        M(gpuops.nvidia.cluster_uninstall) finds them (and only them) again.
    type: str
    default: gpuops-nvidia
  missing:
    description: What a Node that is not in the cluster is, C(fail) (before anything is patched) or C(warn).
    type: str
    choices: [fail, warn]
    default: fail
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
attributes:
  check_mode:
    support: full
    details:
      - The Nodes are listed and compared as in a real run and RV(changed_nodes) names the ones that would be patched;
        nothing is patched.
  diff_mode:
    support: full
    details:
      - For each Node that changes, the labels it changes before and after.
  idempotent:
    support: full
    details:
      - Only Nodes whose labels differ are patched, so a second run makes no API call but the list and reports no change.
"""

EXAMPLES = r"""
- name: Label the GPU nodes
  gpuops.nvidia.node_labels:
    kubeconfig: ~/.kube/config
    labels:
      gpu-node-1: {nvidia.com/gpu.present: "true", nvidia.com/gpu.deploy.device-plugin: "true"}
      cpu-node-1: {nvidia.com/gpu.present: "false"}
    keep_existing: [nvidia.com/gpu.deploy.device-plugin]

- name: Set a config where a host names one, and the default only where a Node has none, in one run
  gpuops.nvidia.node_labels:
    sets:
      - labels: {gpu-node-1: {nvidia.com/mig.config: all-1g.10gb}}
      - labels: {gpu-node-2: {nvidia.com/mig.config: all-disabled}}
        keep_existing: [nvidia.com/mig.config]
"""

RETURN = r"""
changed_nodes:
  description: The Nodes patched (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
missing_nodes:
  description: Nodes named in O(labels) (or in any of O(sets)) that the cluster does not have.
  returned: always
  type: list
  elements: str
sets:
  description: With O(sets), for each set in its order, the Nodes whose labels that set changes.
  returned: when O(sets) is given
  type: list
  elements: dict
  contains:
    name:
      description: The set's O(sets[].name), null where none was given.
      type: str
    changed_nodes:
      description: The Nodes this set patches (or, in check mode, would).
      type: list
      elements: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import (
    AUTH_ARGS,
    STRATEGIC_MERGE,
    JsonApi,
    api_error,
    connect,
    in_parallel,
)


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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "labels": {"type": "dict"},
            "keep_existing": {"type": "list", "elements": "str", "default": []},
            "sets": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str"},
                "labels": {"type": "dict", "required": True},
                "keep_existing": {"type": "list", "elements": "str", "default": []},
            }},
            "missing": {"type": "str", "choices": ["fail", "warn"], "default": "fail"},
            "field_manager": {"type": "str", "default": "gpuops-nvidia"},
            **AUTH_ARGS,
        },
        required_one_of=[("labels", "sets")],
        mutually_exclusive=[("labels", "sets")],
        supports_check_mode=True,
    )
    p = module.params
    sets = p["sets"] if p["sets"] is not None else [{"labels": p["labels"], "keep_existing": p["keep_existing"]}]
    for index, one in enumerate(sets):
        bad = [n for n, v in (one["labels"] or {}).items() if v is not None and not isinstance(v, dict)]
        if bad:
            where = "labels" if p["sets"] is None else f"sets[{index}].labels"
            module.fail_json(msg=f"{where}: the value for node(s) {bad} must be a mapping of label to value")
    # Plain JSON, the Nodes' metadata only: the client's typed API and models took half a second to import, and
    # a thousand Nodes' full objects to read.
    api = JsonApi(connect(module))
    try:
        listed = api.list_metadata("/api/v1/nodes")
    except Exception as exc:  # an API error, an unreachable server
        module.fail_json(msg=f"listing the Nodes failed: {api_error(exc)}")
        raise  # not reached: fail_json exits
    current = {str(meta.get("name")): dict(meta.get("labels") or {}) for meta in listed}
    named = {n for one in sets for n in (one["labels"] or {})}
    missing = sorted(n for n in named if n not in current)
    if missing and p["missing"] == "fail":
        module.fail_json(msg=f"{len(missing)} node(s) are not in the cluster: {', '.join(missing[:20])}"
                             f"{' ...' if len(missing) > 20 else ''}; each host's Node must carry its name "
                             "(gpuops_cluster_node_name sets another)", missing_nodes=missing)
    if missing:
        module.warn(f"node(s) not in the cluster, not labelled: {', '.join(missing[:20])}")
    patches, changed = plan_sets(current, sets)
    result: dict[str, Any] = {"changed": bool(patches), "changed_nodes": sorted(patches), "missing_nodes": missing}
    if p["sets"] is not None:
        result["sets"] = [{"name": one["name"], "changed_nodes": changed[index]} for index, one in enumerate(sets)]
    if module._diff and patches:
        result["diff"] = {
            "before": {n: {k: current[n].get(k) for k in patch} for n, patch in sorted(patches.items())},
            "after": dict(sorted(patches.items())),
        }
    if not module.check_mode:
        failed = in_parallel(lambda node: api.call("PATCH", f"/api/v1/nodes/{node}", query=[("fieldManager", p["field_manager"])],
                                                   body={"metadata": {"labels": patches[node]}},
                                                   content_type=STRATEGIC_MERGE), sorted(patches))
        if failed:
            node = sorted(failed)[0]
            module.fail_json(msg=f"labelling {len(failed)} node(s) failed, {node} first: {api_error(failed[node])}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
