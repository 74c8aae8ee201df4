"""What an uninstall removes from a cluster (module_utils/cluster/uninstall.py) and cluster_uninstall's calls, against an
in-memory API server that answers discovery, metadata lists, deletes and Node patches as the real one does."""

from __future__ import annotations

import json

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import kube, uninstall
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_uninstall

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.harness import call

OURS = {"app.kubernetes.io/managed-by": "gpuops.nvidia"}
CORE = {"groupVersion": "v1", "resources": [
    {"name": "namespaces", "kind": "Namespace", "namespaced": False, "verbs": ["list", "delete", "get"]},
    {"name": "namespaces/status", "kind": "Namespace", "namespaced": False, "verbs": ["get", "patch"]},
    {"name": "nodes", "kind": "Node", "namespaced": False, "verbs": ["list", "delete", "patch"]},
    {"name": "events", "kind": "Event", "namespaced": True, "verbs": ["list", "delete"]},
    {"name": "configmaps", "kind": "ConfigMap", "namespaced": True, "verbs": ["list", "delete"]},
    {"name": "serviceaccounts", "kind": "ServiceAccount", "namespaced": True, "verbs": ["list", "delete"]},
    {"name": "pods", "kind": "Pod", "namespaced": True, "verbs": ["list", "delete"]},
    {"name": "bindings", "kind": "Binding", "namespaced": True, "verbs": ["create"]},
]}
APPS = {"groupVersion": "apps/v1", "resources": [
    {"name": "daemonsets", "kind": "DaemonSet", "namespaced": True, "verbs": ["list", "delete"]}]}
NODE_K8S = {"groupVersion": "node.k8s.io/v1", "resources": [
    {"name": "runtimeclasses", "kind": "RuntimeClass", "namespaced": False, "verbs": ["list", "delete"]}]}
NFD = {"groupVersion": "nfd.k8s-sigs.io/v1alpha1", "resources": [
    {"name": "nodefeatures", "kind": "NodeFeature", "namespaced": True, "verbs": ["list", "delete"]}]}
CRDS = {"groupVersion": "apiextensions.k8s.io/v1", "resources": [
    {"name": "customresourcedefinitions", "kind": "CustomResourceDefinition", "namespaced": False, "verbs": ["list", "delete"]}]}


def types_by_resource():
    return {t["resource"]: t for t in uninstall.resource_types(CORE, [APPS, NODE_K8S, NFD, CRDS])}


def meta(name, namespace=None, uid=None, labels=None, managers=(), owners=()):
    out = {"name": name, "uid": uid or f"uid-{namespace}-{name}", "labels": dict(labels or {}),
           "managedFields": [dict(m) for m in managers], "ownerReferences": [{"uid": o} for o in owners]}
    if namespace:
        out["namespace"] = namespace
    return out


def applied(manager="gpuops-nvidia"):
    return {"manager": manager, "operation": "Apply", "fieldsV1": {"f:spec": {}}}


def test_discovery_keeps_the_types_that_can_be_listed_and_deleted_and_never_nodes_or_events():
    types = types_by_resource()
    assert sorted(types) == ["configmaps", "customresourcedefinitions", "daemonsets", "namespaces", "nodefeatures", "pods",
                             "runtimeclasses", "serviceaccounts"]
    assert types["daemonsets"]["path"] == "/apis/apps/v1/daemonsets" and types["configmaps"]["path"] == "/api/v1/configmaps"
    assert uninstall.object_path(types["daemonsets"], {"name": "gfd", "namespace": "gpu"}) == "/apis/apps/v1/namespaces/gpu/daemonsets/gfd"
    assert uninstall.object_path(types["runtimeclasses"], {"name": "nvidia"}) == "/apis/node.k8s.io/v1/runtimeclasses/nvidia"


