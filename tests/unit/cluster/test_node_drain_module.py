"""The node_drain module against a fake API server answering as the kubernetes client's call_api does: the calls a
drain and a restore make (cordon, evictions, the wait for the Pods to go, the budgets named on a timeout)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.modules import node_drain

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.cluster.test_drain import GPU, claim, dra_pod, pod
from tests.unit.harness import call

NODE = "/api/v1/nodes/gpu-1"


class FakeServer:
    def __init__(self):
        self.node = {"metadata": {"name": "gpu-1", "annotations": {}}, "spec": {}}
        self.pods = [pod("train", GPU), pod("web", {"limits": {"cpu": "1"}})]
        self.calls = []
        self.budget_blocks = False  # True: every eviction refused (429); a number: that many refused, then allowed
        self.claims = {}  # namespace -> ResourceClaims (resource.k8s.io/v1)
        self.on_list = []  # one function per Pod listing, in order: what happens on the node as it is listed
        self.on_cordon = None

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        self.calls.append((method, path, dict(query_params), body))
        if path == NODE and method == "GET":
            return Response(self.node)
        if path == NODE and method == "PATCH":
            assert header_params["Content-Type"] == "application/strategic-merge-patch+json"
            self.node["spec"].update(body.get("spec") or {})
            if (body.get("spec") or {}).get("unschedulable") and self.on_cordon:
                self.on_cordon(self)
            annotations = {**self.node["metadata"]["annotations"], **(body.get("metadata") or {}).get("annotations", {})}
            self.node["metadata"]["annotations"] = {k: v for k, v in annotations.items() if v is not None}
            return Response(self.node)
        if path == "/api/v1/pods":
            items = [p for p in self.pods if _selected(p, dict(query_params).get("labelSelector", ""))]
            if self.on_list:
                self.on_list.pop(0)(self)
            return Response({"items": items, "metadata": {}})
        if path.startswith("/apis/resource.k8s.io/v1/namespaces/") and path.endswith("/resourceclaims"):
            return Response({"items": self.claims.get(path.split("/")[-2], []), "metadata": {}})
        if method == "POST" and path.endswith("/eviction"):
            if self.budget_blocks is True or (self.budget_blocks and not isinstance(self.budget_blocks, bool)):
                if not isinstance(self.budget_blocks, bool):
                    self.budget_blocks -= 1
                raise ApiException(429, "Cannot evict pod as it would violate the pod's disruption budget.")
            name = path.split("/")[-2]
            self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
            return Response({"kind": "Status"})
        if path == "/apis/policy/v1/namespaces/ml/poddisruptionbudgets":
            return Response({"items": [{"metadata": {"name": "keep-one", "namespace": "ml"},
                                        "spec": {"selector": {"matchLabels": {"app": "train"}}},
                                        "status": {"disruptionsAllowed": 0}}], "metadata": {}})
        raise ApiException(404, f"{path} not found")


def _selected(pod_: dict, selector: str) -> bool:
    labels = pod_["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in (term.split("=", 1) for term in selector.split(",") if term))


class Clock:
    """time for the module: each sleep moves the clock on by a minute, so that a timeout passes without waiting."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += 60


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(node_drain, "connect", lambda module: fake)
    monkeypatch.setattr(node_drain, "time", Clock())
    return fake


