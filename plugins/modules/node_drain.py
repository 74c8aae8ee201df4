#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_drain
short_description: Cordon a Kubernetes Node and evict its GPU Pods through the Eviction API, and undo it
version_added: 0.2.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - O(state=drained) sorts the Node's Pods first (with O(pods=gpu), only those that request an C(nvidia.com/)
    resource or hold a ResourceClaim allocated with devices of NVIDIA's DRA drivers, C(gpu.nvidia.com) and
    C(compute-domain.nvidia.com)), as C(kubectl drain --ignore-daemonsets) does - DaemonSet and static Pods stay, finished Pods hold
    nothing - and stops before anything changes when a Pod would be lost (no controller recreates it, without
    O(force); emptyDir data, without O(delete_emptydir_data)), naming each Pod and why.
  - Then it cordons the Node, recording in the annotation O(initial_state_annotation) whether the Node was
    schedulable before (C(false)) or already cordoned (C(true)); a drain resumed after a failure keeps the first
    record. Once cordoned it lists the Pods again (one the scheduler placed before the cordon goes too; one that
    would be lost now fails the drain, the Node cordoned), waits for the Pods O(wait_for_completion_pod_selector)
    names to finish (the GPU Operator's C(waitForCompletion)), then evicts each Pod through the Eviction API, so
    PodDisruptionBudgets are honoured - an eviction a budget refuses is retried until O(timeout) - and waits until
    the Pods are gone.
  - When O(timeout) passes it fails naming each Pod still there and, for a Pod a budget holds back, the
    PodDisruptionBudgets that select it; the Node stays cordoned. O(disable_eviction) deletes the Pods instead,
    past their budgets.
  - O(state=restored) undoes the cordon - the Node is made schedulable only when the record says it was before -
    and removes the record; without a record there is nothing of this module's to undo and nothing changes.
  - Supports check mode and diff mode.
options:
  name:
    description: The Node's name.
    type: str
    required: true
  state:
    description: C(drained) cordons and evicts; C(restored) undoes the cordon as recorded.
    type: str
    choices: [drained, restored]
    default: drained
  pods:
    description: Which Pods to evict - C(gpu) those requesting an C(nvidia.com/) resource, C(all) every Pod but DaemonSet and static Pods.
    type: str
    choices: [gpu, all]
    default: gpu
  pod_selector:
    description: A label selector (C(app=train,tier!=system)) that further limits the Pods evicted.
    type: str
    default: ""
  force:
    description: Evict Pods no controller would recreate (they are gone for good) instead of refusing the drain.
    type: bool
    default: false
  delete_emptydir_data:
    description: Evict Pods with emptyDir volumes (their data is lost) instead of refusing the drain.
    type: bool
    default: false
  disable_eviction:
    description: Delete the Pods instead of evicting them, past any PodDisruptionBudget.
    type: bool
    default: false
  timeout:
    description: Seconds to wait for the evictions and for the Pods to be gone; C(0) waits without end.
    type: int
    default: 300
  wait_for_completion_pod_selector:
    description:
      - A label selector (C(app=batch)) naming the Pods on the Node whose end is waited for, once the Node is cordoned,
        before any eviction - running Jobs left to finish. Empty waits for nothing.
    type: str
    default: ""
  wait_for_completion_timeout:
    description: Seconds to wait for them; those still running then are evicted with the others. C(0) waits without end.
    type: int
    default: 0
  wait_for_completion_variable_prefix:
    description: Prefix to O(wait_for_completion_timeout) in messages (the caller's variable).
    type: str
    default: ""
  initial_state_annotation:
    description: The Node annotation that records whether the Node was already cordoned before the drain.
    type: str
    default: gpuops.nvidia/node-initial-state.unschedulable
  variable_prefix:
    description:
      - Prefix to the option names in messages, so that they name the caller's variables
        (C(gpuops_mig_reconfigure_drain_) makes O(force) read C(gpuops_mig_reconfigure_drain_force)).
    type: str
    default: ""
extends_documentation_fragment:
  - gpuops.nvidia.kube
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_cluster
attributes:
  check_mode:
    support: full
    details:
      - The Node and its Pods are read and sorted as in a real run (a refused Pod fails the run); nothing is patched,
        evicted or deleted, and RV(evicted) names the Pods that would be.
  diff_mode:
    support: full
    details:
      - The Node's C(unschedulable) and record before and after, and the Pods that go.
  idempotent:
    support: full
    details:
      - A drained Node with no Pods left to evict, or a restored one, is not changed again.
"""

EXAMPLES = r"""
- name: Cordon the node and evict its GPU pods, honouring their PodDisruptionBudgets
  gpuops.nvidia.node_drain:
    name: gpu-node-1
    timeout: 600

- name: Make it schedulable again, unless it was cordoned before
  gpuops.nvidia.node_drain:
    name: gpu-node-1
    state: restored
"""

RETURN = r"""
cordoned:
  description: Whether this run cordoned the Node (or, in check mode, would).
  returned: always
  type: bool
uncordoned:
  description: Whether this run made the Node schedulable again (or would).
  returned: always
  type: bool
initially_unschedulable:
  description: What the record says about the Node before the drain; null without a record.
  returned: always
  type: bool
evicted:
  description: The Pods evicted or deleted (namespace/name); on a failure, those evicted before it.
  returned: always
  type: list
  elements: str
kept:
  description: Pods left on the Node and why (DaemonSet, static, finished).
  returned: always
  type: dict
not_completed:
  description: The Pods O(wait_for_completion_pod_selector) names that still ran when O(wait_for_completion_timeout) passed.
  returned: when the wait timed out
  type: list
  elements: str
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import (
    AUTH_ARGS,
    STRATEGIC_MERGE,
    JsonApi,
    api_error,
    api_status,
    connect,
    resource_path,
)

POLL = 2.0


class Drain:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.p = module.params
        # The API's plain JSON: the client's typed APIs took half a second to import, and the Pods are read as JSON anyway.
        self.api = JsonApi(connect(module))
        self.path = resource_path("v1", "nodes", name=self.p["name"])
        self.names = {o: f"{self.p['variable_prefix']}{o}" for o in ("force", "delete_emptydir_data", "timeout", "disable_eviction")}
        # The wait's options are named after the operator's waitForCompletion, apart from the drain's.
        self.names["wait_for_completion_timeout"] = f"{self.p['wait_for_completion_variable_prefix']}wait_for_completion_timeout"
        self.result: dict[str, Any] = {"changed": False, "cordoned": False, "uncordoned": False,
                                       "initially_unschedulable": None, "evicted": [], "kept": {}}

    def fail(self, msg: str) -> None:
        self.module.fail_json(msg=f"node {self.p['name']}: {msg}", **self.result)

    def call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # an API error, an unreachable server
            self.fail(f"{what} failed: {api_error(exc)}")
            raise  # not reached

    def node(self) -> dict:
        try:
            return self.api.call("GET", self.path)
        except Exception as exc:
            if api_status(exc) == 404:
                self.fail("no such Node in the cluster")
            self.fail(f"reading the Node failed: {api_error(exc)}")
            raise

    def pods(self) -> list[dict]:
        query = [("fieldSelector", f"spec.nodeName={self.p['name']}")] + ([("labelSelector", self.p["pod_selector"])] if self.p["pod_selector"] else [])
        return self.call("listing its Pods", self.api.list_items, resource_path("v1", "pods"), query)

    def patch(self, what: str, patch: dict) -> None:
        self.call(what, self.api.call, "PATCH", self.path, body=patch, content_type=STRATEGIC_MERGE)

    def record(self, node: dict) -> None:
        value = drain.record(node, self.p["initial_state_annotation"])
        self.result["initially_unschedulable"] = None if value is None else value == "true"

    def diff(self, before: dict, after_unschedulable: bool, after_record: str | None, pods: list[str]) -> None:
        if not self.module._diff:
            return
        ann = self.p["initial_state_annotation"]
        self.result["diff"] = {
            "before": {"unschedulable": drain.unschedulable(before), ann: drain.record(before, ann), "pods": pods},
            "after": {"unschedulable": after_unschedulable, ann: after_record, "pods": []},
        }

    def restore(self) -> None:
        node = self.node()
        self.record(node)
        patch = drain.uncordon_patch(node, self.p["initial_state_annotation"])
        if patch is None:
            return
        self.result["changed"] = True
        self.result["uncordoned"] = "spec" in patch
        unschedulable = drain.unschedulable(node) and not self.result["uncordoned"]
        self.diff(node, unschedulable, None, [])
        if not self.module.check_mode:
            self.patch("uncordoning", patch)

    def claims(self, pods: list[dict]) -> dict[str, dict] | None:
        """The ResourceClaims of the namespaces whose Pods use claims, as ns/name; None where the cluster serves no
        resource API that has them (then every Pod with a claim counts as a GPU Pod)."""
        namespaces = drain.claimed(pods)
        if self.p["pods"] != "gpu" or not namespaces:
            return {}
        for version in drain.DRA_VERSIONS:
            try:
                found = {}
                for ns in namespaces:
                    for item in self.api.list_items(resource_path(version, "resourceclaims", ns)):
                        found[drain.key(item)] = item
                return found
            except Exception as exc:
                if api_status(exc) != 404:
                    self.fail(f"listing ResourceClaims failed: {api_error(exc)}")
        return None

    def select(self) -> drain.Selection:
        pods = self.pods()
        return drain.select(pods, self.p["pods"] == "gpu", self.p["force"], self.p["delete_emptydir_data"], self.names, self.claims(pods))

    def drained(self) -> None:
        node = self.node()
        self.record(node)
        sel = self.select()
        self.result["kept"] = sel["kept"]
        if sel["refused"]:
            self.fail("not drained, nothing changed: " + "; ".join(f"{pod}: {why}" for pod, why in sel["refused"].items()))
        patch = drain.cordon_patch(node, self.p["initial_state_annotation"])
        evict = [drain.key(p) for p in sel["evict"]]
        self.result.update(changed=bool(patch or evict), cordoned=bool(patch and "spec" in patch), evicted=evict)
        recorded = drain.record(node, self.p["initial_state_annotation"]) or ("true" if drain.unschedulable(node) else "false")
        if patch or evict:
            self.diff(node, True, recorded, evict)
        if self.module.check_mode:
            return
        if patch:
            self.patch("cordoning", patch)
            self.result["initially_unschedulable"] = recorded == "true"
        waited = bool(evict) and self.wait_for_completion()
        if self.result["cordoned"] or waited:
            # Listed again: a Pod the scheduler placed before the cordon goes too, a Job that finished stays.
            sel = self.select()
            self.result["kept"] = sel["kept"]
            if sel["refused"]:
                self.fail("not drained, the node stays cordoned: " + "; ".join(f"{pod}: {why}" for pod, why in sel["refused"].items()))
            self.result["changed"] = True
        self.result["evicted"] = []  # from here, the Pods evicted so far
        self.evict(sel["evict"], sel["terminating"])

    def deadline(self, seconds: int) -> float | None:
        """When a wait of `seconds` ends; None (no end) for 0."""
        return time.monotonic() + seconds if seconds else None

    def wait_for_completion(self) -> bool:
        """Wait, once cordoned, for the node's Pods that the selector names to finish (the operator's waitForCompletion);
        when the wait times out they are evicted with the others. Whether it waited."""
        selector = self.p["wait_for_completion_pod_selector"]
        if not selector:
            return False
        deadline = self.deadline(self.p["wait_for_completion_timeout"])
        query = [("fieldSelector", f"spec.nodeName={self.p['name']}"), ("labelSelector", selector)]
        while True:
            left = drain.running(self.call("listing the Pods to wait for", self.api.list_items, resource_path("v1", "pods"), query))
            if not left:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                self.result["not_completed"] = left
                self.module.warn(f"node {self.p['name']}: {', '.join(left)} still running after {self.names['wait_for_completion_timeout']} "
                                 f"({self.p['wait_for_completion_timeout']}s): evicted")
                return True
            time.sleep(POLL)

    def evict(self, pods: list[dict], terminating: list[dict]) -> None:
        deadline = self.deadline(self.p["timeout"])
        todo = {drain.key(p): p for p in pods}
        blocked: dict[str, str] = {}
        waiting = {drain.key(p): p["metadata"]["uid"] for p in pods + terminating}
        while todo:
            for name, pod in sorted(todo.items()):
                meta = pod["metadata"]
                try:
                    pod_path = resource_path("v1", "pods", meta["namespace"], meta["name"])
                    if self.p["disable_eviction"]:
                        self.api.call("DELETE", pod_path)
                    else:
                        self.api.call("POST", f"{pod_path}/eviction", body={
                            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": meta["name"], "namespace": meta["namespace"]}})
                    del todo[name]
                    blocked.pop(name, None)
                    self.result["evicted"].append(name)
                except Exception as exc:
                    status = api_status(exc)
                    if status == 404:  # gone already
                        del todo[name]
                    elif status == 429:  # a PodDisruptionBudget allows no disruption now
                        blocked[name] = api_error(exc)
                    else:
                        self.fail(f"evicting {name} failed: {api_error(exc)}; the node stays cordoned")
            if not todo:
                break
            if deadline is not None and time.monotonic() >= deadline:
                self.timed_out(todo, blocked)
            time.sleep(POLL)
        while True:
            left = {drain.key(p) for p in self.pods() if waiting.get(drain.key(p)) == (p.get("metadata") or {}).get("uid")}
            if not left:
                return
            if deadline is not None and time.monotonic() >= deadline:
                self.fail(f"{len(left)} Pod(s) not gone {self.p['timeout']}s after their eviction: {', '.join(sorted(left))} "
                          f"(their termination grace period, a finalizer, or a kubelet that does not answer); "
                          f"the node stays cordoned; raise {self.names['timeout']} and run again")
            time.sleep(POLL)

    def timed_out(self, todo: dict[str, dict], blocked: dict[str, str]) -> None:
        namespaces = sorted({p["metadata"]["namespace"] for p in todo.values()})
        pdbs: list[dict] = []
        for ns in namespaces:
            pdbs += self.call("listing PodDisruptionBudgets", self.api.list_items, resource_path("policy/v1", "poddisruptionbudgets", ns))
        parts = []
        for name, pod in sorted(todo.items()):
            budgets = drain.blocking_pdbs(pod, pdbs)
            why = f"PodDisruptionBudget {', '.join(budgets)}" if budgets else blocked.get(name, "not evicted")
            parts.append(f"{name} ({why})")
        self.fail(f"{len(todo)} Pod(s) not evicted in {self.p['timeout']}s: {'; '.join(parts)}. The node stays cordoned; "
                  f"relax the budget (or move the workload) and run again, raise {self.names['timeout']}, or set "
                  f"{self.names['disable_eviction']} to delete past the budget")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["drained", "restored"], "default": "drained"},
            "pods": {"type": "str", "choices": ["gpu", "all"], "default": "gpu"},
            "pod_selector": {"type": "str", "default": ""},
            "force": {"type": "bool", "default": False},
            "delete_emptydir_data": {"type": "bool", "default": False},
            "disable_eviction": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 300},
            "wait_for_completion_pod_selector": {"type": "str", "default": ""},
            "wait_for_completion_timeout": {"type": "int", "default": 0},
            "wait_for_completion_variable_prefix": {"type": "str", "default": ""},
            "initial_state_annotation": {"type": "str", "default": "gpuops.nvidia/node-initial-state.unschedulable"},
            "variable_prefix": {"type": "str", "default": ""},
            **AUTH_ARGS,
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 0:
        module.fail_json(msg=f"{module.params['variable_prefix']}timeout: {module.params['timeout']} is not a number of seconds (0 or more)")
    if module.params["wait_for_completion_timeout"] < 0:
        module.fail_json(msg=f"{module.params['wait_for_completion_variable_prefix']}wait_for_completion_timeout: "
                             f"{module.params['wait_for_completion_timeout']} is not a number of seconds (0 or more)")
    run = Drain(module)
    if module.params["state"] == "restored":
        run.restore()
    else:
        run.drained()
    module.exit_json(**run.result)


if __name__ == "__main__":
    main()
