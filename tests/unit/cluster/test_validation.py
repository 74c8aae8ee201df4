"""gpu_validation's logic against a fake cluster and a fake clock: the waits, the Jobs, the GFD labels, `changed`."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.validation import (
    RUN_LABEL,
    ApiError,
    JobState,
    NodeState,
    Settings,
    compare_gfd,
    expected_gfd_labels,
    gfd_sharing,
    job_manifest,
    job_name,
    job_reason,
    pod_reason,
    validate,
)

TS4 = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
SETTINGS = Settings(namespace="gpu-operator", timeout=300)


class Clock:
    """Time passes only when the code sleeps."""

    def __init__(self) -> None:
        self.t = 0.0
        self.lock = threading.Lock()

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.t += seconds


class FakeCluster:
    """Nodes whose allocatable may appear at a given time; Jobs that end as told, each its pod."""

    def __init__(self, clock: Clock, nodes: dict[str, dict[str, int]], labels: dict[str, dict[str, str]] | None = None,
                 ready_at: float = 0.0) -> None:
        self.clock = clock
        self.nodes = nodes
        self.labels = labels or {}
        self.ready_at = ready_at
        self.jobs: dict[str, dict[str, Any]] = {}
        self.outcome: dict[str, str] = {}  # Job name -> succeeded | failed | pending
        self.pods: dict[str, dict[str, Any]] = {}  # Job name -> pod as the API serialises it
        self.terminating_until: dict[str, float] = {}  # deleted Jobs whose name stays taken until then
        self.refuse_delete: set[str] = set()
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.node_lists = 0
        self.lock = threading.Lock()

    def list_nodes(self) -> list[NodeState]:
        self.node_lists += 1
        up = self.clock.now() >= self.ready_at
        return [NodeState(name, dict(alloc) if up else {}, dict(self.labels.get(name, {}))) for name, alloc in self.nodes.items()]

    def list_jobs(self, namespace: str, selector: str) -> list[JobState]:
        key, _sep, value = selector.partition("=")
        out = []
        for name, job in self.jobs.items():
            if job["metadata"]["labels"].get(key) != value:
                continue
            outcome = self.outcome.get(name, "succeeded")
            conditions = ({"type": "Failed", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"},) \
                if outcome == "failed" else ()
            out.append(JobState(name, int(outcome == "succeeded"), int(outcome == "failed"), conditions))
        return out

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        with self.lock:
            if name in self.jobs or self.clock.now() < self.terminating_until.get(name, -1):
                raise ApiError(409, f'jobs.batch "{name}" already exists')
            self.jobs[name] = manifest
            self.created.append(name)

    def delete_job(self, namespace: str, name: str) -> None:
        with self.lock:
            if name in self.refuse_delete:
                raise ApiError(403, "forbidden")
            if name not in self.jobs:
                raise ApiError(404, "not found")
            del self.jobs[name]
            self.deleted.append(name)

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return [self.pods[job]] if job in self.pods else []


def leftover(node: str) -> dict[str, Any]:
    """The Job an interrupted run left for this node."""
    return {"metadata": {"name": job_name(node), "labels": {"app": "gpuops-validation", RUN_LABEL: "earlier"}}}


# ---------------------------------------------------------------------------------------------------
# The allocatable wait
# ---------------------------------------------------------------------------------------------------

def test_success_runs_one_job_per_node_and_leaves_nothing():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2}})
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2}},
                      SETTINGS, clock, run="r1")
    assert result.msg == ""
    assert result.failed_nodes == []
    assert {n: r["job"] for n, r in result.nodes.items()} == {"h100": "succeeded", "a100": "succeeded"}
    assert all(r["ok"] and r["allocatable_ok"] for r in result.nodes.values())
    assert sorted(cluster.created) == sorted(cluster.deleted) == sorted([job_name("h100"), job_name("a100")])
    assert cluster.jobs == {}
    assert result.jobs == {"created": 2, "replaced": [], "left": []}
    assert result.changed is False
    assert cluster.node_lists == 1  # right at once: no second list


class DraCluster(FakeCluster):
    """The same Nodes, whose devices are in ResourceSlices (the DRA driver's) and not in their allocatable."""

    def __init__(self, clock: Clock, slices: list[dict[str, Any]], nodes: dict[str, dict[str, int]]) -> None:
        super().__init__(clock, {name: {} for name in nodes})
        self.slices = slices

    def list_resource_slices(self) -> list[dict[str, Any]]:
        return self.slices


def _slice(node: str, *kinds: str) -> dict[str, Any]:
    devices = [{"name": f"d{i}", "attributes": {"type": {"string": k.split(":")[0]},
                                                **({"profile": {"string": k.split(":")[1]}} if ":" in k else {})}}
               for i, k in enumerate(kinds)]
    return {"spec": {"driver": "gpu.nvidia.com", "nodeName": node, "devices": devices}}


def test_with_dra_the_devices_are_read_from_the_resource_slices_and_the_job_claims_one():
    clock = Clock()
    expected = {"h100": {"gpu.nvidia.com/gpu": 2}, "a100": {"gpu.nvidia.com/gpu": 1, "gpu.nvidia.com/mig-1g.10gb": 1}}
    cluster = DraCluster(clock, [_slice("h100", "gpu", "gpu"), _slice("a100", "gpu", "mig:1g.10gb")], expected)
    settings = dataclasses.replace(SETTINGS, dra=True)
    result = validate(cluster, expected, settings, clock, run="r1")
    assert result.msg == "" and {n: r["job"] for n, r in result.nodes.items()} == {"h100": "succeeded", "a100": "succeeded"}
    # One device short on the H100 node: named with the kind, expected and seen.
    cluster = DraCluster(clock, [_slice("h100", "gpu"), _slice("a100", "gpu", "mig:1g.10gb")], expected)
    result = validate(cluster, expected, dataclasses.replace(settings, timeout=4), clock, run="r2")
    assert "h100: gpu.nvidia.com/gpu expected 2, seen 1 after 4s" in result.msg, result.msg


def test_the_job_asks_for_a_whole_gpu_else_the_first_mig_profile():
    clock = Clock()
    cluster = FakeCluster(clock, {"a": {"nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}, "b": {"nvidia.com/gpu": 16}})
    seen: dict[str, dict] = {}
    create = cluster.create_job

    def record(namespace: str, manifest: dict) -> None:
        seen[manifest["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
             ["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]] = manifest["spec"]["template"]["spec"]["containers"][0]["resources"]
        create(namespace, manifest)

    cluster.create_job = record  # type: ignore[method-assign]
    validate(cluster, {"a": {"nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2}, "b": {"nvidia.com/gpu": 16}}, SETTINGS, clock)
    assert seen == {"a": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}, "b": {"limits": {"nvidia.com/gpu": "1"}}}


def test_the_job_runs_on_a_cordoned_node():
    """A node being changed (mig_reconfigure, a driver upgrade) is validated before it is uncordoned."""
    clock = Clock()
    cluster = FakeCluster(clock, {"a": {"nvidia.com/gpu": 1}})
    tolerations: list = []
    create = cluster.create_job

    def record(namespace: str, manifest: dict) -> None:
        tolerations.extend(manifest["spec"]["template"]["spec"]["tolerations"])
        create(namespace, manifest)

    cluster.create_job = record  # type: ignore[method-assign]
    validate(cluster, {"a": {"nvidia.com/gpu": 1}}, SETTINGS, clock)
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in tolerations


def test_allocatable_that_appears_late_is_waited_for():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}}, ready_at=10)
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert result.msg == ""
    assert result.timings["allocatable_s"] == 10.0
    assert cluster.node_lists == 6  # t = 0, 2, ... 10


def test_wrong_allocatable_times_out_naming_node_resource_expected_and_seen():
    clock = Clock()
    cluster = FakeCluster(clock, {"a100": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1}, "h100": {"nvidia.com/gpu": 8}})
    result = validate(cluster, {"a100": {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1},
                                "h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert result.failed_nodes == ["a100"]
    assert "1 of 2 GPU node(s) failed validation" in result.msg
    assert "a100: nvidia.com/mig-1g.10gb expected 2, seen 1 after 300s" in result.msg
    assert "a100: nvidia.com/mig-3g.40gb expected 1, seen none after 300s" in result.msg
    assert "h100" not in result.msg
    assert 300 <= result.timings["allocatable_s"] <= 302
    # No Job for the wrong node; the right one is still tested.
    assert cluster.created == [job_name("h100")]
    assert result.nodes["a100"]["job"] == "not run: allocatable wrong"
    assert result.nodes["h100"]["job"] == "succeeded"


def test_a_resource_advertised_but_not_expected_is_wrong_too():
    clock = Clock()
    cluster = FakeCluster(clock, {"l40s": {"nvidia.com/gpu": 16}})
    result = validate(cluster, {"l40s": {"nvidia.com/gpu": 4}}, Settings(namespace="ns", timeout=10, smoke_test=False), clock)
    assert "l40s: nvidia.com/gpu expected 4, seen 16 after 10s" in result.msg


def test_a_node_missing_from_the_cluster_is_named():
    clock = Clock()
    cluster = FakeCluster(clock, {})
    result = validate(cluster, {"gone": {"nvidia.com/gpu": 1}}, Settings(namespace="ns", timeout=4), clock)
    assert result.failed_nodes == ["gone"]
    assert "gone: no Node of that name in the cluster" in result.msg


def test_a_node_without_gpu_resources_is_skipped_not_failed():
    clock = Clock()
    cluster = FakeCluster(clock, {"cpu": {}})
    result = validate(cluster, {"cpu": {}}, SETTINGS, clock)
    assert result.msg == ""
    assert result.nodes["cpu"]["job"] == "skipped"
    assert cluster.created == []


# ---------------------------------------------------------------------------------------------------
# The Jobs
# ---------------------------------------------------------------------------------------------------

def test_a_failed_job_is_reported_with_the_pods_reason():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})
    job = job_name("h100")
    cluster.outcome[job] = "failed"
    cluster.pods[job] = {"metadata": {"name": job + "-x7k2p"}, "status": {"phase": "Failed", "containerStatuses": [
        {"name": "smoke-test", "state": {"terminated": {"reason": "Error", "exitCode": 4,
                                                        "message": "Failed to initialize NVML: Driver/library version mismatch\n"}}}]}}
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert result.failed_nodes == ["h100"]
    reason = f"pod {job}-x7k2p: container smoke-test Error (exit code 4): Failed to initialize NVML: Driver/library version mismatch"
    assert result.nodes["h100"]["job"] == "failed: " + reason
    assert f"h100: smoke test failed: {reason}" in result.msg
    assert cluster.jobs == {}  # deleted all the same


def test_a_job_that_does_not_finish_is_reported_with_the_pods_wait():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})
    job = job_name("h100")
    cluster.outcome[job] = "pending"
    cluster.pods[job] = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "smoke-test", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}}
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, Settings(namespace="ns", timeout=60), clock)
    assert result.nodes["h100"]["job"] == "not finished in 60s: pod p: container smoke-test ImagePullBackOff: Back-off pulling image"
    assert 60 <= result.timings["smoke_test_s"] <= 62
    assert cluster.jobs == {}