def test_ours_is_the_label_or_an_apply_by_our_manager_alone():
    assert uninstall.is_ours(meta("a", labels=OURS), "gpuops-nvidia", ["gpuops.nvidia"])
    assert uninstall.is_ours(meta("b", managers=[applied(), {"manager": "kube-controller-manager", "operation": "Update",
                                                             "subresource": "status"}]), "gpuops-nvidia", ["gpuops.nvidia"])
    # Someone else wrote to it too (a CRD the cluster's own NFD installed, applied over by ours): it stays.
    assert not uninstall.is_ours(meta("c", managers=[applied(), applied("helm")]), "gpuops-nvidia", ["gpuops.nvidia"])
    assert uninstall.is_shared(meta("c", managers=[applied(), applied("helm")]), "gpuops-nvidia", ["gpuops.nvidia"])
    assert not uninstall.is_ours(meta("d", managers=[{"manager": "gpuops-nvidia", "operation": "Update"}]), "gpuops-nvidia",
                                 ["gpuops.nvidia"])
    # The deployer's own RBAC carries another value: it is the user's, and stays.
    assert not uninstall.is_ours(meta("e", labels={"app.kubernetes.io/managed-by": "gpuops-nvidia"}), "gpuops-nvidia", ["gpuops.nvidia"])


def test_the_plan_orders_the_steps_leaves_owned_objects_to_the_garbage_collector_and_keeps_a_busy_namespace():
    t = types_by_resource()
    listed = [
        (t["daemonsets"], [meta("gfd", "gpu", uid="ds", labels=OURS), meta("theirs", "gpu")]),
        (t["pods"], [meta("gfd-x", "gpu", labels=OURS, owners=["ds"])]),
        (t["nodefeatures"], [meta("nvidia-features-for-n1", "gpu", owners=["ds", "pod"])]),
        (t["configmaps"], [meta("cfg", "gpu", labels=OURS), meta("kube-root-ca.crt", "gpu")]),
        (t["serviceaccounts"], [meta("default", "gpu")]),
        (t["runtimeclasses"], [meta("nvidia", managers=[applied()])]),
        (t["customresourcedefinitions"], [meta("x.example.com", labels=OURS)]),
        (t["namespaces"], [meta("gpu", uid="ns", labels=OURS), meta("other", labels=OURS)]),
    ]
    found = uninstall.plan(listed, "gpuops-nvidia", ["gpuops.nvidia"])
    assert [e["what"] for e in found["workloads"]] == ["DaemonSet gpu/gfd"]
    assert [e["what"] for e in found["objects"]] == ["ConfigMap gpu/cfg", "RuntimeClass nvidia"]
    assert [e["what"] for e in found["definitions"]] == ["CustomResourceDefinition x.example.com"]
    # "gpu" holds someone else's DaemonSet; "other" holds nothing.
    assert [e["what"] for e in found["namespaces"]] == ["Namespace other"]
    assert found["kept_namespaces"] == {"gpu": ["DaemonSet gpu/theirs"]}


def test_a_namespace_with_only_what_goes_and_its_defaults_goes():
    t = types_by_resource()
    listed = [(t["daemonsets"], [meta("gfd", "gpu", uid="ds", labels=OURS)]),
              (t["nodefeatures"], [meta("nvidia-features-for-n1", "gpu", owners=["ds"])]),
              (t["serviceaccounts"], [meta("default", "gpu")]),
              (t["namespaces"], [meta("gpu", labels=OURS)])]
    found = uninstall.plan(listed, "gpuops-nvidia", ["gpuops.nvidia"])
    assert [e["what"] for e in found["namespaces"]] == ["Namespace gpu"] and found["kept_namespaces"] == {}


