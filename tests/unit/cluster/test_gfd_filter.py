"""The gfd_labels filter: GFD's labels from a node's gpu_info and the cluster's policy, on the controller."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.filter.gfd import FilterModule, gfd_labels
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd import node_gfd_labels


def test_the_filter_is_registered():
    assert FilterModule().filters() == {"gfd_labels": gfd_labels}


@pytest.mark.parametrize(("profile", "product"), [
    ("hgx-h100", "NVIDIA-H100-80GB-HBM3"), ("l40s", "NVIDIA-L40S"), ("gh200", "NVIDIA-GH200-480GB"),
])
def test_the_product_label_of_lab_hardware(info_of, profile, product):
    labels = gfd_labels(info_of(profile))
    assert labels["nvidia.com/gpu.product"] == product
    assert labels == node_gfd_labels(info_of(profile))[0]


def test_a_node_without_gpus_has_no_labels(info_of):
    assert info_of("no-gpu")["nvml"]["status"] == "library_not_found"
    assert gfd_labels(info_of("no-gpu")) == {}


def test_the_cluster_policy_is_an_argument(info_of):
    shared = gfd_labels(info_of("v100"), {"strategy": "time-slicing", "replicas": 4})
    assert shared["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-16GB-SHARED" and shared["nvidia.com/gpu.replicas"] == "4"
    mixed = gfd_labels(info_of("a100-pcie-mig"), {}, "mixed")
    assert mixed["nvidia.com/mig.strategy"] == "mixed" and mixed["nvidia.com/mig-1g.10gb.count"] == "2"


NO_GPU = {"pci": {"gpus": []}, "nvml": {"status": "ok", "gpus": [], "driver_version": "580.65.06", "cuda_driver_version": "13.0"}}


@pytest.mark.parametrize(("args", "message"), [
    (({"summary": {}},), "not the gpu_info structure"),
    (("text",), "not the gpu_info structure"),
    ((NO_GPU, {}, "mixd"), "MIG strategy 'mixd' is not one of none, single, mixed"),
    ((NO_GPU, {"strategy": "mps", "replicas": 1}), "needs replicas of at least 2"),
    ((NO_GPU, ["mps"]), "sharing ['mps'] is not a mapping"),
    (({"pci": {"gpus": [{"bus_id": "x"}]}, "nvml": {"status": "error", "gpus": []}},), "the input lacks 'name'"),
])
def test_bad_input_is_named(args, message):
    with pytest.raises(AnsibleFilterError, match=f"^gfd_labels: .*{__import__('re').escape(message)}"):
        gfd_labels(*args)
