"""The lab cluster's pure parts: the Kubernetes wrapper module, the nodes, the simulated device plugin."""

from __future__ import annotations

import pytest

from lab import retry as retry_mod
from lab.cluster import Cluster, NodeSpec, node_manifest, parse_node_spec, scale_nodes, transient_api_error
from lab.errors import LabError
from lab.sim.devplugin import Simulator, advertised, shared
from lab.sim.hardware import load_profile
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


A100 = load_profile("a100-pcie-mig")


@pytest.mark.parametrize(
    ("profile", "strategy", "expected"),
    [
        ("hgx-h100", "none", {"nvidia.com/gpu": 8}),
        ("hgx-h100", "mixed", {"nvidia.com/gpu": 8}),  # no GPU in MIG mode: the same under every strategy
        ("a100-pcie-mig", "none", {"nvidia.com/gpu": 2}),
        ("a100-pcie-mig", "mixed", {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1,
                                    "nvidia.com/mig-1g.10gb": 2}),
        ("a100-pcie-mig", "single", {}),  # one GPU in MIG mode, one not: the plugin refuses
        ("no-gpu", "none", {}),
    ],
)
def test_what_the_device_plugin_advertises(profile, strategy, expected):
    assert advertised(load_profile(profile), strategy) == expected


def test_single_strategy_advertises_the_mig_devices_as_gpus():
    profile = {**A100, "gpus": {**A100["gpus"], "mig_enabled": [True, True], "mig_devices": [["1g.10gb"] * 7, ["1g.10gb+me"]]}}
    assert advertised(profile, "single") == {}  # two profiles
    profile["gpus"]["mig_devices"] = [["1g.10gb"] * 7, ["1g.10gb"] * 7]
    assert advertised(profile, "single") == {"nvidia.com/gpu": 14}


class FakeCoreV1:
    """Records node status patches; the nodes' annotations name their profiles."""

    def __init__(self, profiles, labels=None, configmaps=None):
        self.profiles, self.patches = profiles, []
        self.labels, self.configmaps = labels or {}, configmaps or {}

    def read_node(self, name):
        return _obj(metadata=_obj(annotations={"gpuops-lab/profile": self.profiles[name]}, labels=self.labels.get(name)))

    def read_namespaced_config_map(self, name, namespace):
        return _obj(data=self.configmaps[(namespace, name)])

    def patch_node_status(self, name, body):
        self.patches.append((name, body["status"]["capacity"]))


def _obj(**kw):
    return type("Obj", (), kw)()


def _mps_daemon(uid, node, phase="Running", deleting=False):
    return _obj(metadata=_obj(uid=uid, namespace="gpu", labels={"app": "nvidia-device-plugin-mps-control-daemon"},
                              deletion_timestamp="now" if deleting else None),
                spec=_obj(node_name=node, containers=[], volumes=[], init_containers=[]), status=_obj(phase=phase))


def _pod(uid, node, phase="Running", strategy=None, deleting=False, configmap=None, default=""):
    env = [_obj(name="MIG_STRATEGY", value=strategy)] if strategy else []
    volumes = []
    if configmap:
        env.append(_obj(name="CONFIG_FILE", value="/config/config.yaml"))
        volumes.append(_obj(name="available-configs", config_map=_obj(name=configmap)))
    sidecar = _obj(env=[_obj(name="DEFAULT_CONFIG", value=default)])
    return _obj(metadata=_obj(uid=uid, namespace="gpu", deletion_timestamp="now" if deleting else None),
                spec=_obj(node_name=node, containers=[_obj(env=env), sidecar], volumes=volumes, init_containers=[]),
                status=_obj(phase=phase))


TS4 = "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"
MPS2 = "sharing:\n  mps:\n    renameByDefault: true\n    resources:\n    - {name: gpu, replicas: 2}\n"