def label_fields(*keys):
    return {"f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in keys}}}}


def test_node_labels_are_the_ones_our_manager_owns_and_the_operands_state():
    nodes = [
        {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.driver": "false",
                                               "nvidia.com/mig.config.state": "success", "kubernetes.io/hostname": "n1"},
                      "managedFields": [{"manager": "gpuops-nvidia", "operation": "Update", "fieldsV1": label_fields("nvidia.com/gpu.present")},
                                        {"manager": "kubectl-label", "operation": "Update",
                                         "fieldsV1": label_fields("nvidia.com/gpu.deploy.driver")}]}},
        {"metadata": {"name": "n2", "labels": {"kubernetes.io/hostname": "n2"},
                      # A label we set once and someone removed since is not there to remove.
                      "managedFields": [{"manager": "gpuops-nvidia", "operation": "Update", "fieldsV1": label_fields("nvidia.com/gpu.present")}]}},
    ]
    assert uninstall.node_labels_to_remove(nodes, "gpuops-nvidia", ["nvidia.com/mig.config.state"]) == {
        "n1": ["nvidia.com/gpu.present", "nvidia.com/mig.config.state"]}


class FakeServer:
    """Discovery, metadata lists (paginated), deletes (immediate; a DaemonSet's owned objects go with it) and Node
    merge patches that record the field manager, as the API server does."""

    def __init__(self):
        self.docs = {"/api/v1": CORE, "/apis/apps/v1": APPS, "/apis/node.k8s.io/v1": NODE_K8S,
                     "/apis/nfd.k8s-sigs.io/v1alpha1": NFD, "/apis/apiextensions.k8s.io/v1": CRDS}
        self.objects: dict[str, dict] = {}  # object path -> metadata
        self.calls: list[tuple[str, str]] = []
        self.patches: list[dict] = []  # the query of each Node patch
        self.forbidden: set[str] = set()
        self.held: set[str] = set()  # deleted, but a finalizer keeps them

    def add(self, resource, item):
        self.objects[uninstall.object_path(types_by_resource()[resource], item)] = item

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        self.calls.append((method, path))
        query = dict(query_params)
        if method == "GET" and path == "/apis":
            return Response({"groups": [{"preferredVersion": {"groupVersion": d["groupVersion"]}} for d in self.docs.values()
                                        if d["groupVersion"] != "v1"]})
        if method == "GET" and path in self.docs:
            return Response(self.docs[path])
        if path in self.forbidden:
            raise ApiException(403, f"{path} is forbidden")
        if method == "GET" and path == "/api/v1/nodes":
            return Response({"items": [{"metadata": m} for p, m in sorted(self.objects.items()) if p.startswith("/api/v1/nodes/")],
                             "metadata": {}})
        rtype = next((t for t in types_by_resource().values() if t["path"] == path), None)
        if method == "GET" and rtype:
            items = [m for p, m in sorted(self.objects.items()) if self._of_type(p, rtype)]
            start = int(query.get("continue") or 0)
            page = items[start:start + int(query["limit"])]
            more = start + len(page) < len(items)
            return Response({"items": [{"metadata": m} for m in page], "metadata": {"continue": str(start + len(page)) if more else ""}})
        if method == "GET":
            if path not in self.objects:
                raise ApiException(404, "not found")
            return Response({"metadata": self.objects[path]})
        if method == "DELETE" and path in self.held:
            return Response({})
        if method == "DELETE":
            gone = self.objects.pop(path, None)
            if gone is None:
                raise ApiException(404, "not found")
            for other, m in list(self.objects.items()):
                if any(o["uid"] == gone["uid"] for o in m.get("ownerReferences") or []):
                    del self.objects[other]
            return Response({})
        if method == "PATCH" and header_params.get("Content-Type") == "application/apply-patch+yaml":
            # An apply of the object's identity alone: the manager owns nothing any more, and its entry goes.
            assert set(body) == {"apiVersion", "kind", "metadata"} and set(body["metadata"]) <= {"name", "namespace"}, body
            held = self.objects[path]
            held["managedFields"] = [m for m in held["managedFields"] if m["manager"] != query["fieldManager"]]
            return Response({"metadata": held})
        if method == "PATCH" and path.startswith("/api/v1/nodes/"):
            self.patches.append(query)
            node = self.objects[path]
            for key, value in body["metadata"]["labels"].items():
                if value is None:
                    node["labels"].pop(key, None)
                else:
                    node["labels"][key] = value
            return Response({"metadata": node})
        raise AssertionError(f"unexpected call {method} {path}")

    @staticmethod
    def _of_type(path, rtype):
        prefix, _slash, resource = rtype["path"].rpartition("/")
        if rtype["namespaced"]:
            return path.startswith(f"{prefix}/namespaces/") and path.split("/")[-2] == resource
        return path.startswith(rtype["path"] + "/") and "/" not in path[len(rtype["path"]) + 1:]


