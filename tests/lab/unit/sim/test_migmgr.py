"""The lab's MIG manager stand-in: mig-parted's choice of entry per GPU, and the state labels it leaves."""

from __future__ import annotations

import pytest
import yaml

from lab.sim import migmgr
from lab.sim.devplugin import Simulator, advertised
from lab.sim.hardware import load_profile
from tests.lab.unit.sim.test_devplugin import FakeCoreV1, _obj

A100 = "0x20B510DE"
CONFIGS = {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-1g.10gb": [{"devices": "all", "device-filter": [A100], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "gpu1-7g": [{"devices": [1], "device-filter": A100, "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}],
    "other-model": [{"devices": "all", "device-filter": ["0x233010DE"], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "h100-only-profile": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.12gb": 7}}],
}


def test_each_gpu_takes_the_first_entry_that_selects_it():
    a100 = load_profile("a100-pcie-mig")
    assert advertised(migmgr.apply(a100, CONFIGS, "all-1g.10gb"), "mixed") == {"nvidia.com/mig-1g.10gb": 14}
    assert advertised(migmgr.apply(a100, CONFIGS, "all-disabled"), "mixed") == {"nvidia.com/gpu": 2}
    # GPU 0 is not selected: it keeps its devices.
    assert advertised(migmgr.apply(a100, CONFIGS, "gpu1-7g"), "mixed") == {
        "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-7g.80gb": 1}
    assert migmgr.apply(a100, CONFIGS, "other-model")["gpus"]["mig_enabled"] == [True, False]
    assert load_profile("a100-pcie-mig")["gpus"]["mig_enabled"] == [True, False]  # the profile itself is not changed


@pytest.mark.parametrize(("profile", "name", "message"), [
    ("a100-pcie-mig", "no-such", "no MIG config 'no-such'"),
    ("a100-pcie-mig", "h100-only-profile", "offers no MIG profile 1g.12gb"),
    ("l40s", "all-disabled", "cannot do MIG"),
])
def test_what_mig_parted_would_refuse(profile, name, message):
    with pytest.raises(migmgr.MigError, match=message):
        migmgr.apply(load_profile(profile), CONFIGS, name)


class FakeNodes(FakeCoreV1):
    def __init__(self, *args, annotations=None, **kw):
        super().__init__(*args, **kw)
        self.annotations = annotations or {}
        self.states: list[tuple[str, str]] = []

    def read_node(self, name):
        node = super().read_node(name)
        node.metadata.annotations = {**node.metadata.annotations, **self.annotations.get(name, {})}
        return node

    def patch_node(self, name, body):
        self.states.append((name, body["metadata"]["labels"][migmgr.MIG_STATE]))


def _manager(uid, node):
    return _obj(metadata=_obj(uid=uid, namespace="gpu", labels={"app": "nvidia-mig-manager"}, deletion_timestamp=None),
                spec=_obj(node_name=node, containers=[], init_containers=[],
                          volumes=[_obj(name="mig-parted-config", config_map=_obj(name="parted"))]),
                status=_obj(phase="Running"))


def _plugin(uid, node):
    return _obj(metadata=_obj(uid=uid, namespace="gpu", labels={"app": "nvidia-device-plugin-daemonset"}, deletion_timestamp=None),
                spec=_obj(node_name=node, containers=[_obj(env=[_obj(name="MIG_STRATEGY", value="mixed")])], init_containers=[],
                          volumes=[]),
                status=_obj(phase="Running"))


def test_a_label_change_is_applied_pending_then_success_and_the_plugin_advertises_the_new_layout():
    parted = {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": CONFIGS})}
    api = FakeNodes({"n1": "a100-pcie-mig"}, labels={"n1": {"nvidia.com/mig.config": "all-1g.10gb"}},
                    configmaps={("gpu", "parted"): parted})
    sim = Simulator(api)
    sim.observe(_plugin("p1", "n1"))
    assert api.patches[-1] == ("n1", {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-2g.20gb": "1",
                                      "nvidia.com/mig-1g.10gb": "2"})  # no MIG manager yet: the profile's layout
    sim.observe(_manager("m1", "n1"))
    assert api.states == [("n1", "pending"), ("n1", "success")]
    assert api.patches[-1][1]["nvidia.com/mig-1g.10gb"] == "14" and api.patches[-1][1]["nvidia.com/gpu"] == "0"
    sim.node_changed(_obj(metadata=_obj(name="n1", labels={"nvidia.com/mig.config": "all-disabled"}, annotations={})))
    assert api.states[-2:] == [("n1", "pending"), ("n1", "success")]
    assert api.patches[-1][1]["nvidia.com/gpu"] == "2"
    sim.node_changed(_obj(metadata=_obj(name="n1", labels={"nvidia.com/mig.config": "all-disabled"}, annotations={})))
    assert len(api.states) == 4  # the same config: nothing to apply


def test_a_config_that_cannot_be_applied_fails_and_keeps_the_layout():
    parted = {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": CONFIGS})}
    api = FakeNodes({"n1": "a100-pcie-mig"}, labels={"n1": {"nvidia.com/mig.config": "all-1g.10gb"}},
                    configmaps={("gpu", "parted"): parted}, annotations={"n1": {"gpuops-lab/mig-fail": "true"}})
    sim = Simulator(api)
    sim.observe(_manager("m1", "n1"))
    sim.observe(_plugin("p1", "n1"))
    assert api.states == [("n1", "pending"), ("n1", "failed")]
    assert api.patches[-1][1]["nvidia.com/mig-3g.40gb"] == "1"  # the GPUs as they were
    # The annotation taken off and another config asked for: applied.
    sim.node_changed(_obj(metadata=_obj(name="n1", labels={"nvidia.com/mig.config": "all-disabled"}, annotations={})))
    assert api.states[-1] == ("n1", "success") and api.patches[-1][1]["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize("name", ["all-disabled", "all-1g.10gb", "gpu1-7g", "other-model"])
def test_the_lab_and_the_collection_agree_on_the_layout_a_config_gives(info_of, name):
    # Two readings of mig-parted's rule (the first entry that selects a GPU): the lab's, on the profile, and the
    # collection's (validation's expectation), on gpu_info.
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_nodes, expected_allocatable
    lab = advertised(migmgr.apply(load_profile("a100-pcie-mig"), CONFIGS, name), "mixed")
    nodes = cluster_nodes(["a100"], {"a100": {"gpuops_gpu_info": info_of("a100-pcie-mig")}}, {"gpuops_device_plugin_config": ""})
    assert expected_allocatable(nodes, "mixed", {}, "", mig_applied={"a100": CONFIGS[name]})["a100"] == lab


class RealNodes(FakeNodes):
    """A node without the lab's profile annotation: a kubelet joined to the lab cluster (issue 61)."""

    def read_node(self, name):
        node = super().read_node(name)
        node.metadata.annotations = {}
        return node


def test_the_stand_ins_leave_a_real_node_alone():
    parted = {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": CONFIGS})}
    api = RealNodes({"real-1": "a100-pcie-mig"}, labels={"real-1": {"nvidia.com/mig.config": "all-1g.10gb"}},
                    configmaps={("gpu", "parted"): parted})
    sim = Simulator(api)
    sim.observe(_plugin("p1", "real-1"))
    sim.observe(_manager("m1", "real-1"))
    sim.node_changed(_obj(metadata=_obj(name="real-1", labels={"nvidia.com/mig.config": "all-disabled"}, annotations={})))
    # Its own device plugin advertises and its own MIG manager sets the state: the stand-ins write nothing.
    assert api.patches == [] and api.states == []
