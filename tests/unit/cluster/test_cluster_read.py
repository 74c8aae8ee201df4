"""The cluster_read module against a fake API server (the client's call_api, as the kubernetes client answers)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_read

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.harness import call


class FakeServer:
    def __init__(self):
        self.calls = []
        self.forbidden = set()
        self.paths = {
            "/apis/apps/v1/deployments": {"kind": "DeploymentList", "apiVersion": "apps/v1", "items": [
                {"metadata": {"name": "nfd-master", "namespace": "nfd", "labels": {"app": "nfd"}}},
                {"metadata": {"name": "other", "namespace": "x", "labels": {}}}]},
            "/api/v1/namespaces/gpu-operator": {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "gpu-operator"}},
        }

    def call_api(self, path, method, query_params=(), header_params=None, **_kw):
        self.calls.append((method, path, dict(query_params)))
        if path in self.forbidden:
            raise ApiException(403, f"{path} is forbidden")
        if path not in self.paths:
            raise ApiException(404, "not found")
        data = dict(self.paths[path])
        selector = dict(query_params).get("labelSelector")
        if selector and "items" in data:
            key, value = selector.split("=")
            data["items"] = [i for i in data["items"] if i["metadata"]["labels"].get(key) == value]
        return Response(data)


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(cluster_read, "connect", lambda module: fake)
    return fake


READS = [
    {"key": "crd", "api_version": "apiextensions.k8s.io/v1", "resource": "customresourcedefinitions", "name": "nodefeatures.nfd.k8s-sigs.io"},
    {"key": "deployments", "api_version": "apps/v1", "resource": "deployments"},
    {"key": "namespace", "api_version": "v1", "resource": "namespaces", "name": "gpu-operator"},
    {"key": "nfd", "api_version": "apps/v1", "resource": "deployments", "label_selectors": ["app=nfd"]},
]


def test_each_read_by_its_key_a_missing_object_as_none(server):
    out = call(cluster_read.main, {"reads": READS, "_ansible_check_mode": True})
    assert not out.get("failed") and not out["changed"]
    res = out["resources"]
    assert list(res) == ["crd", "deployments", "namespace", "nfd"]
    assert res["crd"] == []
    # A list's items get the apiVersion and kind the list names, as k8s_info returns them.
    assert [(d["kind"], d["apiVersion"], d["metadata"]["name"]) for d in res["deployments"]] == [
        ("Deployment", "apps/v1", "nfd-master"), ("Deployment", "apps/v1", "other")]
    assert res["namespace"][0]["metadata"]["name"] == "gpu-operator"
    assert [d["metadata"]["name"] for d in res["nfd"]] == ["nfd-master"]
    assert ("GET", "/apis/apps/v1/deployments", {"labelSelector": "app=nfd"}) in server.calls


def test_a_refused_read_fails_naming_it_and_the_servers_answer(server):
    server.forbidden.add("/apis/apps/v1/deployments")
    out = call(cluster_read.main, {"reads": READS})
    assert out["failed"] and out["msg"] == "reading deployments (/apis/apps/v1/deployments) failed: /apis/apps/v1/deployments is forbidden"
    assert (out["key"], out["path"], out["status"]) == ("deployments", "/apis/apps/v1/deployments", 403)


def test_a_key_given_twice_is_refused_before_any_call(server):
    out = call(cluster_read.main, {"reads": [READS[1], {**READS[2], "key": "deployments"}]})
    assert out["failed"] and "deployments is given more than once" in out["msg"] and server.calls == []


def test_api_groups_as_k8s_cluster_info_returns_them_with_the_servers_version(server):
    server.paths.update({
        "/version": {"major": "1", "minor": "36", "gitVersion": "v1.36.3"},
        "/apis/resource.k8s.io": {"kind": "APIGroup", "name": "resource.k8s.io", "versions": [
            {"groupVersion": "resource.k8s.io/v1", "version": "v1"}, {"groupVersion": "resource.k8s.io/v1beta2", "version": "v1beta2"}],
            "preferredVersion": {"groupVersion": "resource.k8s.io/v1", "version": "v1"}},
        "/apis/resource.k8s.io/v1": {"kind": "APIResourceList", "resources": [
            {"name": "deviceclasses", "singularName": "deviceclass", "kind": "DeviceClass", "namespaced": False},
            {"name": "resourceclaims", "singularName": "resourceclaim", "kind": "ResourceClaim", "namespaced": True},
            {"name": "resourceclaims/status", "kind": "ResourceClaim", "namespaced": True}]},
        "/apis/resource.k8s.io/v1beta2": {"kind": "APIResourceList", "resources": [
            {"name": "deviceclasses", "kind": "DeviceClass", "namespaced": False}]},
    })
    out = call(cluster_read.main, {"api_groups": ["resource.k8s.io", "resource.nvidia.com"], "_ansible_check_mode": True})
    assert not out["failed"] and not out["changed"] and out["resources"] == {}
    assert out["version"] == {"server": {"kubernetes": {"major": "1", "minor": "36", "gitVersion": "v1.36.3"}}}
    # resource.nvidia.com is not served (no ComputeDomain CRDs): left out.
    assert sorted(out["apis"]) == ["resource.k8s.io/v1", "resource.k8s.io/v1beta2"]
    assert out["apis"]["resource.k8s.io/v1"] == {
        "DeviceClass": {"name": "deviceclasses", "namespaced": False, "preferred": True, "singular_name": "deviceclass",
                        "short_names": [], "categories": []},
        "ResourceClaim": {"name": "resourceclaims", "namespaced": True, "preferred": True, "singular_name": "resourceclaim",
                          "short_names": [], "categories": []}}
    assert out["apis"]["resource.k8s.io/v1beta2"]["DeviceClass"]["preferred"] is False
    # What the DRA role's check reads of it.
    from ansible_collections.gpuops.nvidia.plugins.filter import cluster as cluster_filter
    assert cluster_filter.dra_api_errors(out) == []


def test_api_groups_a_refused_discovery_fails_naming_it(server):
    server.paths["/version"] = {"gitVersion": "v1.36.3"}
    server.forbidden.add("/apis/resource.k8s.io")
    out = call(cluster_read.main, {"api_groups": ["resource.k8s.io"]})
    assert out["failed"] and out["msg"] == "reading /apis/resource.k8s.io failed: /apis/resource.k8s.io is forbidden"
    assert out["status"] == 403


def test_no_api_groups_no_discovery(server):
    out = call(cluster_read.main, {"reads": READS[:1]})
    assert "apis" not in out and "version" not in out and [c[1] for c in server.calls] == [
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodefeatures.nfd.k8s-sigs.io"]