def test_the_jobs_own_deadline_outlasts_the_wait_so_a_stuck_pod_is_still_there_to_say_why():
    # At activeDeadlineSeconds the Job controller deletes the pod: were it the module's own timeout, the run would read
    # the Job failed with no pod ("DeadlineExceeded") instead of the pod's wait (seen on the lab's real node).
    for timeout in (1, 60, 300):
        spec = job_manifest("h100", "nvidia.com/gpu", Settings(namespace="ns", timeout=timeout), "r1")["spec"]
        assert spec["activeDeadlineSeconds"] >= timeout + 30


def test_a_job_left_by_an_interrupted_run_is_replaced_and_that_is_a_change():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 1}})
    cluster.jobs[job_name("h100")] = leftover("h100")
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 1}}, SETTINGS, clock, run="now")
    assert result.msg == ""
    assert result.nodes["h100"]["job"] == "succeeded"
    assert result.jobs == {"created": 2, "replaced": [job_name("h100")], "left": []}
    assert result.changed is True
    assert cluster.deleted.count(job_name("h100")) == 2  # the leftover, then ours
    assert cluster.jobs == {}


def test_a_replaced_job_whose_name_stays_taken_a_while_is_created_once_free():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})
    cluster.jobs[job_name("h100")] = leftover("h100")
    cluster.terminating_until[job_name("h100")] = 3.0
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert result.nodes["h100"]["job"] == "succeeded"
    assert clock.now() >= 3.0


