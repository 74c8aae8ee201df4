"""gpu_validation's main() and its adapter over the kubernetes client (the logic is tested in test_validation.py)."""

from __future__ import annotations

from unittest import mock

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.validation import ApiError, job_name
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_validation
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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


def _adapter() -> gpu_validation.KubeCluster:
    adapter = gpu_validation.KubeCluster.__new__(gpu_validation.KubeCluster)
    adapter.api = client.ApiClient()
    adapter.core, adapter.batch = mock.Mock(), mock.Mock()
    return adapter


def test_the_adapter_reads_nodes_jobs_and_pods_from_the_client_models():
    adapter = _adapter()
    adapter.core.list_node.return_value = client.V1NodeList(items=[client.V1Node(
        metadata=client.V1ObjectMeta(name="h100", labels={"nvidia.com/gpu.product": "X"}),
        status=client.V1NodeStatus(allocatable={"cpu": "64", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.10gb": "0"}))])
    assert adapter.list_nodes() == [gpu_validation.NodeState("h100", {"nvidia.com/gpu": 8, "nvidia.com/mig-1g.10gb": 0},
                                                             {"nvidia.com/gpu.product": "X"})]
    adapter.batch.list_namespaced_job.return_value = client.V1JobList(items=[client.V1Job(
        metadata=client.V1ObjectMeta(name="j"), status=client.V1JobStatus(failed=1, conditions=[
            client.V1JobCondition(type="Failed", status="True", reason="BackoffLimitExceeded", message="limit")]))])
    (job,) = adapter.list_jobs("ns", "app=x")
    failed = {"type": "Failed", "reason": "BackoffLimitExceeded", "message": "limit"}
    assert (job.name, job.succeeded, job.failed, job.conditions) == ("j", 0, 1, (failed,))
    adapter.batch.list_namespaced_job.assert_called_once_with("ns", label_selector="app=x")
    adapter.core.list_namespaced_pod.return_value = client.V1PodList(items=[client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"), status=client.V1PodStatus(phase="Pending", container_statuses=[
            client.V1ContainerStatus(name="smoke-test", image="i", image_id="", ready=False, restart_count=0,
                                     state=client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="ErrImagePull")))]))])
    pods = adapter.job_pods("ns", "j")
    assert pods[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    adapter.core.list_namespaced_pod.assert_called_once_with("ns", label_selector="job-name=j")


def test_the_adapter_turns_a_409_into_an_api_error_with_the_servers_message():
    adapter = _adapter()
    exc = ApiException(status=409, reason="Conflict")
    exc.body = '{"kind": "Status", "message": "jobs.batch \\"j\\" already exists", "code": 409}'
    adapter.batch.create_namespaced_job.side_effect = exc
    with pytest.raises(ApiError) as err:
        adapter.create_job("ns", {"metadata": {"name": "j"}})
    assert err.value.status == 409 and err.value.message == 'creating Job j: jobs.batch "j" already exists'
    adapter.delete_job("ns", "j")
    adapter.batch.delete_namespaced_job.assert_called_once_with("j", "ns", propagation_policy="Background")


def test_the_adapter_reports_an_unreachable_server_as_an_api_error_without_status():
    adapter = _adapter()
    adapter.core.list_node.side_effect = ConnectionRefusedError("[Errno 111] Connection refused")
    with pytest.raises(ApiError) as err:
        adapter.list_nodes()
    assert err.value.status is None and err.value.message == "listing the Nodes: [Errno 111] Connection refused"
