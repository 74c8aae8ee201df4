"""The cluster_apply module against a fake API server (answering as the kubernetes client's call_api does): the order
of the applies, what counts as a change, check mode's dry run, and the errors it names; and its pure part
(module_utils/cluster/apply.py)."""

from __future__ import annotations

import copy
import json
import threading

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import apply
from ansible_collections.gpuops.nvidia.plugins.modules import cluster_apply

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.harness import call

DISCOVERY = {
    "/api/v1": [("namespaces", "Namespace", False), ("secrets", "Secret", True), ("serviceaccounts", "ServiceAccount", True),
                ("pods/eviction", "Eviction", True)],
    "/apis/apps/v1": [("daemonsets", "DaemonSet", True)],
    "/apis/node.k8s.io/v1": [("runtimeclasses", "RuntimeClass", False)],
    "/apis/apiextensions.k8s.io/v1": [("customresourcedefinitions", "CustomResourceDefinition", False)],
    "/apis/rbac.authorization.k8s.io/v1": [("clusterroles", "ClusterRole", False), ("clusterrolebindings", "ClusterRoleBinding", False)],
}
NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator", "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
RC = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}
SA = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "plugin", "namespace": "gpu-operator"}}
DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "plugin", "namespace": "gpu-operator"},
      "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull", "namespace": "gpu-operator"}, "data": {".dockerconfigjson": "e30="}}
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
       "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
                "versions": [{"name": "v1", "served": True, "storage": True}]}}
ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "plugin"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}
BINDING = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "plugin"},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "plugin"},
           "subjects": [{"kind": "ServiceAccount", "name": "plugin", "namespace": "gpu-operator"}]}
WIDGET = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "gpu-operator"}, "spec": {"size": 1}}


class FakeServer:
    """Objects by path; an apply sets what the object gives (a real server merges by field manager: here the last
    apply's fields are the object's), keeps the status, and bumps the resourceVersion when something changed."""

    def __init__(self):
        self.discovery = {path: [{"name": n, "kind": k, "namespaced": ns} for n, k, ns in kinds] for path, kinds in DISCOVERY.items()}
        self.objects: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self.lock = threading.Lock()
        self.refuse: dict[str, ApiException] = {}
        self.crd_served_after = 0  # discovery reads of the CRD's group before it is served
        self.nodes: dict[str, dict] = {"n1": {"a": "1"}, "n2": {}}
        self.least_privilege = False  # the caller is an account with the deployer's RBAC, not a superuser

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        query = dict(query_params)
        with self.lock:
            self.calls.append((method, path, query))
        if path in self.refuse:
            raise self.refuse[path]
        if path == "/api/v1/nodes":
            return Response({"items": [{"metadata": {"name": n, "labels": labels}} for n, labels in self.nodes.items()], "metadata": {}})
        if path.startswith("/api/v1/nodes/"):
            assert method == "PATCH" and header_params["Content-Type"] == "application/strategic-merge-patch+json"
            labels = self.nodes[path.rsplit("/", 1)[1]]
            for key, value in json.loads(body)["metadata"]["labels"].items() if isinstance(body, str) else body["metadata"]["labels"].items():
                labels.pop(key, None) if value is None else labels.__setitem__(key, value)
            return Response({})
        if path in self.discovery:
            return Response({"resources": self.discovery[path]})
        if path == "/apis/example.com/v1":
            if "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com" not in self.objects:
                raise ApiException(404, "not found")
            if self.crd_served_after > 0:
                self.crd_served_after -= 1
                raise ApiException(404, "not found")
            return Response({"resources": [{"name": "widgets", "kind": "Widget", "namespaced": True}]})
        if method == "GET":
            if path not in self.objects:
                raise ApiException(404, f"{path} not found")
            return Response(self.objects[path])
        assert method == "PATCH" and header_params["Content-Type"] == "application/apply-patch+yaml"
        assert query["fieldManager"] == "gpuops-nvidia" and query.get("force") == "true"
        given = json.loads(body)
        if given["kind"] == "ClusterRoleBinding" and self.least_privilege:
            # The API server resolves a binding's role to check that a caller who is not a superuser holds its rights.
            role = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{given['roleRef']['name']}"
            if role not in self.objects:
                raise ApiException(404, f'clusterroles.rbac.authorization.k8s.io "{given["roleRef"]["name"]}" not found')
        namespace = given["metadata"].get("namespace")
        if namespace and f"/api/v1/namespaces/{namespace}" not in self.objects:
            raise ApiException(404, f'namespaces "{namespace}" not found')
        before = self.objects.get(path)
        after = copy.deepcopy(given)
        after["metadata"]["resourceVersion"] = (before or {}).get("metadata", {}).get("resourceVersion", "1")
        after["metadata"]["managedFields"] = [{"manager": "gpuops-nvidia"}]
        if before is not None and "status" in before:
            after["status"] = before["status"]
        if before is None or apply.normalized(before) != apply.normalized(after):
            after["metadata"]["resourceVersion"] = str(int(after["metadata"]["resourceVersion"]) + 1)
        if query.get("dryRun") != "All":
            self.objects[path] = after
        return Response(after)

    def patched(self):
        return [(c[1], c[2].get("dryRun")) for c in self.calls if c[0] == "PATCH"]


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer()
    monkeypatch.setattr(cluster_apply, "connect", lambda module: fake)
    monkeypatch.setattr(cluster_apply, "POLL", 0)
    return fake