def test_a_create_refused_for_another_reason_is_reported_per_node():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})

    def refuse(namespace: str, manifest: dict) -> None:
        raise ApiError(403, 'jobs.batch is forbidden: User "ci" cannot create resource "jobs"')

    cluster.create_job = refuse  # type: ignore[method-assign]
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert result.nodes["h100"]["job"].startswith("not created: jobs.batch is forbidden")
    assert result.failed_nodes == ["h100"]


def test_a_job_that_cannot_be_deleted_is_a_change_and_a_warning():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})
    cluster.refuse_delete.add(job_name("h100"))
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert result.msg == ""
    assert result.jobs["left"] == [job_name("h100")]
    assert result.changed is True
    assert result.warnings and job_name("h100") in result.warnings[0] and "forbidden" in result.warnings[0]


def test_jobs_are_deleted_even_when_listing_them_fails():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})

    def broken(namespace: str, selector: str) -> list[JobState]:
        raise ApiError(500, "etcdserver: request timed out")

    cluster.list_jobs = broken  # type: ignore[method-assign]
    with pytest.raises(ApiError, match="etcdserver"):
        validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock)
    assert cluster.created == cluster.deleted == [job_name("h100")]


def test_without_smoke_test_no_job_is_created():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, Settings(namespace="ns", smoke_test=False), clock)
    assert result.msg == "" and cluster.created == [] and result.nodes["h100"]["job"] == "not run"


