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
    poll, not one call per Node), then, with O(smoke_test), runs one Job per Node that requests one of its
    GPU resources (an C(nvidia-smi) Job by default), waits for the Jobs and deletes them.
  - Reports per Node what it expected, what it found and how its Job ended, and fails naming the Nodes
    that are not right. It leaves nothing behind, so it reports no change.
  - In check mode it reads the Nodes once and reports, without waiting, creating Jobs or failing.
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
    description: Seconds to wait for the allocatable values, and again for the Jobs.
    type: int
    default: 300
extends_documentation_fragment:
  - gpuops.nvidia.kube
attributes:
  check_mode:
    description: Reads and reports only.
    support: full
  diff_mode:
    description: Changes nothing, so there is no diff.
    support: none
"""

EXAMPLES = r"""
- name: Validate the GPU nodes
  gpuops.nvidia.gpu_validation:
    namespace: gpu-operator
    expected:
      l40s-node-1: {nvidia.com/gpu: 16}
      a100-node-1: {nvidia.com/gpu: 1, nvidia.com/mig-1g.10gb: 2}
"""

RETURN = r"""
nodes:
  description: Per Node, C(expected), C(allocatable) (the NVIDIA resources found), C(allocatable_ok), C(job) and C(ok).
  returned: always
  type: dict
timings:
  description: Seconds spent waiting for the allocatable values (C(allocatable_s)) and on the smoke tests (C(smoke_test_s)).
  returned: always
  type: dict
failed_nodes:
  description: The Nodes that are not right.
  returned: always
  type: list
  elements: str