def test_a_drain_cordons_records_evicts_the_gpu_pods_and_waits_for_them(server):
    out = call(node_drain.main, {"name": "gpu-1"})
    assert not out.get("failed"), out
    assert out["changed"] and out["cordoned"] and out["evicted"] == ["ml/train"] and out["initially_unschedulable"] is False
    assert server.node["spec"]["unschedulable"] is True
    assert server.node["metadata"]["annotations"]["gpuops.nvidia/node-initial-state.unschedulable"] == "false"
    evictions = [c for c in server.calls if c[0] == "POST"]
    assert evictions == [("POST", "/api/v1/namespaces/ml/pods/train/eviction", {}, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train", "namespace": "ml"}})]
    listing = next(c for c in server.calls if c[1] == "/api/v1/pods")
    assert listing[2]["fieldSelector"] == "spec.nodeName=gpu-1"
    # The restore puts the node back as the record says, and forgets the record.
    out = call(node_drain.main, {"name": "gpu-1", "state": "restored"})
    assert out["changed"] and out["uncordoned"] and not server.node["spec"]["unschedulable"]
    assert server.node["metadata"]["annotations"] == {}


def test_a_budget_that_holds_a_pod_past_the_timeout_is_named_and_the_node_stays_cordoned(server):
    server.budget_blocks = True
    out = call(node_drain.main, {"name": "gpu-1", "timeout": 120, "variable_prefix": "gpuops_driver_upgrade_drain_"})
    assert out["failed"] and "ml/train (PodDisruptionBudget ml/keep-one (disruptions allowed: 0))" in out["msg"]
    assert "gpuops_driver_upgrade_drain_disable_eviction" in out["msg"] and server.node["spec"]["unschedulable"] is True


def test_a_node_the_cluster_does_not_have_is_named(server):
    out = call(node_drain.main, {"name": "gpu-2"})
    assert out["failed"] and out["msg"] == "node gpu-2: no such Node in the cluster"


def test_a_timeout_of_0_waits_without_end(server):
    server.budget_blocks = 50  # the budget allows the eviction after 50 tries (50 minutes on the module's clock)
    out = call(node_drain.main, {"name": "gpu-1", "timeout": 0})
    assert not out.get("failed"), out
    assert out["evicted"] == ["ml/train"]


def test_a_pod_scheduled_before_the_cordon_is_evicted_too(server):
    # The scheduler places a GPU pod on the node between the drain's first listing and its cordon.
    server.on_list = [lambda s: s.pods.append(pod("late", GPU))]
    out = call(node_drain.main, {"name": "gpu-1"})
    assert not out.get("failed"), out
    assert out["evicted"] == ["ml/late", "ml/train"]
    cordon = next(i for i, c in enumerate(server.calls) if c[0] == "PATCH")
    listings = [i for i, c in enumerate(server.calls) if c[1] == "/api/v1/pods"]
    assert any(i > cordon for i in listings)  # listed again once cordoned


def test_a_pod_that_would_be_lost_found_after_the_cordon_fails_with_the_node_cordoned(server):
    server.on_list = [lambda s: s.pods.append(pod("notebook", GPU, owner=None))]
    out = call(node_drain.main, {"name": "gpu-1", "variable_prefix": "v_"})
    assert out["failed"] and "ml/notebook: no controller would recreate it (set v_force" in out["msg"]
    assert "the node stays cordoned" in out["msg"] and "nothing changed" not in out["msg"]
    assert server.node["spec"]["unschedulable"] is True and not [c for c in server.calls if c[0] == "POST"]


def test_a_pod_holding_a_gpu_through_a_resource_claim_is_evicted(server):
    server.pods = [dra_pod("dra-train", "dra-train-gpu", from_template=True), dra_pod("nic-user", "nic"), pod("web")]
    server.claims = {"ml": [claim("dra-train-gpu"), claim("nic", "rdma.example.com")]}
    out = call(node_drain.main, {"name": "gpu-1"})
    assert not out.get("failed"), out
    assert out["evicted"] == ["ml/dra-train"]
    assert [p["metadata"]["name"] for p in server.pods] == ["nic-user", "web"]


def test_the_wait_for_completion_lets_running_jobs_finish_before_the_evictions(server):
    job = pod("job", GPU, owner="Job", labels={"app": "job", "kind": "batch"})
    server.pods = [job, pod("train", GPU)]

    def finish(s):
        job["status"]["phase"] = "Succeeded"
    # listed: before the cordon, after it (to wait: still running), waiting (it finished), after the wait.
    server.on_list = [lambda s: None, lambda s: None, finish]
    out = call(node_drain.main, {"name": "gpu-1", "wait_for_completion_pod_selector": "kind=batch", "wait_for_completion_timeout": 0})
    assert not out.get("failed"), out
    assert out["evicted"] == ["ml/train"] and out["kept"]["ml/job"] == "finished"
    waits = [c for c in server.calls if c[1] == "/api/v1/pods" and c[2].get("labelSelector") == "kind=batch"]
    assert len(waits) >= 2


def test_jobs_still_running_when_the_wait_for_completion_times_out_are_evicted(server):
    server.pods = [pod("job", GPU, owner="Job", labels={"kind": "batch"}), pod("train", GPU)]
    out = call(node_drain.main, {"name": "gpu-1", "wait_for_completion_pod_selector": "kind=batch", "wait_for_completion_timeout": 120})
    assert not out.get("failed"), out
    assert out["evicted"] == ["ml/job", "ml/train"] and out["not_completed"] == ["ml/job"]