def test_creates_then_changes_nothing_then_reports_only_what_changed(server):
    out = call(cluster_apply.main, {"objects": [SA, DS, NS, RC]})
    assert not out.get("failed"), out
    assert out["changed"] and [r["result"] for r in out["results"]] == ["created"] * 4
    # The namespace went first, though given third; the objects in it were applied after it.
    assert server.patched()[0] == ("/api/v1/namespaces/gpu-operator", None)
    assert {patched[0] for patched in server.patched()} == {
        "/api/v1/namespaces/gpu-operator/serviceaccounts/plugin", "/apis/apps/v1/namespaces/gpu-operator/daemonsets/plugin",
        "/api/v1/namespaces/gpu-operator", "/apis/node.k8s.io/v1/runtimeclasses/nvidia"}
    # A status the controllers wrote is not a change of ours.
    server.objects["/apis/apps/v1/namespaces/gpu-operator/daemonsets/plugin"]["status"] = {"numberReady": 3}
    again = call(cluster_apply.main, {"objects": [SA, DS, NS, RC]})
    assert not again["changed"] and {r["result"] for r in again["results"]} == {"unchanged"}
    newer = {**DS, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i:2"}]}}}}
    out = call(cluster_apply.main, {"objects": [NS, RC, SA, newer], "_ansible_diff": True})
    assert out["changed"] and [r["result"] for r in out["results"]] == ["unchanged", "unchanged", "unchanged", "changed"]
    (diff,) = out["diff"]
    assert diff["before_header"] == "DaemonSet gpu-operator/plugin"
    assert diff["before"]["spec"]["template"]["spec"]["containers"][0]["image"] == "i:1"
    assert diff["after"]["spec"]["template"]["spec"]["containers"][0]["image"] == "i:2"
    assert "status" not in diff["before"] and "resourceVersion" not in diff["after"]["metadata"]


def test_check_mode_dry_runs_and_lists_what_cannot_be_dry_run_yet(server):
    out = call(cluster_apply.main, {"objects": [NS, RC, SA, DS], "_ansible_check_mode": True})
    assert not out.get("failed"), out
    assert out["changed"] and out["not_dry_run"] == ["ServiceAccount gpu-operator/plugin", "DaemonSet gpu-operator/plugin"]
    assert [r["result"] for r in out["results"]] == ["created", "created", "not dry-run", "not dry-run"]
    assert server.patched() == [("/api/v1/namespaces/gpu-operator", "All"), ("/apis/node.k8s.io/v1/runtimeclasses/nvidia", "All")]
    assert server.objects == {}
    call(cluster_apply.main, {"objects": [NS, RC, SA, DS]})
    out = call(cluster_apply.main, {"objects": [NS, RC, SA, {**DS, "spec": {}}], "_ansible_check_mode": True})
    assert [r["result"] for r in out["results"]] == ["unchanged", "unchanged", "unchanged", "changed"] and out["not_dry_run"] == []
    assert all(patched[1] == "All" for patched in server.patched()[-4:])


def test_check_mode_lists_a_binding_whose_role_the_same_run_creates(server):
    # A least-privilege account's dry run of a binding fails while its role is not there: the server resolves the role
    # to check the caller holds its rights. Listed, as what cannot be dry-run yet; a binding to a missing role that
    # the list does not carry still fails; the real run creates both.
    server.least_privilege = True
    out = call(cluster_apply.main, {"objects": [ROLE, BINDING], "_ansible_check_mode": True})
    assert not out.get("failed"), out
    assert [r["result"] for r in out["results"]] == ["created", "not dry-run"] and out["not_dry_run"] == ["ClusterRoleBinding plugin"]
    out = call(cluster_apply.main, {"objects": [BINDING], "_ansible_check_mode": True})
    assert out["failed"] and "not found" in out["msg"]
    out = call(cluster_apply.main, {"objects": [ROLE, BINDING]})
    assert not out.get("failed"), out
    assert [r["result"] for r in out["results"]] == ["created", "created"]


def test_a_secrets_values_never_reach_the_diff(server):
    call(cluster_apply.main, {"objects": [NS]})
    out = call(cluster_apply.main, {"objects": [SECRET], "_ansible_diff": True})
    assert out["diff"][0]["after"]["data"] == {".dockerconfigjson": apply.HIDDEN}
    assert "e30=" not in json.dumps(out)


def test_a_custom_object_waits_for_its_crd_in_the_same_list(server):
    server.crd_served_after = 2
    out = call(cluster_apply.main, {"objects": [NS, WIDGET, CRD]})
    assert not out.get("failed"), out
    assert [r["result"] for r in out["results"]] == ["created"] * 3
    assert server.patched()[-1] == ("/apis/example.com/v1/namespaces/gpu-operator/widgets/w", None)
    # In check mode, with the CRD not there yet, the custom object is listed, not dry-run.
    server.objects.clear()
    out = call(cluster_apply.main, {"objects": [CRD, WIDGET], "_ansible_check_mode": True})
    assert out["not_dry_run"] == ["Widget gpu-operator/w"]


def test_what_the_server_cannot_take_fails_naming_the_object(server):
    out = call(cluster_apply.main, {"objects": [NS, {**WIDGET, "apiVersion": "example.com/v2"}]})
    assert out["failed"] and out["msg"] == "applying Widget gpu-operator/w failed: the API server serves no kind Widget in example.com/v2"
    server.refuse["/apis/node.k8s.io/v1/runtimeclasses/nvidia"] = ApiException(403, "runtimeclasses.node.k8s.io is forbidden")
    out = call(cluster_apply.main, {"objects": [NS, RC, SA]})
    assert out["failed"] and out["msg"] == "applying RuntimeClass nvidia failed: runtimeclasses.node.k8s.io is forbidden"
    assert (out["object"], out["status"]) == ("RuntimeClass nvidia", 403)
    out = call(cluster_apply.main, {"objects": [{**SA, "metadata": {"name": "plugin"}}]})
    assert out["failed"] and "ServiceAccount is namespaced, and the object has no metadata.namespace" in out["msg"]


def test_objects_without_a_kind_or_a_name_are_refused_before_any_call(server):
    out = call(cluster_apply.main, {"objects": [NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, {"metadata": {"name": "x"}}]})
    assert out["failed"] and out["msg"] == ("objects: objects[1] (ConfigMap): metadata.name missing; "
                                            "objects[2] (no kind): apiVersion, kind missing")
    assert server.calls == []


def test_labels_go_on_before_the_first_object_in_the_same_run(server):
    sets = [{"name": "deploy", "labels": {"n1": {"a": "1"}, "n2": {"a": "2"}}},
            {"name": "mig", "labels": {"n1": {"m": "x"}, "n2": {"m": "y"}}, "keep_existing": ["m"]}]
    server.nodes["n1"]["m"] = "kept"
    out = call(cluster_apply.main, {"label_sets": sets, "objects": [NS, DS], "_ansible_diff": True})
    assert not out.get("failed"), out
    assert out["changed"] and out["labelled"] == {
        "changed_nodes": ["n2"], "sets": [{"name": "deploy", "changed_nodes": ["n2"]}, {"name": "mig", "changed_nodes": ["n2"]}]}
    assert next(c[1] for c in server.calls if c[0] == "PATCH") == "/api/v1/nodes/n2"
    assert server.nodes == {"n1": {"a": "1", "m": "kept"}, "n2": {"a": "2", "m": "y"}}
    assert out["diff"][0] == {"before_header": "Node labels", "after_header": "Node labels",
                              "before": {"n2": {"a": None, "m": None}}, "after": {"n2": {"a": "2", "m": "y"}}}
    again = call(cluster_apply.main, {"label_sets": sets, "objects": [NS, DS]})
    assert not again["changed"] and again["labelled"]["changed_nodes"] == []


def test_labels_alone_and_in_check_mode_patch_nothing(server):
    out = call(cluster_apply.main, {"label_sets": [{"labels": {"n2": {"a": "2"}}}], "_ansible_check_mode": True})
    assert out["changed"] and out["labelled"]["changed_nodes"] == ["n2"] and out["results"] == []
    assert server.nodes["n2"] == {} and not server.patched()


def test_a_node_not_in_the_cluster_fails_before_anything_is_labelled_or_applied(server):
    out = call(cluster_apply.main, {"label_sets": [{"labels": {"n2": {"a": "2"}, "n9": {"a": "2"}}}], "objects": [NS]})
    assert out["failed"] and out["msg"].startswith("1 node(s) are not in the cluster: n9;")
    assert not [c for c in server.calls if c[0] == "PATCH"]
    bad = call(cluster_apply.main, {"label_sets": [{"labels": {"n2": "true"}}]})
    assert bad["failed"] and bad["msg"] == "label_sets[0].labels: the value for node(s) ['n2'] must be a mapping of label to value"
    assert not [c for c in server.calls if c[0] == "PATCH"]


def test_namespaces_and_crds_go_first_in_their_order_then_the_roles_then_the_rest():
    assert apply.phases([SA, CRD, DS, NS, RC]) == ([1, 3], [], [0, 2, 4])
    assert apply.phases([BINDING, SA, ROLE, NS]) == ([3], [2], [0, 1])
    assert apply.role_key(BINDING) == apply.role_key(ROLE) == ("ClusterRole", "", "plugin")
    assert apply.describe(DS) == "DaemonSet gpu-operator/plugin" and apply.describe(RC) == "RuntimeClass nvidia"
    assert not apply.changed({**RC, "status": {"x": 1}, "metadata": {"name": "nvidia", "resourceVersion": "9"}}, RC)
    assert apply.changed(None, RC) and apply.changed(RC, {**RC, "handler": "other"})


def test_sets_that_name_no_node_list_no_nodes(server):
    out = call(cluster_apply.main, {"label_sets": [{"name": "mig", "labels": {}}], "objects": [NS]})
    assert not out.get("failed"), out
    assert out["labelled"] == {"changed_nodes": [], "sets": [{"name": "mig", "changed_nodes": []}]}
    assert not [c for c in server.calls if c[1] == "/api/v1/nodes"]


class DeletingServer(FakeServer):
    """The fake above, which also deletes: the object goes (not with the dry run); one not there answers 404."""

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        if method != "DELETE":
            return super().call_api(path, method, query_params, header_params, body, **_kw)
        query = dict(query_params)
        with self.lock:
            self.calls.append((method, path, query))
        if path in self.refuse:
            raise self.refuse[path]
        if path not in self.objects:
            raise ApiException(404, f"{path} not found")
        gone = self.objects[path]
        if query.get("dryRun") != "All":
            del self.objects[path]
        return Response({"kind": "Status", "status": "Success", "details": {"name": gone["metadata"]["name"]}})

    def deleted(self):
        return sorted((c[1], c[2].get("dryRun")) for c in self.calls if c[0] == "DELETE")


@pytest.fixture
def deleting(monkeypatch):
    fake = DeletingServer()
    monkeypatch.setattr(cluster_apply, "connect", lambda module: fake)
    return fake


def test_state_absent_deletes_what_is_there_and_leaves_the_rest(deleting):
    call(cluster_apply.main, {"objects": [NS, SA, DS, SECRET]})
    out = call(cluster_apply.main, {"objects": [DS, SECRET, RC, WIDGET], "state": "absent", "_ansible_diff": True})
    assert not out.get("failed"), out
    assert out["changed"] and out["results"] == [
        {"object": "DaemonSet gpu-operator/plugin", "result": "deleted"}, {"object": "Secret gpu-operator/pull", "result": "deleted"},
        # Not there; and a kind the server does not serve (its CRD gone): nothing to delete, no call.
        {"object": "RuntimeClass nvidia", "result": "absent"}, {"object": "Widget gpu-operator/w", "result": "absent"}]
    assert deleting.deleted() == [("/api/v1/namespaces/gpu-operator/secrets/pull", None),
                                  ("/apis/apps/v1/namespaces/gpu-operator/daemonsets/plugin", None)]
    assert set(deleting.objects) == {"/api/v1/namespaces/gpu-operator", "/api/v1/namespaces/gpu-operator/serviceaccounts/plugin"}
    # The diff: each object deleted as it was, a Secret's values hidden, nothing after.
    assert [(d["before_header"], d["after"]) for d in out["diff"]] == [("DaemonSet gpu-operator/plugin", {}), ("Secret gpu-operator/pull", {})]
    assert out["diff"][1]["before"]["data"] == {".dockerconfigjson": apply.HIDDEN}
    again = call(cluster_apply.main, {"objects": [DS, SECRET, RC, WIDGET], "state": "absent"})
    assert not again["changed"] and {r["result"] for r in again["results"]} == {"absent"}


def test_state_absent_in_check_mode_is_the_servers_dry_run(deleting):
    call(cluster_apply.main, {"objects": [NS, SA]})
    out = call(cluster_apply.main, {"objects": [SA, DS], "state": "absent", "_ansible_check_mode": True})
    assert out["changed"] and [r["result"] for r in out["results"]] == ["deleted", "absent"]
    assert deleting.deleted() == [("/api/v1/namespaces/gpu-operator/serviceaccounts/plugin", "All")]
    assert "/api/v1/namespaces/gpu-operator/serviceaccounts/plugin" in deleting.objects


def test_state_absent_names_a_refused_delete_and_takes_no_label_sets(deleting):
    call(cluster_apply.main, {"objects": [NS, SA]})
    deleting.refuse["/api/v1/namespaces/gpu-operator/serviceaccounts/plugin"] = ApiException(403, "serviceaccounts \"plugin\" is forbidden")
    out = call(cluster_apply.main, {"objects": [SA], "state": "absent"})
    assert out["failed"] and out["msg"] == 'deleting ServiceAccount gpu-operator/plugin failed: serviceaccounts "plugin" is forbidden'
    assert (out["object"], out["status"]) == ("ServiceAccount gpu-operator/plugin", 403)
    out = call(cluster_apply.main, {"objects": [SA], "state": "absent", "label_sets": [{"labels": {"n1": {"a": None}}}]})
    assert out["failed"] and out["msg"] == "label_sets: not with state absent (a label set to null is removed)"
