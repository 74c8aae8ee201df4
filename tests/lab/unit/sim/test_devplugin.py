"""The lab cluster's simulated device plugin: what it advertises on a node, and when (its pods, configs, labels)."""

from __future__ import annotations

import pytest

from lab.sim.devplugin import Simulator, advertised, shared
from lab.sim.hardware import load_profile

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