def test_smoke_nodes_limits_the_jobs_to_the_nodes_that_changed():
    clock = Clock()
    nodes = {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 1}, "l40s": {"nvidia.com/gpu": 4}}
    cluster = FakeCluster(clock, dict(nodes))
    result = validate(cluster, nodes, Settings(namespace="ns", smoke_nodes=frozenset({"a100", "elsewhere"})), clock)
    assert result.msg == "" and result.failed_nodes == []
    assert cluster.created == [job_name("a100")]
    assert {n: r["job"] for n, r in result.nodes.items()} == {
        "h100": "not run: nothing changed", "a100": "succeeded", "l40s": "not run: nothing changed"}
    assert all(r["ok"] for r in result.nodes.values())


def test_a_node_not_right_at_the_first_read_is_smoke_tested_though_not_listed():
    """Its resources were still coming (a device plugin just deployed, a node just booted): it was changing."""
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}}, ready_at=4)
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, Settings(namespace="ns", smoke_nodes=frozenset()), clock)
    assert result.msg == "" and cluster.created == [job_name("h100")] and result.nodes["h100"]["job"] == "succeeded"


def test_a_node_with_a_mig_change_is_smoke_tested_though_not_listed():
    clock = Clock()
    labels = {"a100": {"nvidia.com/gpu.deploy.mig-manager": "true", "nvidia.com/mig.config": "all-1g.10gb",
                       "nvidia.com/mig.config.state": "success"}}
    cluster = FakeCluster(clock, {"a100": {"nvidia.com/mig-1g.10gb": 7}}, labels=labels)
    result = validate(cluster, {"a100": {"nvidia.com/mig-1g.10gb": 7}}, Settings(namespace="ns", smoke_nodes=frozenset()), clock,
                      mig_configs={"a100": "all-1g.10gb"})
    assert result.msg == "" and cluster.created == [job_name("a100")]


def test_a_wrong_node_outside_smoke_nodes_still_fails():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 4}})
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, Settings(namespace="ns", timeout=4, smoke_nodes=frozenset()), clock)
    assert result.failed_nodes == ["h100"] and cluster.created == []
    assert "h100" in result.msg and "nvidia.com/gpu" in result.msg


