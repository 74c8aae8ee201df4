"""The lab cluster's pure parts: the Kubernetes wrapper module, the nodes (the simulated device plugin: sim/test_devplugin.py)."""

from __future__ import annotations

import pytest

from lab import retry as retry_mod
from lab.cluster import Cluster, NodeSpec, node_manifest, parse_node_spec, scale_nodes, transient_api_error
from lab.errors import LabError
from lab.toolchain import kubernetes_wrapper_gomod, staging_replaces, staging_version, version_ldflags

# What `go mod edit -json` prints for a k8s.io/kubernetes go.mod, cut down: staging replaces, and one that is not.
UPSTREAM = {
    "Module": {"Path": "k8s.io/kubernetes"},
    "Go": "1.26.0",
    "GoDebug": [{"Key": "default", "Value": "go1.26"}],
    "Replace": [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
        {"Old": {"Path": "k8s.io/cri-streaming"}, "New": {"Path": "./staging/src/k8s.io/cri-streaming"}},
        {"Old": {"Path": "github.com/example/fork"}, "New": {"Path": "github.com/example/fork", "Version": "v1.2.3"}},
    ],
}


def test_staging_modules_are_read_from_the_release_go_mod():
    assert staging_replaces(UPSTREAM) == ["k8s.io/api", "k8s.io/cri-streaming"]


def test_a_go_mod_without_staging_is_an_error_not_an_empty_wrapper():
    with pytest.raises(LabError, match=r"maps no module to \./staging"):
        staging_replaces({"Replace": []})


def test_the_wrapper_replaces_each_staging_module_with_its_tag_and_keeps_go_and_godebug():
    gomod = kubernetes_wrapper_gomod(UPSTREAM, "v1.36.3")
    assert "\ngo 1.26.0\n" in gomod
    assert "\ngodebug default=go1.26\n" in gomod
    assert "require k8s.io/kubernetes v1.36.3" in gomod
    assert "\tk8s.io/api => k8s.io/api v0.36.3\n" in gomod
    assert "\tk8s.io/cri-streaming => k8s.io/cri-streaming v0.36.3\n" in gomod
    assert "github.com/example/fork" not in gomod


@pytest.mark.parametrize(("version", "staging"), [("v1.36.3", "v0.36.3"), ("v1.35.10", "v0.35.10")])
def test_staging_version(version, staging):
    assert staging_version(version) == staging


def test_a_bad_kubernetes_version_is_named():
    with pytest.raises(LabError, match=r"'1\.36' is not of the form"):
        staging_version("1.36")


def test_version_flags_stamp_both_version_packages():
    flags = version_ldflags("v1.36.3", "2026-07-22T18:07:38Z", "")
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.36.3" in flags
        assert f"-X {pkg}.gitMajor=1" in flags and f"-X {pkg}.gitMinor=36" in flags
        assert f"-X {pkg}.buildDate=2026-07-22T18:07:38Z" in flags


def test_a_node_carries_nfd_labels_capacity_and_no_gpu_resource():
    node = node_manifest(parse_node_spec("lab-noble=hgx-h100:noble"), kernel="6.8.0-45-generic")
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "lab-noble"
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["feature.node.kubernetes.io/pci-15b3.present"] == "true"
    assert labels["feature.node.kubernetes.io/system-os_release.ID"] == "ubuntu"
    assert labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == "24.04"
    assert labels["feature.node.kubernetes.io/system-os_release.VERSION_ID.major"] == "24"
    assert labels["feature.node.kubernetes.io/kernel-version.full"] == "6.8.0-45-generic"
    assert (labels["feature.node.kubernetes.io/kernel-version.major"], labels["feature.node.kubernetes.io/kernel-version.minor"]) == ("6", "8")
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["metadata"]["annotations"]["gpuops-lab/profile"] == "hgx-h100"
    assert node["status"]["capacity"]["cpu"] == "64"
    assert not [k for k in node["status"]["capacity"] if k.startswith("nvidia.com/")]


def test_a_node_without_gpus_has_no_pci_10de_label():
    labels = node_manifest(parse_node_spec("cpu-0=no-gpu:bookworm"), kernel="6.1.0-18-amd64")["metadata"]["labels"]
    assert "feature.node.kubernetes.io/pci-10de.present" not in labels
    assert labels["feature.node.kubernetes.io/system-os_release.ID"] == "debian"
    assert "feature.node.kubernetes.io/system-os_release.VERSION_ID.minor" not in labels


@pytest.mark.parametrize(
    ("text", "message"),
    [("x", "expected NAME=PROFILE"), ("x=dgx-z", "unknown hardware profile 'dgx-z'"), ("x=v100:sid", "unknown distribution 'sid'")],
)
def test_bad_node_specs_are_named(text, message):
    with pytest.raises(LabError, match=message):
        parse_node_spec(text)


def test_scale_nodes_mix_profiles_and_have_unique_names():
    nodes = scale_nodes(1000)
    assert len({n.name for n in nodes}) == 1000
    assert {n.profile for n in nodes} == {"hgx-h100", "a100-pcie-mig", "l40s", "hgx-b200", "v100"}


