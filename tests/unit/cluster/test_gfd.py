"""GPU Feature Discovery's labels, computed on the cluster side from a node's GPU facts."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd import arch_family, gfd_labels, sanitise


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"),
        ("NVIDIA GeForce RTX 4090 (Ti)", "NVIDIA-GeForce-RTX-4090-Ti"),
        # A tab is not in the kept set: GFD drops it before it joins the space-separated fields.
        ("  two   spaces\tand tab ", "two-spacesand-tab"),
    ],
)
def test_sanitise_follows_gfd(name, expected):
    assert sanitise(name) == expected


@pytest.mark.parametrize(
    ("cc", "family"),
    [((5, 2), "maxwell"), ((6, 1), "pascal"), ((7, 0), "volta"), ((7, 5), "turing"), ((8, 0), "ampere"),
     ((8, 6), "ampere"), ((8, 9), "ada-lovelace"), ((9, 0), "hopper"), ((10, 0), "blackwell"),
     ((12, 0), "blackwell"), ((13, 0), "rubin"), ((4, 0), "undefined"), ((11, 0), "undefined")],
)
def test_arch_family(cc, family):
    assert arch_family(*cc) == family


H100 = {"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "compute_capability": "9.0", "pci_class": "0302",
        "mig_capable": True, "mig_enabled": False}


def test_labels_of_an_hgx_h100_node():
    labels = gfd_labels([H100] * 8, driver_version="550.54.15", cuda_version="12.4")
    assert labels == {
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.driver-version.full": "550.54.15",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
    }


def test_a_two_part_driver_version_has_an_empty_revision():
    labels = gfd_labels([H100], driver_version="580.65")
    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/cuda.driver.rev"] == ""


def test_time_slicing_adds_shared_suffix_and_replicas():
    t4 = {"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5", "pci_class": "0302"}
    labels = gfd_labels([t4], sharing={"strategy": "time-slicing", "replicas": 4})
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.family"] == "turing"


def test_rename_by_default_keeps_the_product():
    labels = gfd_labels([H100], sharing={"strategy": "mps", "replicas": 2, "rename_by_default": True})
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/mps.capable"] == "true"


MIG_1G = {"profile": "1g.10gb", "memory_mib": 9984, "multiprocessors": 16, "slices_gi": 1, "slices_ci": 1,
          "engines": {"copy": 1, "decoder": 1, "encoder": 0, "jpeg": 1, "ofa": 0}}
MIG_3G = {"profile": "3g.40gb", "memory_mib": 40192, "multiprocessors": 60, "slices_gi": 3, "slices_ci": 3,
          "engines": {"copy": 3, "decoder": 3, "encoder": 0, "jpeg": 3, "ofa": 0}}


def test_mixed_strategy_labels_each_profile_and_zeroes_parent_replicas():
    gpu = {**H100, "mig_enabled": True, "mig_devices": [MIG_1G, MIG_1G, MIG_3G]}
    labels = gfd_labels([gpu], mig_strategy="mixed")
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "2"
    assert labels["nvidia.com/mig-1g.10gb.memory"] == "9984"
    assert labels["nvidia.com/mig-1g.10gb.multiprocessors"] == "16"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/mig-3g.40gb.multiprocessors"] == "60"
    assert labels["nvidia.com/mig-3g.40gb.engines.copy"] == "3"


def test_single_strategy_overrides_gpu_labels():
    gpu = {**H100, "mig_enabled": True, "mig_devices": [MIG_1G] * 7}
    labels = gfd_labels([gpu], mig_strategy="single", sharing={"strategy": "time-slicing", "replicas": 2})
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"
    assert labels["nvidia.com/gpu.count"] == "7"
    assert labels["nvidia.com/gpu.memory"] == "9984"
    assert labels["nvidia.com/gpu.slices.gi"] == "1"


def test_single_strategy_with_two_profiles_is_invalid():
    gpu = {**H100, "mig_enabled": True, "mig_devices": [MIG_1G, MIG_3G]}
    labels = gfd_labels([gpu], mig_strategy="single")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert labels["nvidia.com/gpu.count"] == "0"


def test_profile_plus_becomes_dot_in_the_resource_name_and_the_product():
    # The device plugin names the resource after the profile with '+' replaced: '+' is not valid in a label key.
    me = {**MIG_1G, "profile": "1g.10gb+me"}
    labels = gfd_labels([{**H100, "mig_enabled": True, "mig_devices": [me]}], mig_strategy="mixed")
    assert labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
    assert labels["nvidia.com/mig-1g.10gb.me.count"] == "1"
    assert not [k for k in labels if "+" in k]


TIME_SLICED = {"strategy": "time-slicing", "replicas": 4}


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_gpus_all_in_mig_mode_are_labelled_without_sharing_whatever_the_strategy(strategy):
    gpus = [{**H100, "mig_enabled": True, "mig_devices": [MIG_1G] * 7}] * 2
    labels = gfd_labels(gpus, mig_strategy=strategy, sharing=TIME_SLICED)
    if strategy != "single":  # single relabels nvidia.com/gpu as the MIG devices
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.replicas"] == "0"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
        assert labels["nvidia.com/gpu.count"] == "2"


def test_a_full_gpu_beside_a_mig_gpu_keeps_the_sharing_labels():
    gpus = [{**H100, "mig_enabled": True, "mig_devices": [MIG_1G] * 7}, H100]
    labels = gfd_labels(gpus, mig_strategy="mixed", sharing=TIME_SLICED)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "7"


def test_single_strategy_with_a_mig_gpu_holding_no_mig_device_is_invalid():
    gpus = [{**H100, "mig_enabled": True, "mig_devices": [MIG_1G] * 7}, {**H100, "mig_enabled": True, "mig_devices": []}]
    labels = gfd_labels(gpus, mig_strategy="single")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.memory"]) == ("0", "0", "0")
    # GFD overwrites product, count, replicas and memory only; the rest stays as the full-GPU labels set it.
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.family"] == "hopper"


def test_graphics_and_mixed_classes():
    vga = {**H100, "pci_class": "0300"}
    assert gfd_labels([vga])["nvidia.com/gpu.mode"] == "graphics"
    assert gfd_labels([vga, H100])["nvidia.com/gpu.mode"] == "unknown"


def test_no_compute_capability_omits_architecture_labels():
    labels = gfd_labels([{"name": "Mystery", "pci_class": "0302"}])
    assert "nvidia.com/gpu.family" not in labels and "nvidia.com/gpu.memory" not in labels


@pytest.mark.parametrize(
    ("sharing", "mig", "message"),
    [
        ({"strategy": "timeslicing", "replicas": 2}, "none", "sharing strategy 'timeslicing' is not one of none, time-slicing, mps"),
        ({"strategy": "none", "replicas": 1}, "dual", "MIG strategy 'dual' is not one of none, single, mixed"),
        ({"strategy": "mps", "replicas": 1}, "none", "needs replicas of at least 2"),
        ({"strategy": "none", "replicas": 0}, "none", "must be an integer of at least 1"),
    ],
)
def test_bad_strategies_are_named(sharing, mig, message):
    with pytest.raises(ValueError, match=message):
        gfd_labels([H100], sharing=sharing, mig_strategy=mig)
