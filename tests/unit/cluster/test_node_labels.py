"""The node_labels module: what each Node is patched with, for one label set and for several in one run, and its
calls to the API server (a fake answering as the client's call_api does)."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.labels import plan, plan_sets
from ansible_collections.gpuops.nvidia.plugins.modules import node_labels

from tests.unit.cluster.api_fakes import ApiException, Response
from tests.unit.harness import call

CURRENT = {
    "a": {"nvidia.com/gpu.present": "true", "nvidia.com/mig.config": "all-1g.10gb"},
    "b": {"nvidia.com/gpu.present": "true"},
}


def test_only_what_differs_is_patched_and_null_removes():
    assert plan(CURRENT, {"a": {"nvidia.com/gpu.present": "true", "x": None}, "b": {"nvidia.com/gpu.present": "true"}},
                set()) == {}
    assert plan(CURRENT, {"a": {"nvidia.com/gpu.present": None}}, set()) == {"a": {"nvidia.com/gpu.present": None}}


def test_keep_existing_leaves_a_non_empty_value():
    wanted = {"a": {"nvidia.com/mig.config": "all-disabled"}, "b": {"nvidia.com/mig.config": "all-disabled"}}
    assert plan(CURRENT, wanted, {"nvidia.com/mig.config"}) == {"b": {"nvidia.com/mig.config": "all-disabled"}}


def test_sets_merge_into_one_patch_per_node_and_say_what_each_changed():
    sets = [
        {"labels": {"a": {"nvidia.com/gpu.deploy.dcgm": "true"}, "b": {"nvidia.com/gpu.present": "true"}},
         "keep_existing": []},
        {"labels": {"a": {"nvidia.com/mig.config": "all-disabled"}, "b": {"nvidia.com/mig.config": "all-disabled"}},
         "keep_existing": ["nvidia.com/mig.config"]},
    ]
    patches, changed = plan_sets(CURRENT, sets)
    assert patches == {"a": {"nvidia.com/gpu.deploy.dcgm": "true"}, "b": {"nvidia.com/mig.config": "all-disabled"}}
    assert changed == [["a"], ["b"]]


def test_a_later_set_wins_a_key_two_sets_name():
    sets = [{"labels": {"b": {"k": "one"}}, "keep_existing": []}, {"labels": {"b": {"k": "two"}}, "keep_existing": []}]
    assert plan_sets(CURRENT, sets) == ({"b": {"k": "two"}}, [["b"], ["b"]])


def test_sets_already_right_patch_nothing():
    sets = [{"labels": {"a": {"nvidia.com/mig.config": "other"}}, "keep_existing": ["nvidia.com/mig.config"]},
            {"labels": {}, "keep_existing": []}]
    assert plan_sets(CURRENT, sets) == ({}, [[], []])


class FakeServer:
    """The client's call_api as the kubernetes client answers: the Nodes' metadata, and the patches sent."""

    def __init__(self, nodes):
        self.nodes, self.calls, self.refused = nodes, [], set()

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        self.calls.append((method, path, dict(query_params), dict(header_params or {}), body))
        if method == "GET":
            return Response({"items": [{"metadata": {"name": n, "labels": labels}} for n, labels in self.nodes.items()], "metadata": {}})
        if path.rsplit("/", 1)[1] in self.refused:
            raise ApiException(403, f"nodes \"{path.rsplit('/', 1)[1]}\" is forbidden")
        return Response({})


@pytest.fixture
def server(monkeypatch):
    fake = FakeServer(CURRENT)
    monkeypatch.setattr(node_labels, "connect", lambda module: fake)
    return fake


def test_reads_the_nodes_metadata_only_and_patches_what_differs(server):
    out = call(node_labels.main, {"labels": {"a": {"nvidia.com/gpu.present": "true"}, "b": {"x": "1"}}, "field_manager": "fm"})
    assert not out.get("failed") and out["changed"] and out["changed_nodes"] == ["b"]
    listing, patch = server.calls[0], server.calls[1]
    assert listing[:2] == ("GET", "/api/v1/nodes") and listing[2]["limit"] == 500 and "PartialObjectMetadataList" in listing[3]["Accept"]
    assert patch[:3] == ("PATCH", "/api/v1/nodes/b", {"fieldManager": "fm"})
    assert patch[3]["Content-Type"] == "application/strategic-merge-patch+json" and patch[4] == {"metadata": {"labels": {"x": "1"}}}


def test_check_mode_patches_nothing_and_a_refused_patch_fails_naming_the_node(server):
    out = call(node_labels.main, {"labels": {"b": {"x": "1"}}, "_ansible_check_mode": True})
    assert out["changed"] and [c[0] for c in server.calls] == ["GET"]
    server.refused.add("b")
    out = call(node_labels.main, {"labels": {"a": {"y": "2"}, "b": {"x": "1"}}})
    assert out["failed"] and out["msg"] == 'labelling 1 node(s) failed, b first: nodes "b" is forbidden'
    assert out["changed_nodes"] == ["a", "b"]


class AnnotatedServer(FakeServer):
    """The Nodes with their annotations too, and the patches applied to both."""

    def __init__(self, nodes, annotations):
        super().__init__(nodes)
        self.annotations = annotations

    def call_api(self, path, method, query_params=(), header_params=None, body=None, **_kw):
        if method == "GET":
            self.calls.append((method, path, dict(query_params), dict(header_params or {}), body))
            return Response({"items": [{"metadata": {"name": n, "labels": labels, "annotations": self.annotations.get(n, {})}}
                                       for n, labels in self.nodes.items()], "metadata": {}})
        out = super().call_api(path, method, query_params, header_params, body, **_kw)
        node = path.rsplit("/", 1)[1]
        for part, store in (("labels", self.nodes[node]), ("annotations", self.annotations.setdefault(node, {}))):
            for key, value in body["metadata"].get(part, {}).items():
                store.pop(key, None) if value is None else store.__setitem__(key, value)
        return out


@pytest.fixture
def annotated(monkeypatch):
    fake = AnnotatedServer({"a": {"state": "upgrade-failed"}, "b": {}}, {"a": {"gpuops.nvidia/failure": "branch 580: x"}})
    monkeypatch.setattr(node_labels, "connect", lambda module: fake)
    return fake


def test_annotations_go_in_the_labels_patch_and_null_removes_one(annotated):
    args = {"labels": {"a": {"state": "upgrade-done"}}, "annotations": {"a": {"gpuops.nvidia/failure": None}}, "field_manager": "fm",
            "_ansible_diff": True}
    out = call(node_labels.main, args)
    assert not out["failed"] and out["changed"] and out["changed_nodes"] == ["a"]
    (patch,) = [c for c in annotated.calls if c[0] == "PATCH"]
    assert patch[1:3] == ("/api/v1/nodes/a", {"fieldManager": "fm"})
    assert patch[4] == {"metadata": {"labels": {"state": "upgrade-done"}, "annotations": {"gpuops.nvidia/failure": None}}}
    # Two diffs, each headed: the labels', the annotations'.
    assert out["diff"] == [
        {"before_header": "Node labels", "after_header": "Node labels", "before": {"a": {"state": "upgrade-failed"}},
         "after": {"a": {"state": "upgrade-done"}}},
        {"before_header": "Node annotations", "after_header": "Node annotations", "before": {"a": {"gpuops.nvidia/failure": "branch 580: x"}},
         "after": {"a": {"gpuops.nvidia/failure": None}}}]
    assert annotated.annotations["a"] == {} and annotated.nodes["a"] == {"state": "upgrade-done"}
    again = call(node_labels.main, args)
    assert not again["changed"] and [c[0] for c in annotated.calls].count("PATCH") == 1


def test_annotations_alone_in_check_mode_and_on_a_node_that_is_not_there(annotated):
    out = call(node_labels.main, {"annotations": {"b": {"gpuops.nvidia/failure": "all-balanced: failed"}}, "_ansible_check_mode": True})
    assert out["changed"] and out["changed_nodes"] == ["b"] and [c[0] for c in annotated.calls] == ["GET"]
    out = call(node_labels.main, {"annotations": {"a": {"gpuops.nvidia/failure": "branch 580: x"}}})
    assert not out["changed"] and "diff" not in out
    out = call(node_labels.main, {"annotations": {"gone": {"x": "1"}}, "missing": "warn"})
    assert not out["failed"] and not out["changed"] and out["missing_nodes"] == ["gone"]
    out = call(node_labels.main, {"annotations": {"a": "not a mapping"}})
    assert out["failed"] and out["msg"] == "annotations: the value for node(s) ['a'] must be a mapping of annotation to value"