def test_check_mode_reads_once_creates_nothing_and_predicts_the_replacement():
    clock = Clock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}, "a100": {}})
    cluster.jobs[job_name("h100")] = leftover("h100")
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 1}}, SETTINGS, clock, check_mode=True)
    assert cluster.node_lists == 1 and cluster.created == [] and cluster.deleted == []
    assert result.failed_nodes == [] and result.msg == ""  # a100 is wrong, but check mode does not fail
    assert result.jobs["replaced"] == [job_name("h100")] and result.changed is True
    assert clock.now() == 0


# ---------------------------------------------------------------------------------------------------
# Reasons
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                              "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]},
         "pod p: not scheduled: Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
        ({"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active on the node longer than the specified deadline"},
         "pod p: DeadlineExceeded: Pod was active on the node longer than the specified deadline"),
        ({"phase": "Failed", "containerStatuses": [{"name": "smoke-test", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]},
         "pod p: container smoke-test OOMKilled (exit code 137)"),
        ({"phase": "Pending", "containerStatuses": [{"name": "smoke-test", "state": {"waiting": {"reason": "ContainerCreating"}}}]},
         "pod p: container smoke-test ContainerCreating"),
        ({"phase": "Running"}, "pod p: Running"),
    ],
)
def test_pod_reason(status, reason):
    assert pod_reason({"metadata": {"name": "p"}, "status": status}) == reason


