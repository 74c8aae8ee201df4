#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_labels
short_description: Set labels (and annotations) on many Kubernetes Nodes, one API call per Node that changes
version_added: 0.1.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Reads every Node once (one list call), compares each named Node's labels with the ones wanted, and
    patches only the Nodes that differ, one merge patch each. A thousand Nodes already right cost one call.
  - Labels named in O(keep_existing) are set only where the Node has no non-empty value for them, so a
    value someone else set (C(false), C(paused-for-mig-change)) stays.
  - O(annotations) go in the same patch as the labels, one per Node that changes.
  - Supports check mode and diff mode (the labels before and after, per Node that would change).
options:
  labels:
    description:
      - Node name to the labels it should carry. A value of C(null) removes the label.
      - At most one of O(labels) and O(sets) is given; one of them or O(annotations).
    type: dict
  annotations:
    description:
      - Node name to the annotations it should carry, as O(labels) (a value of C(null) removes the annotation). Compared
        with each Node's, and patched with its labels.
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
      - For each Node that changes, the labels it changes before and after; with O(annotations), a second diff of the
        annotations it changes.
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

- name: Mark a node's upgrade done, and clear the failure an earlier run recorded
  gpuops.nvidia.node_labels:
    labels: {gpu-node-1: {nvidia.com/gpu-driver-upgrade-state: upgrade-done}}
    annotations: {gpu-node-1: {gpuops.nvidia/driver-upgrade.failure: null}}

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
  description: Nodes named in O(labels) (or in any of O(sets), or in O(annotations)) that the cluster does not have.
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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import AUTH_ARGS, JsonApi, connect
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.labels import SET_OPTIONS, LabelError, label, set_errors


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "labels": {"type": "dict"},
            "annotations": {"type": "dict"},
            "keep_existing": {"type": "list", "elements": "str", "default": []},
            "sets": {"type": "list", "elements": "dict", "options": SET_OPTIONS},
            "missing": {"type": "str", "choices": ["fail", "warn"], "default": "fail"},
            "field_manager": {"type": "str", "default": "gpuops-nvidia"},
            **AUTH_ARGS,
        },
        required_one_of=[("labels", "sets", "annotations")],
        mutually_exclusive=[("labels", "sets")],
        supports_check_mode=True,
    )
    p = module.params
    sets = p["sets"] if p["sets"] is not None else [{"labels": p["labels"] or {}, "keep_existing": p["keep_existing"]}]
    errors = set_errors(sets, "sets" if p["sets"] is not None else None)
    bad = [n for n, v in (p["annotations"] or {}).items() if v is not None and not isinstance(v, dict)]
    if bad:
        errors.append(f"annotations: the value for node(s) {bad} must be a mapping of annotation to value")
    if errors:
        module.fail_json(msg="; ".join(errors))
    # Plain JSON, the Nodes' metadata only: the client's typed API and models took half a second to import, and
    # a thousand Nodes' full objects to read.
    try:
        result = label(JsonApi(connect(module)), sets, p["field_manager"], p["missing"], module.check_mode, module._diff,
                       {n: v or {} for n, v in (p["annotations"] or {}).items()})
    except LabelError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
        raise  # not reached: fail_json exits
    if result["missing_nodes"]:
        module.warn(f"node(s) not in the cluster, not labelled: {', '.join(result['missing_nodes'][:20])}")
    if p["sets"] is None:
        del result["sets"]
    if "annotations_diff" in result:
        # Two diffs, each headed: the labels', the annotations'.
        result["diff"] = [{"before_header": f"Node {what}", "after_header": f"Node {what}", **part}
                          for what, part in (("labels", result.pop("diff", None)), ("annotations", result.pop("annotations_diff"))) if part]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