"""

import hashlib
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import (
    AUTH_ARGS,
    ApiException,
    api_error,
    connect,
    in_parallel,
)

RUN_LABEL = "gpuops.nvidia/validation-run"


def nvidia_allocatable(node) -> dict[str, int]:
    alloc = (node.status.allocatable if node.status else None) or {}
    return {k: int(v) for k, v in alloc.items() if k.startswith("nvidia.com/") and str(v).isdigit()}


def allocatable_ok(expected: dict, found: dict) -> bool:
    names = set(expected) | set(found)
    return all(int(expected.get(n, 0)) == int(found.get(n, 0)) for n in names)


def job_name(node: str) -> str:
    base = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-")
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"gpuops-validate-{base[:36]}-{digest}"


def request_for(expected: dict) -> str | None:
    """The resource the smoke test asks for: a whole GPU if the node has one, else its first MIG or shared one."""
    names = sorted(n for n, v in expected.items() if int(v) > 0)
    if "nvidia.com/gpu" in names:
        return "nvidia.com/gpu"
    return names[0] if names else None


def job_manifest(node: str, resource: str, p: dict, run: str) -> dict:
    pod = {
        "restartPolicy": "Never",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "smoke-test",
            "image": p["image"],
            "command": p["command"],
            "resources": {"limits": {resource: "1"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }],
    }
    if p["runtime_class_name"]:
        pod["runtimeClassName"] = p["runtime_class_name"]
    if p["image_pull_secrets"]:
        pod["imagePullSecrets"] = [{"name": s} for s in p["image_pull_secrets"]]
    labels = {"app": "gpuops-validation", RUN_LABEL: run}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(node), "namespace": p["namespace"], "labels": labels},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": p["timeout"],
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "expected": {"type": "dict", "required": True},
            "namespace": {"type": "str", "required": True},
            "smoke_test": {"type": "bool", "default": True},
            "image": {"type": "str", "default": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"},
            "command": {"type": "list", "elements": "str", "default": ["nvidia-smi", "-L"]},
            "image_pull_secrets": {"type": "list", "elements": "str", "default": [], "no_log": False},
            "runtime_class_name": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 300},
            **AUTH_ARGS,
        },
        supports_check_mode=True,
    )
    api = connect(module)
    from kubernetes import client
    p = module.params
    expected = {str(n): {str(k): int(v) for k, v in (r or {}).items()} for n, r in p["expected"].items()}
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)

    report = {n: {"expected": e, "allocatable": {}, "allocatable_ok": False, "job": "not run", "ok": False}
              for n, e in expected.items()}
    started = time.monotonic()
    timings = {}
    deadline = started + p["timeout"]
    while True:
        try:
            nodes = {n.metadata.name: n for n in core.list_node().items}
        except ApiException as exc:
            module.fail_json(msg=f"listing the Nodes failed: {api_error(exc)}")
        for name, row in report.items():
            row["allocatable"] = nvidia_allocatable(nodes[name]) if name in nodes else {}
            row["allocatable_ok"] = name in nodes and allocatable_ok(row["expected"], row["allocatable"])
        if module.check_mode or all(r["allocatable_ok"] for r in report.values()) or time.monotonic() > deadline:
            break
        time.sleep(2)
    timings["allocatable_s"] = round(time.monotonic() - started, 1)
    if module.check_mode:
        module.exit_json(changed=False, nodes=report, failed_nodes=[], timings=timings)

    run = hashlib.sha256(f"{time.time()}".encode()).hexdigest()[:10]
    jobs = {}
    if p["smoke_test"]:
        manifests = {}
        for name, row in sorted(report.items()):
            resource = request_for(row["expected"])
            if not row["allocatable_ok"] or resource is None:
                row["job"] = "skipped" if resource is None else "not run: allocatable wrong"
                continue
            manifests[name] = job_manifest(name, resource, p, run)

        def create(name: str) -> None:
            manifest = manifests[name]
            try:
                batch.create_namespaced_job(p["namespace"], manifest)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                # A Job of an interrupted run: replace it.
                batch.delete_namespaced_job(manifest["metadata"]["name"], p["namespace"], propagation_policy="Background")
                time.sleep(2)
                batch.create_namespaced_job(p["namespace"], manifest)

        failed = in_parallel(create, sorted(manifests))
        for name in manifests:
            if name in failed:
                report[name]["job"] = f"not created: {api_error(failed[name])}"
            else:
                jobs[manifests[name]["metadata"]["name"]] = name
                report[name]["job"] = "created"
        deadline = time.monotonic() + p["timeout"]
        pending = set(jobs)
        while pending and time.monotonic() < deadline:
            for job in batch.list_namespaced_job(p["namespace"], label_selector=f"{RUN_LABEL}={run}").items:
                name = jobs.get(job.metadata.name)
                if name is None or job.metadata.name not in pending:
                    continue
                if (job.status.succeeded or 0) >= 1:
                    report[name]["job"] = "succeeded"
                    pending.discard(job.metadata.name)
                elif (job.status.failed or 0) >= 1:
                    report[name]["job"] = "failed"
                    pending.discard(job.metadata.name)
            if pending:
                time.sleep(2)
        for job in pending:
            report[jobs[job]]["job"] = f"not finished in {p['timeout']}s"
        failed = in_parallel(lambda job: batch.delete_namespaced_job(job, p["namespace"], propagation_policy="Background"),
                             sorted(jobs))
        for job, exc in sorted(failed.items()):
            if getattr(exc, "status", None) != 404:
                module.warn(f"deleting Job {job} failed: {api_error(exc)}")
    timings["smoke_test_s"] = round(time.monotonic() - started - timings["allocatable_s"], 1)
    for row in report.values():
        row["ok"] = row["allocatable_ok"] and row["job"] in ("succeeded", "skipped", "not run")
    failed = sorted(n for n, r in report.items() if not r["ok"])
    if failed:
        lines = [f"{n}: expected {report[n]['expected']}, allocatable {report[n]['allocatable']}, job {report[n]['job']}"
                 for n in failed[:20]]
        module.fail_json(msg=f"{len(failed)} of {len(report)} GPU node(s) failed validation: " + "; ".join(lines),
                         nodes=report, failed_nodes=failed, timings=timings)
    module.exit_json(changed=False, nodes=report, failed_nodes=[], timings=timings)


if __name__ == "__main__":
    main()