def test_job_reason_without_a_pod_is_the_jobs_condition():
    job = JobState("j", failed=1, conditions=({"type": "Failed", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"},))
    assert job_reason(job, []) == "DeadlineExceeded: Job was active longer than specified deadline"
    assert job_reason(None, []) == "no pod was created"


# ---------------------------------------------------------------------------------------------------
# GPU Feature Discovery's labels
# ---------------------------------------------------------------------------------------------------

H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
               "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
               "nvidia.com/mig.capable": "true", "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}


def test_expected_labels_of_an_hgx_h100(info_of):
    assert expected_gfd_labels(info_of("hgx-h100"), None, "mixed") == H100_LABELS


def test_expected_labels_follow_the_sharing_config(info_of):
    shared = expected_gfd_labels(info_of("hgx-h100"), TS4, "mixed")
    assert shared["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert shared["nvidia.com/gpu.replicas"] == "4" and shared["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    renamed = {"sharing": {"timeSlicing": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    assert expected_gfd_labels(info_of("hgx-h100"), renamed, "mixed")["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_expected_labels_of_a_mig_node_count_each_profile(info_of):
    labels = expected_gfd_labels(info_of("a100-pcie-mig"), None, "mixed")
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/mig-")} == {
        "nvidia.com/mig-1g.10gb.count": "2", "nvidia.com/mig-2g.20gb.count": "1", "nvidia.com/mig-3g.40gb.count": "1"}
    assert labels["nvidia.com/gpu.count"] == "2"
    # Single strategy cannot describe a node with a GPU out of MIG mode: GFD's MIG-INVALID.
    assert expected_gfd_labels(info_of("a100-pcie-mig"), None, "single")["nvidia.com/gpu.product"] == "NVIDIA-A100-80GB-PCIe-MIG-INVALID"


@pytest.mark.parametrize("profile", ["l40s", "no-gpu"])
def test_no_expectation_without_nvmls_view(info_of, profile):
    # The L40S profile has no driver loaded: its facts come from PCI alone, and GFD would not run there yet.
    assert expected_gfd_labels(info_of(profile), None, "mixed") is None


def test_no_expectation_from_facts_of_another_shape_or_a_refused_config(info_of):
    assert expected_gfd_labels({"summary": {}}, None, "mixed") is None
    bad = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": "four"}]}}}
    assert expected_gfd_labels(info_of("hgx-h100"), bad, "mixed") is None


def test_gfd_sharing_reads_the_gpu_resource():
    assert gfd_sharing(None) == {"strategy": "none", "replicas": 1}
    assert gfd_sharing(TS4) == {"strategy": "time-slicing", "replicas": 4, "rename_by_default": False}
    mps = {"sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "gpu", "replicas": 2}]}}}
    assert gfd_sharing(mps) == {"strategy": "mps", "replicas": 2, "rename_by_default": True}
    mig_only = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}}
    assert gfd_sharing(mig_only) == {"strategy": "none", "replicas": 1}


def test_compare_gfd():
    assert compare_gfd(None, H100_LABELS) == ("not checked", [])
    assert compare_gfd(H100_LABELS, {"nvidia.com/mig.capable": "true"}) == ("not labelled", [])
    on_node = {**H100_LABELS, "nvidia.com/gfd.timestamp": "1724000000", "nvidia.com/cuda.driver-version.full": "550.54.15"}
    assert compare_gfd(H100_LABELS, on_node) == ("matches", [])
    wrong = {**H100_LABELS, "nvidia.com/gpu.count": "7", "nvidia.com/mig-1g.10gb.count": "7"}
    del wrong["nvidia.com/gpu.memory"]
    assert compare_gfd(H100_LABELS, wrong) == ("wrong", [
        {"label": "nvidia.com/gpu.count", "expected": "8", "actual": "7"},
        {"label": "nvidia.com/gpu.memory", "expected": "81559", "actual": None},
        {"label": "nvidia.com/mig-1g.10gb.count", "expected": None, "actual": "7"},
    ])


def test_a_wrong_gfd_label_fails_naming_node_label_expected_and_actual():
    clock = Clock()
    labels = {"h100": {**H100_LABELS, "nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}, "a100": {"nvidia.com/mig.capable": "true"}}
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 2}}, labels)
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}, "a100": {"nvidia.com/gpu": 2}}, Settings(namespace="ns", timeout=30), clock,
                      gfd_expected={"h100": H100_LABELS, "a100": {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}})
    assert result.failed_nodes == ["h100"]
    assert "h100: GFD label nvidia.com/gpu.product expected NVIDIA-H100-80GB-HBM3, actual NVIDIA-H100-PCIe" in result.msg
    assert result.nodes["h100"]["gfd"] == "wrong"
    assert result.nodes["h100"]["job"] == "succeeded"  # the smoke test does not depend on the labels
    # GFD may be off or still starting on a100: reported, not failed.
    assert result.gfd_unlabelled == ["a100"] and result.nodes["a100"]["ok"]
    # A wrong label is waited for, as GFD relabels every sleep interval.
    assert 30 <= result.timings["allocatable_s"] <= 32


def test_labels_absent_on_one_side_or_empty_are_named_so():
    clock = Clock()
    labels = {"h100": {**H100_LABELS, "nvidia.com/mig-1g.10gb.count": "7", "nvidia.com/gpu.family": ""}}
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}}, labels)
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, Settings(namespace="ns", timeout=0, smoke_test=False), clock,
                      gfd_expected={"h100": H100_LABELS})
    assert "h100: GFD label nvidia.com/mig-1g.10gb.count expected absent, actual 7" in result.msg
    assert 'h100: GFD label nvidia.com/gpu.family expected hopper, actual ""' in result.msg


def test_a_gfd_label_corrected_while_waiting_passes():
    clock = Clock()
    labels = {"h100": {**H100_LABELS, "nvidia.com/gpu.product": "stale"}}
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}}, labels)
    original = cluster.list_nodes

    def relabelled() -> list[NodeState]:
        if clock.now() >= 6:
            cluster.labels["h100"] = H100_LABELS
        return original()

    cluster.list_nodes = relabelled  # type: ignore[method-assign]
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, SETTINGS, clock, gfd_expected={"h100": H100_LABELS})
    assert result.msg == "" and result.nodes["h100"]["gfd"] == "matches"
    assert result.timings["allocatable_s"] == 6.0


# ---------------------------------------------------------------------------------------------------
# A MIG config this run set: waited for until the MIG manager reports it applied
# ---------------------------------------------------------------------------------------------------

MIG_SET = {"nvidia.com/gpu.deploy.mig-manager": "true", "nvidia.com/mig.config": "all-1g.10gb"}


