"""The lab's GFD stand-in, and a cross-check: its labels (computed from the hardware profile) against the
collection's GFD model (computed from gpu_info), for every profile GFD would label, strategy and sharing."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.validation import expected_gfd_labels, hardware_labels

from lab.sim import gfd
from lab.sim.devplugin import Simulator
from lab.sim.hardware import load_profile, profile_names

TS4 = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
MPS2 = {"version": "v1", "sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}


def test_an_h100_node_with_time_slicing():
    labels = gfd.gfd_labels(load_profile("hgx-h100"), "mixed", TS4)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4" and labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.family"] == "hopper" and labels["nvidia.com/gpu.count"] == "8"


def test_no_labels_without_a_driver_or_a_gpu_or_under_the_single_strategy():
    assert gfd.gfd_labels(load_profile("l40s"), "mixed", None) is None  # no driver loaded
    assert gfd.gfd_labels(load_profile("no-gpu"), "mixed", None) is None
    assert gfd.gfd_labels(load_profile("hgx-h100"), "single", None) is None


@pytest.mark.parametrize("config", [None, TS4, MPS2], ids=["none", "ts-4", "mps-2"])
@pytest.mark.parametrize("strategy", ["none", "mixed"])
@pytest.mark.parametrize("profile", [p for p in profile_names() if gfd.gfd_labels(load_profile(p), "none", None)])
def test_the_lab_and_the_collection_agree_on_the_labels_validation_compares(info_of, profile, strategy, config):
    lab = gfd.gfd_labels(load_profile(profile), strategy, config)
    expected = expected_gfd_labels(info_of(profile), config, strategy)
    assert expected is not None
    assert hardware_labels(lab) == expected


class FakeCustom:
    def __init__(self):
        self.objects = {}

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        if (namespace, name) not in self.objects:
            raise type("NotFound", (Exception,), {"status": 404})()
        return self.objects[(namespace, name)]

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        body["metadata"]["resourceVersion"] = "1"
        self.objects[(namespace, body["metadata"]["name"])] = body

    def replace_namespaced_custom_object(self, group, version, namespace, plural, name, body):
        body["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.objects[(namespace, name)] = body


def test_a_running_gfd_pod_writes_the_nodefeature_and_a_config_change_rewrites_it():
    from tests.lab.unit.sim.test_devplugin import TS4 as TS4_TEXT
    from tests.lab.unit.sim.test_devplugin import FakeCoreV1, _obj, _pod
    api = FakeCoreV1({"n1": "hgx-h100"}, labels={"n1": {"nvidia.com/device-plugin.config": "ts-4"}},
                     configmaps={("gpu", "cfgs"): {"ts-4": TS4_TEXT}})
    custom = FakeCustom()
    sim = Simulator(api, custom)
    pod = _pod("g1", "n1", strategy="mixed", configmap="cfgs")
    pod.metadata.labels = {"app": "gpu-feature-discovery"}
    sim.observe(pod)
    feature = custom.objects[("gpu", "nvidia-features-for-n1")]
    assert feature["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "n1"}
    assert feature["spec"]["labels"]["nvidia.com/gpu.replicas"] == "4"
    assert api.patches == []  # a GFD pod advertises no resources
    sim.node_changed(_obj(metadata=_obj(name="n1", labels={})))  # no config any more
    feature = custom.objects[("gpu", "nvidia-features-for-n1")]
    assert feature["spec"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert feature["metadata"]["resourceVersion"] == "2"


def test_the_nodefeature_is_owned_by_gfds_daemonset_and_pod_and_a_new_pod_rewrites_the_owners():
    """As GFD writes it: the garbage collector removes it with the DaemonSet, and nfd-master the Node labels it gave."""
    from tests.lab.unit.sim.test_devplugin import FakeCoreV1, _obj, _pod
    api = FakeCoreV1({"n1": "hgx-h100"})
    custom = FakeCustom()
    sim = Simulator(api, custom)

    def gfd_pod(uid, ds_uid):
        pod = _pod(uid, "n1", strategy="mixed")
        pod.metadata.labels = {"app": "gpu-feature-discovery"}
        pod.metadata.name = f"gfd-{uid}"
        pod.metadata.owner_references = [_obj(api_version="apps/v1", kind="DaemonSet", name="gpu-feature-discovery", uid=ds_uid)]
        return pod

    first = gfd_pod("p1", "ds1")
    sim.observe(first)
    owners = custom.objects[("gpu", "nvidia-features-for-n1")]["metadata"]["ownerReferences"]
    assert owners == [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpu-feature-discovery", "uid": "ds1", "controller": True},
                      {"apiVersion": "v1", "kind": "Pod", "name": "gfd-p1", "uid": "p1"}]
    sim.observe(first, deleted=True)
    sim.observe(gfd_pod("p2", "ds2"))  # the DaemonSet was made again: same labels, new owners
    owners = custom.objects[("gpu", "nvidia-features-for-n1")]["metadata"]["ownerReferences"]
    assert [o["uid"] for o in owners] == ["ds2", "p2"]
