"""The node_drain module against a fake API server answering as the kubernetes client's call_api does: the calls a
drain and a restore make (cordon, evictions, the wait for the Pods to go, the budgets named on a timeout)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.modules import node_drain

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.cluster.test_drain import GPU, pod
from tests.unit.harness import call

NODE = "/api/v1/nodes/gpu-1"


class FakeServer:
    def __init__(self):
        self.node = {"metadata": {"name": "gpu-1", "annotations": {}}, "spec": {}}
        self.pods = [pod("train", GPU), pod("web", {"limits": {"cpu": "1"}})]
        self.calls = []
        self.budget_blocks = False

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        self.calls.append((method, path, dict(query_params), body))
        if path == NODE and method == "GET":
            return Response(self.node)
        if path == NODE and method == "PATCH":
            assert header_params["Content-Type"] == "application/strategic-merge-patch+json"
            self.node["spec"].update(body.get("spec") or {})
            annotations = {**self.node["metadata"]["annotations"], **(body.get("metadata") or {}).get("annotations", {})}
            self.node["metadata"]["annotations"] = {k: v for k, v in annotations.items() if v is not None}
            return Response(self.node)
        if path == "/api/v1/pods":
            return Response({"items": self.pods, "metadata": {}})
        if method == "POST" and path.endswith("/eviction"):
            if self.budget_blocks:
                raise ApiException(429, "Cannot evict pod as it would violate the pod's disruption budget.")
            name = path.split("/")[-2]
            self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
            return Response({"kind": "Status"})
        if path == "/apis/policy/v1/namespaces/ml/poddisruptionbudgets":
            return Response({"items": [{"metadata": {"name": "keep-one", "namespace": "ml"},
                                        "spec": {"selector": {"matchLabels": {"app": "train"}}},
                                        "status": {"disruptionsAllowed": 0}}], "metadata": {}})
        raise ApiException(404, f"{path} not found")


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(node_drain, "connect", lambda module: fake)
    monkeypatch.setattr(node_drain, "POLL", 0)
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
    out = call(node_drain.main, {"name": "gpu-1", "timeout": 0, "variable_prefix": "gpuops_driver_upgrade_drain_"})
    assert out["failed"] and "ml/train (PodDisruptionBudget ml/keep-one (disruptions allowed: 0))" in out["msg"]
    assert "gpuops_driver_upgrade_drain_disable_eviction" in out["msg"] and server.node["spec"]["unschedulable"] is True


def test_a_node_the_cluster_does_not_have_is_named(server):
    out = call(node_drain.main, {"name": "gpu-2"})
    assert out["failed"] and out["msg"] == "node gpu-2: no such Node in the cluster"