def test_a_mig_change_is_waited_for_until_the_manager_says_success():
    clock = Clock()
    cluster = FakeCluster(clock, {"a100": {"nvidia.com/gpu": 2}}, {"a100": {**MIG_SET, "nvidia.com/mig.config.state": "pending"}})
    original = cluster.list_nodes

    def manager() -> list[NodeState]:
        if clock.now() >= 8:  # applied: the new layout advertised, the state says so
            cluster.nodes["a100"] = {"nvidia.com/mig-1g.10gb": 14}
            cluster.labels["a100"]["nvidia.com/mig.config.state"] = "success"
        return original()

    cluster.list_nodes = manager  # type: ignore[method-assign]
    result = validate(cluster, {"a100": {"nvidia.com/mig-1g.10gb": 14}}, SETTINGS, clock, mig_configs={"a100": "all-1g.10gb"},
                      gfd_expected={"a100": {"nvidia.com/gpu.product": "from the old layout"}})
    assert result.msg == ""
    assert result.timings["allocatable_s"] == 8.0
    assert result.nodes["a100"]["mig"] == {"config": "all-1g.10gb", "state": "success", "deploy": "true", "status": "applied"}
    assert result.nodes["a100"]["gfd"] == "not checked"  # the facts show the layout before the change
    assert result.nodes["a100"]["job"] == "succeeded"


def test_resources_right_but_the_state_still_pending_is_not_done():
    # The old layout can advertise what the new one will (or the manager has not reacted yet): the state decides.
    clock = Clock()
    before = {**MIG_SET, "nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success"}
    cluster = FakeCluster(clock, {"a100": {"nvidia.com/gpu": 2}}, {"a100": before})
    result = validate(cluster, {"a100": {"nvidia.com/gpu": 2}}, Settings(namespace="ns", timeout=10, smoke_test=False), clock,
                      mig_configs={"a100": "all-1g.10gb"})
    assert result.failed_nodes == ["a100"]
    assert "a100: MIG config all-1g.10gb not applied after 10s (nvidia.com/mig.config.state=success)" in result.msg


def test_a_failed_mig_change_fails_at_once_naming_the_config():
    clock = Clock()
    cluster = FakeCluster(clock, {"a100": {"nvidia.com/gpu": 2}}, {"a100": {**MIG_SET, "nvidia.com/mig.config.state": "failed"}})
    result = validate(cluster, {"a100": {"nvidia.com/mig-1g.10gb": 14}}, SETTINGS, clock, mig_configs={"a100": "all-1g.10gb"})
    assert result.failed_nodes == ["a100"]
    assert "a100: the MIG manager failed to apply all-1g.10gb (nvidia.com/mig.config.state=failed)" in result.msg
    assert "expected" not in result.msg  # the resources follow from the failure: not listed
    assert cluster.node_lists == 1 and cluster.created == []


def test_a_mig_change_where_no_mig_manager_runs_is_named():
    clock = Clock()
    labels = {"a100": {**MIG_SET, "nvidia.com/gpu.deploy.mig-manager": "false"}}
    cluster = FakeCluster(clock, {"a100": {"nvidia.com/gpu": 2}}, labels)
    result = validate(cluster, {"a100": {"nvidia.com/mig-1g.10gb": 14}}, SETTINGS, clock, mig_configs={"a100": "all-1g.10gb"})
    assert "a100: nvidia.com/mig.config is all-1g.10gb but no MIG manager runs there (nvidia.com/gpu.deploy.mig-manager=false)" \
        in result.msg


class TickingClock(Clock):
    """Every reading is 30 ms after the one before, as on a busy controller."""

    def now(self) -> float:
        with self.lock:
            self.t += 0.03
            return self.t


def test_the_timings_are_rounded_apart_so_no_time_reads_negative():
    """The smoke tests' time was the whole time less the rounded wait: -0.0s on a busy lab run with nothing to test."""
    clock = TickingClock()
    cluster = FakeCluster(clock, {"h100": {"nvidia.com/gpu": 8}})
    settings = Settings(namespace="gpu-operator", timeout=300, smoke_nodes=[])
    result = validate(cluster, {"h100": {"nvidia.com/gpu": 8}}, settings, clock)
    assert result.msg == ""
    assert [f"{result.timings[k]}" for k in ("allocatable_s", "smoke_test_s")] == ["0.1", "0.0"]
