#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_validation
short_description: Check each GPU node's allocatable resources and run a smoke-test Job on it
version_added: 0.1.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Waits until every Node named in O(expected) advertises the GPU resources it should (one Node list a
    poll, not one call per Node) and, where GPU Feature Discovery has labelled it, carries the GFD labels
    O(gfd_labels) gives; then, with O(smoke_test), runs one Job per Node that requests one of its GPU
    resources (an C(nvidia-smi) Job by default), waits for the Jobs and deletes them.
  - GFD labels are compared on the Nodes that carry C(nvidia.com/gpu.product) (GFD has run there); a Node
    without it is reported in RV(gfd_unlabelled), not failed, since GFD may be disabled or still starting.
  - Reports per Node what it expected, what it found and how its Job ended, and fails naming each Node
    that is not right with what is wrong - the resource, or the label, with the value expected and the one
    seen, or the reason the smoke-test pod gave.
  - C(changed) says whether the run left the cluster different from how it found it. The Jobs it creates
    and deletes within the run are not a change, so a re-run on a healthy cluster reports none and a
    playbook's idempotence check holds. It is C(true) when it removed a Job an interrupted earlier run had
    left under the same name (it deletes it and creates its own), or could not delete one of its Jobs (a
    warning names it; its C(ttlSecondsAfterFinished) removes it later). RV(jobs) tells what it did, for a
    C(changed_when) of your own.
  - In check mode it reads the Nodes once and reports, without waiting, creating Jobs or failing; C(changed)
    is C(true) when a real run would replace a Job left by an interrupted run.