class NewClientServer(FakeServer):
    """The same server behind the client generated since kubernetes 34 (param_serialize, then call_api without raising)."""

    def param_serialize(self, method, resource_path, query_params=None, header_params=None, body=None, auth_settings=None):
        return method, resource_path, query_params, header_params, body

    def call_api(self, *request, **_kw):  # pylint: disable=arguments-differ
        method, path, query, headers, body = request
        try:
            response = FakeServer.call_api(self, path, method, query_params=query, header_params=headers, body=body)
            response.status = 200
        except ApiException as exc:
            response = Response(json.loads(exc.body))
            response.status = exc.status
        response.read = lambda: None
        return response

    def response_deserialize(self, response, types):
        raise ApiException(response.status, json.loads(response.data)["message"])


@pytest.fixture(params=["client-33", "client-34"])
def server(monkeypatch, request):
    fake = FakeServer() if request.param == "client-33" else NewClientServer()
    monkeypatch.setattr(cluster_uninstall, "connect", lambda module: fake)
    monkeypatch.setattr(kube, "PAGE", 2)
    monkeypatch.setattr(cluster_uninstall.time, "sleep", lambda s: None)
    fake.add("namespaces", meta("gpu", labels=OURS))
    fake.add("daemonsets", meta("gfd", "gpu", uid="ds", labels=OURS))
    fake.add("pods", meta("gfd-1", "gpu", uid="pod", owners=["ds"]))
    fake.add("nodefeatures", meta("nvidia-features-for-n1", "gpu", owners=["ds", "pod"]))
    fake.add("configmaps", meta("cfg", "gpu", labels=OURS))
    fake.add("configmaps", meta("kube-root-ca.crt", "gpu"))
    fake.add("configmaps", meta("theirs", "default"))
    fake.add("runtimeclasses", meta("nvidia", managers=[applied()]))
    fake.add("customresourcedefinitions", meta("nodefeatures.nfd.k8s-sigs.io", managers=[applied("helm"), applied()]))
    fake.objects["/api/v1/nodes/n1"] = meta("n1", labels={"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": "n1"},
                                            managers=[{"manager": "gpuops-nvidia", "operation": "Update",
                                                       "fieldsV1": label_fields("nvidia.com/gpu.present")}])
    return fake


def test_check_mode_lists_what_would_go_and_removes_nothing(server):
    before = json.dumps(server.objects, sort_keys=True)
    out = call(cluster_uninstall.main, {"_ansible_check_mode": True, "_ansible_diff": True})
    assert out["changed"] is True
    assert out["removed"] == ["DaemonSet gpu/gfd", "ConfigMap gpu/cfg", "RuntimeClass nvidia", "Namespace gpu"]
    assert out["node_labels"] == {"n1": ["nvidia.com/gpu.present"]}
    assert out["released"] == ["CustomResourceDefinition nodefeatures.nfd.k8s-sigs.io"]
    assert out["diff"]["after"] == {"objects": [], "released": [], "node_labels": {}}
    assert json.dumps(server.objects, sort_keys=True) == before
    assert not [c for c in server.calls if c[0] != "GET"]