def test_the_nfd_wrapper_keeps_upstreams_replaces_and_maps_its_local_api_module_to_the_release():
    from lab.toolchain import nfd_wrapper_gomod
    upstream = {"Go": "1.26", "Replace": [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "k8s.io/api", "Version": "v0.35.3"}},
        {"Old": {"Path": "sigs.k8s.io/node-feature-discovery/api/nfd"}, "New": {"Path": "./api/nfd"}},
    ]}
    text = nfd_wrapper_gomod(upstream, "v0.19.0")
    assert "require sigs.k8s.io/node-feature-discovery v0.19.0" in text
    assert "\tk8s.io/api => k8s.io/api v0.35.3" in text
    assert "\tsigs.k8s.io/node-feature-discovery/api/nfd => sigs.k8s.io/node-feature-discovery/api/nfd v0.19.0" in text
    bad = {"Go": "1.26", "Replace": [{"Old": {"Path": "example.com/x"}, "New": {"Path": "./third_party/x"}}]}
    with pytest.raises(LabError, match="no longer fits"):
        nfd_wrapper_gomod(bad, "v0.19.0")


class _FlakyServer:
    """kubectl as a stub: `get nodes -o name` lists what exists; `create` creates all but the first
    `drop` items of its first `fail` calls and then fails the way kubectl does (the last error line)."""

    def __init__(self, fail: int, drop: int, error: str = "Error from server: etcdserver: request timed out") -> None:
        self.nodes: list[str] = []
        self.creates: list[list[str]] = []
        self.gets = 0
        self.fail, self.drop, self.error = fail, drop, error

    def __call__(self, *args, stdin=None, check=True, timeout=120):
        if args[:2] == ("get", "nodes"):
            self.gets += 1
            return "".join(f"node/{n}\n" for n in self.nodes)
        assert args[0] == "create"
        import json
        names = [item["metadata"]["name"] for item in json.loads(stdin)["items"]]
        self.creates.append(names)
        if len(self.creates) <= self.fail:
            self.nodes += names[self.drop:]
            raise LabError(f"kubectl create -f - failed: {self.error}")
        self.nodes += names
        return "".join(f"node/{n}\n" for n in names)


def _specs(n: int) -> list[NodeSpec]:
    return [NodeSpec(name=f"n{i}", profile="no-gpu") for i in range(n)]


def test_a_create_that_etcd_times_out_on_is_finished_by_creating_only_the_missing_nodes(tmp_path, monkeypatch):
    monkeypatch.setattr(retry_mod, "SLEEP", lambda _s: None)
    cluster, server = Cluster(tmp_path), _FlakyServer(fail=2, drop=3)
    monkeypatch.setattr(cluster, "kubectl", server)
    cluster.create_nodes(_specs(10))
    assert sorted(server.nodes) == sorted(f"n{i}" for i in range(10))
    assert [len(c) for c in server.creates] == [10, 3, 3]  # each retry sends only what is still missing
    assert server.gets == 2  # only the retries ask what is there


def test_a_create_that_succeeds_asks_nothing_first(tmp_path, monkeypatch):
    cluster, server = Cluster(tmp_path), _FlakyServer(fail=0, drop=0)
    monkeypatch.setattr(cluster, "kubectl", server)
    cluster.create_nodes(_specs(4))
    assert server.creates == [["n0", "n1", "n2", "n3"]] and server.gets == 0


def test_a_create_that_fails_for_a_real_reason_is_not_retried(tmp_path, monkeypatch):
    monkeypatch.setattr(retry_mod, "SLEEP", lambda _s: None)
    cluster = Cluster(tmp_path)
    server = _FlakyServer(fail=5, drop=1, error='Error from server (Invalid): Node "n0" is invalid')
    monkeypatch.setattr(cluster, "kubectl", server)
    with pytest.raises(LabError, match="is invalid"):
        cluster.create_nodes(_specs(3))
    assert len(server.creates) == 1


def test_a_backend_that_stays_slow_gives_up_naming_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(retry_mod, "SLEEP", lambda _s: None)
    cluster, server = Cluster(tmp_path), _FlakyServer(fail=99, drop=1)
    monkeypatch.setattr(cluster, "kubectl", server)
    with pytest.raises(retry_mod.RetriesExhausted, match="creating the lab's nodes: etcdserver: request timed out"):
        cluster.create_nodes(_specs(3))


@pytest.mark.parametrize(("text", "reason"), [
    ("kubectl create -f - failed: Error from server: etcdserver: request timed out", "etcdserver: request timed out"),
    ("Error from server (Timeout): Timeout: request did not complete within requested timeout",
     "Timeout: request did not complete"),
    ('Error from server (AlreadyExists): nodes "n0" already exists', None),
    ("error: the path \"x\" does not exist", None),
])
def test_which_api_errors_are_worth_another_try(text, reason):
    assert transient_api_error(LabError(text)) == reason


def test_kwok_manages_only_the_nodes_the_lab_made_for_it():
    # A real node (a kubelet joined to the lab cluster) must be left alone: seen taken over, Ready with KWOK's heartbeats.
    import yaml

    from lab.cluster import KWOKCTL_CONFIG, NodeSpec, node_manifest

    (config,) = yaml.safe_load_all(KWOKCTL_CONFIG)
    (kwok,) = [p for p in config["componentsPatches"] if p["name"] == "kwok-controller"]
    args = {a["key"]: a["value"] for a in kwok["extraArgs"]}
    assert args == {"manage-all-nodes": "false", "manage-nodes-with-annotation-selector": "kwok.x-k8s.io/node=fake"}
    assert node_manifest(NodeSpec("n", "hgx-h100"))["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
