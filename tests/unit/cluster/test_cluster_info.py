"""The cluster_info module: objects of one kind as kubernetes.core.k8s_info returns them, and the end of a pod's log,
against a fake API server (the client's call_api, as the kubernetes client answers) and over plain HTTP."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import pytest
from ansible_collections.gpuops.nvidia.plugins.action import cluster_info as cluster_info_action
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_info

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.cluster.test_in_process import _action
from tests.unit.harness import call

DISCOVERY = {
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "nodes", "kind": "Node", "namespaced": False},
        {"name": "nodes/status", "kind": "Node", "namespaced": False},
        {"name": "pods", "kind": "Pod", "namespaced": True},
        {"name": "pods/log", "kind": "Pod", "namespaced": True},
        {"name": "configmaps", "kind": "ConfigMap", "namespaced": True}]},
    "/apis/apps/v1": {"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": [
        {"name": "daemonsets", "kind": "DaemonSet", "namespaced": True}]},
}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "annotations": {"a": "1"}}}
PODS = [{"metadata": {"name": "mig-x", "namespace": "gpu-operator", "labels": {"app": "nvidia-mig-manager"}}, "spec": {"nodeName": "n1"}},
        {"metadata": {"name": "dp-y", "namespace": "gpu-operator", "labels": {"app": "nvidia-device-plugin-daemonset"}},
         "spec": {"nodeName": "n2"}}]


class TextResponse:
    def __init__(self, text):
        self.data = text.encode()


class FakeServer:
    def __init__(self):
        self.calls = []
        self.forbidden = set()
        self.log = "line 1\nline 2\nline 3\n"
        self.paths = {**DISCOVERY, "/api/v1/nodes/n1": NODE}

    def call_api(self, path, method, query_params=(), header_params=None, **_kw):
        query = dict(query_params)
        self.calls.append((method, path, query, dict(header_params or {})))
        if path in self.forbidden:
            raise ApiException(403, f"{path} is forbidden")
        if path == "/api/v1/namespaces/gpu-operator/pods/mig-x/log":
            lines = self.log.splitlines()
            return TextResponse("\n".join(lines[-int(query["tailLines"]):]) + "\n" if "tailLines" in query else self.log)
        if path in ("/api/v1/namespaces/gpu-operator/pods", "/api/v1/pods"):
            items = PODS
            for selector in filter(None, (query.get("labelSelector") or "").split(",")):
                key, value = selector.split("=", 1)
                items = [i for i in items if i["metadata"]["labels"].get(key) == value]
            for selector in filter(None, (query.get("fieldSelector") or "").split(",")):
                assert selector.startswith("spec.nodeName=")
                items = [i for i in items if i["spec"]["nodeName"] == selector.split("=", 1)[1]]
            return Response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        if path not in self.paths:
            raise ApiException(404, "not found")
        return Response(self.paths[path])


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(cluster_info, "connect", lambda module: fake)
    return fake


def test_a_named_object_as_k8s_info_returns_it_and_one_that_is_not_there_as_none(server):
    out = call(cluster_info.main, {"kind": "Node", "name": "n1", "_ansible_check_mode": True})
    assert not out["failed"] and not out["changed"] and out["api_found"] is True
    assert out["resources"] == [NODE]
    # The kind's resource from the API version's discovery document, then the object at its path.
    assert [c[1] for c in server.calls] == ["/api/v1", "/api/v1/nodes/n1"]
    out = call(cluster_info.main, {"kind": "Node", "name": "gone"})
    assert not out["failed"] and out["resources"] == [] and out["api_found"] is True


def test_a_list_with_its_selectors_each_item_with_its_kind(server):
    out = call(cluster_info.main, {"kind": "Pod", "namespace": "gpu-operator", "label_selectors": ["app=nvidia-mig-manager"],
                                   "field_selectors": ["spec.nodeName=n1"]})
    assert [(p["apiVersion"], p["kind"], p["metadata"]["name"]) for p in out["resources"]] == [("v1", "Pod", "mig-x")]
    method, path, query, _headers = server.calls[-1]
    assert (method, path) == ("GET", "/api/v1/namespaces/gpu-operator/pods")
    assert query == {"labelSelector": "app=nvidia-mig-manager", "fieldSelector": "spec.nodeName=n1", "limit": 500}
    out = call(cluster_info.main, {"kind": "Pod", "namespace": "gpu-operator", "field_selectors": ["spec.nodeName=n2"]})
    assert [p["metadata"]["name"] for p in out["resources"]] == ["dp-y"]


def test_a_kind_or_version_the_server_does_not_serve_reads_as_none(server):
    out = call(cluster_info.main, {"api_version": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                                   "name": "servicemonitors.monitoring.coreos.com"})
    assert not out["failed"] and out["resources"] == [] and out["api_found"] is False
    out = call(cluster_info.main, {"api_version": "apps/v1", "kind": "Deployment"})
    assert not out["failed"] and out["resources"] == [] and out["api_found"] is False


def test_a_cluster_scoped_kind_ignores_the_namespace(server):
    out = call(cluster_info.main, {"kind": "Node", "name": "n1", "namespace": "gpu-operator"})
    assert out["resources"] == [NODE] and server.calls[-1][1] == "/api/v1/nodes/n1"


def test_a_refused_read_fails_naming_its_path_and_the_servers_answer(server):
    server.forbidden.add("/api/v1/nodes/n1")
    out = call(cluster_info.main, {"kind": "Node", "name": "n1"})
    assert out["failed"] and out["msg"] == "reading /api/v1/nodes/n1 failed: /api/v1/nodes/n1 is forbidden"
    assert (out["path"], out["status"]) == ("/api/v1/nodes/n1", 403)
    server.forbidden.add("/apis/apps/v1")
    out = call(cluster_info.main, {"api_version": "apps/v1", "kind": "DaemonSet"})
    assert out["failed"] and (out["path"], out["status"]) == ("/apis/apps/v1", 403)


def test_the_end_of_a_containers_log(server):
    out = call(cluster_info.main, {"kind": "Pod", "namespace": "gpu-operator", "name": "mig-x",
                                   "log": {"container": "nvidia-mig-manager", "tail_lines": 2}})
    assert not out["failed"] and out["log_lines"] == ["line 2", "line 3"] and out["log"] == "line 2\nline 3"
    method, path, query, headers = server.calls[-1]
    assert (method, path, query) == ("GET", "/api/v1/namespaces/gpu-operator/pods/mig-x/log",
                                     {"container": "nvidia-mig-manager", "tailLines": 2})
    assert headers["Accept"] == "text/plain"
    out = call(cluster_info.main, {"kind": "Pod", "namespace": "gpu-operator", "name": "mig-x", "log": {}})
    assert out["log_lines"] == ["line 1", "line 2", "line 3"] and "tailLines" not in server.calls[-1][2]


@pytest.mark.parametrize(("params", "message"), [
    ({"kind": "Node", "name": "n1", "label_selectors": ["a=b"]}, "label_selectors and field_selectors select among the objects listed"),
    ({"kind": "Node", "name": "n1", "log": {"tail_lines": 5}}, "log reads a pod's log: it needs kind Pod (api_version v1), name and namespace"),
    ({"kind": "Pod", "namespace": "gpu-operator", "log": {}}, "log reads a pod's log"),
])
def test_options_that_do_not_go_together_are_refused_before_any_call(server, params, message):
    out = call(cluster_info.main, params)
    assert out["failed"] and out["msg"].startswith(message) and server.calls == []


def test_the_read_in_process_returns_what_the_module_returns(server, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters: [{name: lab, cluster: {server: 'http://127.0.0.1:6443'}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: admin}}]\n"
        "users: [{name: admin, user: {token: secret-token}}]\n")
    args = {"kind": "Pod", "namespace": "gpu-operator", "field_selectors": ["spec.nodeName=n1"], "kubeconfig": str(kubeconfig)}
    module = call(cluster_info.main, args)
    with mock.patch.object(cluster_info_action.ActionModule, "_execute_module") as execute:
        here = _action(cluster_info_action, args).run(task_vars={})
    execute.assert_not_called()
    assert not here.get("failed") and not module["failed"]
    assert {k: v for k, v in here.items() if k != "invocation"} == {k: v for k, v in module.items() if k not in ("invocation", "failed")}


@pytest.fixture
def http_server():
    """A plain-HTTP API server: JSON for discovery and objects, text for a pod's log."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # http.server's name
            if self.path.startswith("/api/v1/namespaces/gpu-operator/pods/mig-x/log"):
                data, kind = b"applying all-balanced\nfailed: no such profile\n", "text/plain"
            else:
                body = DISCOVERY.get(self.path) or (NODE if self.path == "/api/v1/nodes/n1" else None)
                data, kind = json.dumps(body or {"kind": "Status", "code": 404}).encode(), "application/json"
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_over_plain_http_with_an_awx_style_host_and_token(http_server, monkeypatch):
    # K8S_AUTH_HOST and K8S_AUTH_API_KEY, as AWX's bearer-token credential sets them: no kubeconfig, no kubernetes client.
    monkeypatch.setenv("K8S_AUTH_HOST", http_server)
    monkeypatch.setenv("K8S_AUTH_API_KEY", "t0ken")
    with mock.patch.dict("sys.modules", {"kubernetes": None}):
        node = call(cluster_info.main, {"kind": "Node", "name": "n1"})
        log = call(cluster_info.main, {"kind": "Pod", "namespace": "gpu-operator", "name": "mig-x", "log": {"tail_lines": 15}})
    assert not node["failed"] and node["resources"] == [NODE]
    assert not log["failed"] and log["log_lines"] == ["applying all-balanced", "failed: no such profile"]