def test_a_run_removes_ours_in_order_and_the_next_changes_nothing(server):
    out = call(cluster_uninstall.main, {})
    assert out["changed"] is True and out["failed"] is False, out
    assert sorted(server.objects) == ["/api/v1/namespaces/default/configmaps/theirs", "/api/v1/namespaces/gpu/configmaps/kube-root-ca.crt",
                                      "/api/v1/nodes/n1", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodefeatures.nfd.k8s-sigs.io"]
    # The CRD someone else holds too stays, without the collection's part.
    crd = server.objects["/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodefeatures.nfd.k8s-sigs.io"]
    assert [m["manager"] for m in crd["managedFields"]] == ["helm"]
    assert server.objects["/api/v1/nodes/n1"]["labels"] == {"kubernetes.io/hostname": "n1"}
    deletes = [path for method, path in server.calls if method == "DELETE"]
    assert deletes == ["/apis/apps/v1/namespaces/gpu/daemonsets/gfd", "/api/v1/namespaces/gpu/configmaps/cfg",
                       "/apis/node.k8s.io/v1/runtimeclasses/nvidia", "/api/v1/namespaces/gpu"]
    # The labels go with the same field manager, so the Node's managedFields say they are nobody's now.
    assert server.patches == [{"fieldManager": "gpuops-nvidia"}]
    again = call(cluster_uninstall.main, {})
    assert again["changed"] is False and again["removed"] == [] and again["node_labels"] == {}


def test_a_type_the_account_may_not_list_is_named_and_the_rest_goes_on(server, monkeypatch):
    warnings: list[str] = []
    monkeypatch.setattr(cluster_uninstall.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))
    server.forbidden.add("/api/v1/configmaps")
    out = call(cluster_uninstall.main, {"_ansible_check_mode": True})
    assert out["not_readable"] == ["configmaps.core"]
    assert len(warnings) == 1 and "configmaps.core" in warnings[0] and "forbidden" in warnings[0]
    assert "ConfigMap gpu/cfg" not in out["removed"] and "DaemonSet gpu/gfd" in out["removed"]


def test_an_object_a_finalizer_holds_fails_the_step_naming_it_and_the_next_run_finishes(server):
    server.held.add("/apis/apps/v1/namespaces/gpu/daemonsets/gfd")
    out = call(cluster_uninstall.main, {"wait_timeout": 0})
    assert out["failed"] is True and "1 object(s) still there after 0 s: DaemonSet gpu/gfd" in out["msg"]
    # Nothing after the workloads was touched: the ConfigMaps and RBAC they use are still there.
    assert "/api/v1/namespaces/gpu/configmaps/cfg" in server.objects
    server.held.clear()
    out = call(cluster_uninstall.main, {})
    assert out["failed"] is False and out["removed"][0] == "DaemonSet gpu/gfd"
    assert call(cluster_uninstall.main, {})["changed"] is False


def test_the_users_pods_an_uninstall_would_break_are_those_on_the_runtime_or_holding_a_gpu():
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import uninstall_gpu_pods

    from tests.unit.cluster.test_drain import GPU, dra_pod, pod

    runtime = pod("cuda-app", spec={"runtimeClassName": "nvidia", "nodeName": "gpu-1"})
    requests = pod("train", GPU, spec={"nodeName": "gpu-2"})
    ours = pod("device-plugin", GPU, ns="gpu-operator", owner="DaemonSet")
    labelled = pod("smoke", GPU, ns="default", labels={"app.kubernetes.io/managed-by": "gpuops.nvidia"})
    done = pod("finished", GPU, phase="Succeeded")
    cpu = pod("web", {"limits": {"cpu": "1"}})
    pods = [runtime, requests, ours, labelled, done, cpu, dra_pod("dra", "c")]
    assert uninstall_gpu_pods(pods, "nvidia", "gpu-operator") == ["ml/cuda-app on gpu-1", "ml/dra on no node yet", "ml/train on gpu-2"]
    assert uninstall_gpu_pods([cpu, ours], "nvidia", "gpu-operator") == []