options:
  expected:
    description: 'Node name to the resources it should advertise, for example C({"nvidia.com/gpu": 16}).'
    type: dict
    required: true
  namespace:
    description: Namespace of the smoke-test Jobs.
    type: str
    required: true
  smoke_test:
    description: Whether to run the smoke-test Job on each Node, after the allocatable check.
    type: bool
    default: true
  smoke_nodes:
    description:
      - With O(smoke_test), the Nodes to run the smoke-test Job on, as the ones where something changed in this run;
        a Node that was not right at the first read (its resources, its GFD labels or a MIG change still coming) gets
        one too, as it was changing. The others report that nothing changed.
      - Omitted, every Node gets one.
    type: list
    elements: str
  image:
    description: Image of the smoke-test container.
    type: str
    default: nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04
  command:
    description: Command of the smoke-test container.
    type: list
    elements: str
    default: [nvidia-smi, -L]
  image_pull_secrets:
    description: Names of Secrets to pull the image with.
    type: list
    elements: str
    default: []
  runtime_class_name:
    description: RuntimeClass of the smoke-test Pods; empty for the cluster's default runtime.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for the allocatable values (and GFD labels), and again for the Jobs.
    type: int
    default: 300
  gfd_labels:
    description:
      - Node name to the labels GPU Feature Discovery should set there that follow from its hardware and sharing
        config (C(nvidia.com/gpu.product), C(.count), C(.memory), C(.family), C(.compute.major), C(.compute.minor),
        C(nvidia.com/mig.capable), C(.replicas), C(.sharing-strategy), C(nvidia.com/mig-<profile>.count)), as the P(gpuops.nvidia.cluster_nodes#filter)
        filter computes them into each Node's C(gfd_labels). C(null) for a Node skips the comparison.
      - On a Node GFD has labelled, a label in the expectation or among those keys on the Node must have the same
        value on both sides (absent on both counts as the same).
    type: dict
    default: {}
  mig_configs:
    description:
      - Node name to the MIG config this run set in its C(nvidia.com/mig.config) label (the MIG manager applies it). Each
        such Node is waited for until its MIG manager reports C(nvidia.com/mig.config.state=success) for that config;
        O(expected) holds the resources of the layout the config gives.
      - The Node fails at once when the state is C(failed), or when no MIG manager runs there
        (C(nvidia.com/gpu.deploy.mig-manager) not C(true)); its GFD labels are not compared (the facts they are
        computed from show the layout before the change).
    type: dict
    default: {}
  dra:
    description:
      - The GPUs are scheduled with NVIDIA's DRA driver (C(gpuops_gpu_scheduling=dra)) - each Node's devices are read from
        the ResourceSlices of driver C(gpu.nvidia.com), counted as C(gpu.nvidia.com/gpu) (whole GPUs) and
        C(gpu.nvidia.com/mig-<profile>) (MIG devices), which is what O(expected) then names; the smoke test's pod claims
        one device through the ResourceClaimTemplate C(gpuops-validation-gpu) or C(gpuops-validation-mig) in O(namespace)
        (the dra role applies them).
    type: bool
    default: false
    version_added: 0.2.0
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
  - gpuops.nvidia.attributes.in_process
attributes:
  check_mode:
    support: partial
    details:
      - In check mode it reads the Nodes once and reports what it finds against O(expected) and O(gfd_labels); it
        does not wait, runs no smoke-test Job and does not fail on a Node that is not right. C(changed) says whether
        a real run would replace a Job an interrupted earlier run left.
  diff_mode:
    support: none
    details:
      - The Jobs it creates are deleted within the run, so there is no diff.
  idempotent:
    support: full
    details:
      - The Jobs it creates and deletes within a run are not a change, so a re-run on a healthy cluster reports
        none. C(changed) is C(true) only when it replaced a Job an interrupted run left, or could not delete one of
        its own.
"""

EXAMPLES = r"""
- name: Validate the GPU nodes
  gpuops.nvidia.gpu_validation:
    namespace: gpu-operator
    expected:
      l40s-node-1: {nvidia.com/gpu: 16}
      a100-node-1: {nvidia.com/gpu: 1, nvidia.com/mig-1g.10gb: 2}
    gfd_labels:
      l40s-node-1: {nvidia.com/gpu.product: NVIDIA-L40S-SHARED, nvidia.com/gpu.count: "4", nvidia.com/mig.capable: "false"}
  register: validation
  # Count any smoke-test Job as a change, instead of only what the run left different.
  changed_when: validation.jobs.created > 0 or validation.changed
"""

RETURN = r"""
nodes:
  description:
    - Per Node, C(expected), C(allocatable) (the NVIDIA resources found), C(allocatable_ok), C(present) (the Node
      exists), C(gfd) (C(matches), C(wrong), C(not labelled) or C(not checked)), C(gfd_wrong) (when wrong, each
      C(label) with its C(expected) and C(actual) value, null where absent), C(job) and C(ok).
    - 'C(job) is C(succeeded); C(skipped) for a Node without GPU resources; C(not run) (no smoke test, check mode),
      C(not run: nothing changed) (not in O(smoke_nodes)) or
      C(not run: allocatable wrong); or C(failed: <reason>), C(not finished in <timeout>s: <reason>) or
      C(not created: <reason>) - the smoke-test pod''s reason, or the API server''s message.'
  returned: always
  type: dict
timings:
  description: Seconds spent waiting for the allocatable values (C(allocatable_s)) and on the smoke tests (C(smoke_test_s)).
  returned: always
  type: dict
failed_nodes:
  description: The Nodes that are not right (empty in check mode).
  returned: always
  type: list
  elements: str
gfd_unlabelled:
  description: The Nodes with an expectation in O(gfd_labels) that GFD has not labelled (yet); reported, not failed.
  returned: always
  type: list
  elements: str
jobs:
  description:
    - The smoke-test Jobs - C(created) (how many), C(replaced) (the names of Jobs an interrupted run had left, deleted
      and created again; in check mode, those a run would replace) and C(left) (Jobs it could not delete).
      C(changed) is C(true) exactly when C(replaced) or C(left) is not empty.
  returned: always
  type: dict
  sample: {created: 3, replaced: [], left: []}
"""

from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import AUTH_ARGS, JsonApi, api_error, api_status, connect, resource_path
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.validation import (
    ApiError,
    JobState,
    MonotonicClock,
    NodeState,
    Settings,
    nvidia_resources,
    validate,
)


class KubeCluster:
    """The cluster as validate() asks for it, in the API's plain JSON (the client's typed APIs and models took half a
    second to import, and a thousand Nodes' objects long to build); API errors become ApiError."""

    def __init__(self, api: Any) -> None:
        self.api = JsonApi(api)

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # the server's answer (its status and message), or none: a connection error
            raise ApiError(api_status(exc), f"{what}: {api_error(exc)}") from exc

    def list_nodes(self) -> list[NodeState]:
        items = self._call("listing the Nodes", lambda: self.api.list_items("/api/v1/nodes"))
        return [NodeState(str(n["metadata"]["name"]), nvidia_resources((n.get("status") or {}).get("allocatable")),
                          dict(n["metadata"].get("labels") or {})) for n in items]

    def list_jobs(self, namespace: str, selector: str) -> list[JobState]:
        items = self._call(f"listing the Jobs in {namespace}",
                           lambda: self.api.list_items(resource_path("batch/v1", "jobs", namespace), [("labelSelector", selector)]))
        out = []
        for job in items:
            status = job.get("status") or {}
            conditions = tuple({"type": c.get("type"), "reason": c.get("reason") or "", "message": c.get("message") or ""}
                               for c in status.get("conditions") or [])
            out.append(JobState(job["metadata"]["name"], status.get("succeeded") or 0, status.get("failed") or 0, conditions))
        return out

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> None:
        self._call(f"creating Job {manifest['metadata']['name']}",
                   lambda: self.api.call("POST", resource_path("batch/v1", "jobs", namespace), body=manifest))

    def delete_job(self, namespace: str, name: str) -> None:
        self._call(f"deleting Job {name}",
                   lambda: self.api.call("DELETE", resource_path("batch/v1", "jobs", namespace, name),
                                         query=[("propagationPolicy", "Background")]))

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        try:
            return self.api.list_items(resource_path("v1", "pods", namespace), [("labelSelector", f"job-name={job}")])
        except Exception:  # the reason is a courtesy; the Job's own state is reported without it
            return []

    def list_resource_slices(self) -> list[dict[str, Any]]:
        return self._call("listing the ResourceSlices", lambda: self.api.list_items(resource_path("resource.k8s.io/v1", "resourceslices")))


ARGUMENT_SPEC: dict[str, Any] = {
    "expected": {"type": "dict", "required": True},
    "namespace": {"type": "str", "required": True},
    "smoke_test": {"type": "bool", "default": True},
    "smoke_nodes": {"type": "list", "elements": "str"},
    "image": {"type": "str", "default": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"},
    "command": {"type": "list", "elements": "str", "default": ["nvidia-smi", "-L"]},
    "image_pull_secrets": {"type": "list", "elements": "str", "default": [], "no_log": False},
    "runtime_class_name": {"type": "str", "default": ""},
    "timeout": {"type": "int", "default": 300},
    "gfd_labels": {"type": "dict", "default": {}},
    "mig_configs": {"type": "dict", "default": {}},
    "dra": {"type": "bool", "default": False},
    **AUTH_ARGS,
}


def run(module: Any) -> None:
    """The module's work, given an AnsibleModule (or the action plugin's in-process stand-in for one)."""
    p = module.params
    expected = {str(n): {str(k): int(v) for k, v in (r or {}).items()} for n, r in p["expected"].items()}
    gfd_labels = {str(n): ({str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else None)
                  for n, labels in (p["gfd_labels"] or {}).items()}
    settings = Settings(namespace=p["namespace"], image=p["image"], command=tuple(p["command"]),
                        image_pull_secrets=tuple(p["image_pull_secrets"]), runtime_class_name=p["runtime_class_name"],
                        timeout=p["timeout"], smoke_test=p["smoke_test"],
                        smoke_nodes=None if p["smoke_nodes"] is None else frozenset(p["smoke_nodes"]), dra=p["dra"])
    cluster = KubeCluster(connect(module))
    try:
        result = validate(cluster, expected, settings, MonotonicClock(), gfd_expected=gfd_labels, check_mode=module.check_mode,
                          mig_configs={str(n): str(c) for n, c in (p["mig_configs"] or {}).items()})
    except ApiError as exc:
        module.fail_json(msg=exc.message, status=exc.status)
        raise  # not reached: fail_json exits
    for warning in result.warnings:
        module.warn(warning)
    out = {"changed": result.changed, "nodes": result.nodes, "failed_nodes": result.failed_nodes, "timings": result.timings,
           "gfd_unlabelled": result.gfd_unlabelled, "jobs": result.jobs}
    if result.msg:
        module.fail_json(msg=result.msg, **out)
    module.exit_json(**out)


def main() -> None:
    run(AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True))


if __name__ == "__main__":
    main()