def test_sharing_multiplies_the_replicated_resources():
    assert shared({"nvidia.com/gpu": 4}, {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}) \
        == {"nvidia.com/gpu": 16}
    assert shared({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2},
                  {"sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "mig-1g.10gb", "replicas": 3}]}}}) \
        == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb.shared": 6}
    assert shared({"nvidia.com/gpu": 4}, None) == {"nvidia.com/gpu": 4}


def test_the_node_label_picks_the_config_and_a_label_change_resyncs():
    api = FakeCoreV1({"n1": "l40s"}, labels={"n1": {"nvidia.com/device-plugin.config": "ts-4"}},
                     configmaps={("gpu", "cfgs"): {"ts-4": TS4, "mps-2": MPS2}})
    sim = Simulator(api)
    sim.observe(_mps_daemon("m1", "n1"))
    sim.observe(_pod("p1", "n1", configmap="cfgs"))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "16"})
    sim.node_changed(_obj(metadata=_obj(name="n1", labels={"nvidia.com/device-plugin.config": "mps-2"})))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"})
    sim.node_changed(_obj(metadata=_obj(name="n1", labels={})))  # no label, no default: no sharing
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu.shared": "0", "nvidia.com/gpu": "4"})


def test_the_default_config_applies_without_a_label_and_a_configmap_change_resyncs():
    api = FakeCoreV1({"n1": "l40s"}, configmaps={("gpu", "cfgs"): {"ts-4": TS4}})
    sim = Simulator(api)
    sim.observe(_pod("p1", "n1", configmap="cfgs", default="ts-4"))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "16"})
    sim.configmap_changed(_obj(metadata=_obj(namespace="gpu", name="cfgs"), data={"ts-4": TS4.replace("4}", "2}")}))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "8"})


def test_capacity_appears_with_a_running_plugin_pod_and_drops_to_zero_when_it_goes():
    api = FakeCoreV1({"n1": "a100-pcie-mig"})
    sim = Simulator(api)
    sim.observe(_pod("p1", "n1", phase="Pending", strategy="mixed"))
    assert api.patches == []  # not running yet: nothing advertised
    sim.observe(_pod("p1", "n1", strategy="mixed"))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                      "nvidia.com/mig-1g.10gb": "2"})
    sim.observe(_pod("p1", "n1", strategy="mixed"))
    assert len(api.patches) == 1  # nothing changed: no second patch
    sim.observe(_pod("p1", "n1", strategy="mixed", deleting=True))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "0", "nvidia.com/mig-3g.40gb": "0", "nvidia.com/mig-2g.20gb": "0",
                                      "nvidia.com/mig-1g.10gb": "0"})


def test_a_relist_drops_the_resources_of_pods_that_went_unseen():
    api = FakeCoreV1({"n1": "hgx-h100", "n2": "v100"})
    sim = Simulator(api)
    sim.resync([_pod("a", "n1"), _pod("b", "n2")])
    assert sorted(api.patches) == [("n1", {"nvidia.com/gpu": "8"}), ("n2", {"nvidia.com/gpu": "4"})]
    sim.resync([_pod("b", "n2")])
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "0"})


def test_an_mps_config_advertises_nothing_until_the_mps_daemon_runs_on_the_node():
    mps = {"nvidia.com/device-plugin.config": "mps-2"}
    api = FakeCoreV1({"n1": "l40s", "n2": "l40s"}, labels={"n1": mps, "n2": mps}, configmaps={("gpu", "cfgs"): {"mps-2": MPS2}})
    sim = Simulator(api)
    sim.observe(_mps_daemon("m2", "n2"))  # on the other node: does not count for n1
    sim.observe(_pod("p1", "n1", configmap="cfgs"))
    assert api.patches == []  # the plugin fails its health check: no GPU at all
    sim.observe(_mps_daemon("m1", "n1", phase="Pending"))
    assert api.patches == []
    sim.observe(_mps_daemon("m1", "n1"))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu.shared": "8"})
    sim.observe(_mps_daemon("m1", "n1", deleting=True))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu.shared": "0"})
    sim.resync([_pod("p1", "n1", configmap="cfgs"), _mps_daemon("m1", "n1")])
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu.shared": "8"})


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
