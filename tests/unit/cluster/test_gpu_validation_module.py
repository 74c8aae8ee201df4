"""gpu_validation's main() and its adapter over the API's JSON (the logic is tested in test_validation.py)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.validation import ApiError, job_name
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_validation

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.cluster.test_validation import H100_LABELS, Clock, FakeCluster, leftover
from tests.unit.harness import call


@pytest.fixture
def fake(monkeypatch):
    cluster = FakeCluster(Clock(), {"h100": {"nvidia.com/gpu": 8}}, {"h100": H100_LABELS})
    monkeypatch.setattr(gpu_validation, "connect", lambda module: object())
    monkeypatch.setattr(gpu_validation, "KubeCluster", lambda api: cluster)
    return cluster


def test_a_healthy_cluster_reports_no_change(fake):
    out = call(gpu_validation.main, {"namespace": "gpu-operator", "expected": {"h100": {"nvidia.com/gpu": "8"}},
                                     "gfd_labels": {"h100": H100_LABELS}})
    assert out["failed"] is False and out["changed"] is False
    assert out["nodes"]["h100"]["job"] == "succeeded" and out["nodes"]["h100"]["gfd"] == "matches"
    assert out["jobs"] == {"created": 1, "replaced": [], "left": []}
    assert fake.jobs == {}


def test_a_replaced_leftover_is_a_change(fake):
    fake.jobs[job_name("h100")] = leftover("h100")
    out = call(gpu_validation.main, {"namespace": "gpu-operator", "expected": {"h100": {"nvidia.com/gpu": 8}}})
    assert out["failed"] is False and out["changed"] is True and out["jobs"]["replaced"] == [job_name("h100")]


def test_a_wrong_label_fails_the_module_with_the_report(fake):
    fake.labels["h100"] = {**H100_LABELS, "nvidia.com/gpu.count": "4"}
    out = call(gpu_validation.main, {"namespace": "gpu-operator", "expected": {"h100": {"nvidia.com/gpu": 8}}, "timeout": 0,
                                     "gfd_labels": {"h100": H100_LABELS, "absent": None}})
    assert out["failed"] is True
    assert "h100: GFD label nvidia.com/gpu.count expected 8, actual 4" in out["msg"]
    assert out["failed_nodes"] == ["h100"] and out["nodes"]["h100"]["gfd_wrong"][0]["label"] == "nvidia.com/gpu.count"


def test_an_api_error_fails_the_module_with_its_message(fake):
    def broken() -> list:
        raise ApiError(403, 'listing the Nodes: nodes is forbidden: User "ci" cannot list resource "nodes"')

    fake.list_nodes = broken
    out = call(gpu_validation.main, {"namespace": "gpu-operator", "expected": {"h100": {"nvidia.com/gpu": 8}}})
    assert out["failed"] is True and out["status"] == 403 and "nodes is forbidden" in out["msg"]


def test_check_mode_creates_no_job(fake):
    out = call(gpu_validation.main, {"namespace": "gpu-operator", "expected": {"h100": {"nvidia.com/gpu": 8}}, "_ansible_check_mode": True})
    assert out["changed"] is False and fake.created == [] and out["nodes"]["h100"]["job"] == "not run"


class FakeServer:
    """The client's call_api as the kubernetes client answers: JSON by method and path, errors as it raises them."""

    def __init__(self, answers):
        self.answers, self.calls = answers, []

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        self.calls.append((method, path, dict(query_params), body))
        answer = self.answers[(method, path)]
        if isinstance(answer, list):  # pages, one per call
            answer = answer.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Response(answer)


def _adapter(answers) -> tuple[gpu_validation.KubeCluster, FakeServer]:
    server = FakeServer(answers)
    return gpu_validation.KubeCluster(server), server


def test_the_adapter_reads_nodes_jobs_and_pods_as_the_apis_json_a_page_at_a_time():
    node = {"metadata": {"name": "h100", "labels": {"nvidia.com/gpu.product": "X"}},
            "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "0"}}}
    adapter, server = _adapter({
        ("GET", "/api/v1/nodes"): [{"items": [node], "metadata": {"continue": "next"}},
                                   {"items": [{"metadata": {"name": "cpu-only"}}], "metadata": {}}],
        ("GET", "/apis/batch/v1/namespaces/ns/jobs"): {"items": [{"metadata": {"name": "j"}, "status": {"failed": 1, "conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "limit"}]}}]},
        ("GET", "/api/v1/namespaces/ns/pods"): {"items": [{"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [
            {"name": "smoke-test", "state": {"waiting": {"reason": "ErrImagePull"}}}]}}]},
    })
    assert adapter.list_nodes() == [
        gpu_validation.NodeState("h100", {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 0}, {"nvidia.com/gpu.product": "X"}),
        gpu_validation.NodeState("cpu-only", {}, {})]
    assert [c[2] for c in server.calls] == [{"limit": 500}, {"limit": 500, "continue": "next"}]
    (job,) = adapter.list_jobs("ns", "app=x")
    failed = {"type": "Failed", "reason": "BackoffLimitExceeded", "message": "limit"}
    assert (job.name, job.succeeded, job.failed, job.conditions) == ("j", 0, 1, (failed,))
    assert server.calls[-1][2]["labelSelector"] == "app=x"
    pods = adapter.job_pods("ns", "j")
    assert pods[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    assert server.calls[-1][2]["labelSelector"] == "job-name=j"


def test_the_adapter_turns_a_409_into_an_api_error_with_the_servers_message():
    conflict = ApiException(409, 'jobs.batch "j" already exists')
    adapter, server = _adapter({("POST", "/apis/batch/v1/namespaces/ns/jobs"): conflict,
                                ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j"): {"kind": "Status"},
                                ("GET", "/api/v1/namespaces/ns/pods"): ApiException(403, "forbidden")})
    with pytest.raises(ApiError) as err:
        adapter.create_job("ns", {"metadata": {"name": "j"}})
    assert err.value.status == 409 and err.value.message == 'creating Job j: jobs.batch "j" already exists'
    assert server.calls[-1][3] == {"metadata": {"name": "j"}}
    adapter.delete_job("ns", "j")
    assert server.calls[-1][:3] == ("DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", {"propagationPolicy": "Background"})
    # The Pods only explain a failed Job: a refused read of them gives none, not an error.
    assert adapter.job_pods("ns", "j") == []


def test_the_adapter_reports_an_unreachable_server_as_an_api_error_without_status():
    adapter = _adapter({("GET", "/api/v1/nodes"): ConnectionRefusedError("[Errno 111] Connection refused")})[0]
    with pytest.raises(ApiError) as err:
        adapter.list_nodes()
    assert err.value.status is None and err.value.message == "listing the Nodes: [Errno 111] Connection refused"
