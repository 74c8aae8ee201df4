"""NVIDIA's own GPU Feature Discovery, built from its release (lab/nodebuild.py), against the fake NVML.

The lab's GFD stand-in (lab/sim/gfd.py) and the collection's model of GFD (module_utils/cluster/gfd.py) were only ever
compared with each other. Here the real binary labels the simulated HGX H100 (`--oneshot`, labels to a file, no API
server) and both are held to what it wrote. Where they differ on purpose, the difference is named below.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd import node_gfd_labels
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect

from lab.images import cache_dir
from lab.nodebuild import build_device_plugin
from lab.sim.gfd import gfd_labels
from lab.sim.hardware import build_fake_nvml, load_profile, write_hardware

# What the real GFD reads outside NVML, which the fake hardware tree cannot give it on this host: the machine type
# (/sys/class/dmi) and the GPUs' PCI class for gpu.mode (the host's /sys/bus/pci, where the simulated GPUs are not);
# the collection reads the class from the simulated tree (compute). vgpu.present (false here) is not modelled.
REAL_ONLY = {"nvidia.com/gpu.machine", "nvidia.com/vgpu.present"}
HOST_SIDE = {"nvidia.com/gpu.mode"}


@pytest.fixture(scope="module")
def real_labels(tmp_path_factory) -> tuple[dict[str, str], dict]:
    tmp = tmp_path_factory.mktemp("real-gfd")
    binary = build_device_plugin(tmp / "build.log") / "gpu-feature-discovery"
    profile = load_profile("hgx-h100")
    hw = tmp / "hw"
    write_hardware(profile, hw, "node-1", "6.8.0-45-generic", build_fake_nvml(cache_dir()))
    out = tmp / "labels"
    res = subprocess.run([str(binary), "--oneshot", "--no-timestamp", "--use-node-feature-api=false", f"--output-file={out}"],
                         env={**os.environ, "LD_LIBRARY_PATH": str(hw / "nvml")}, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    labels = dict(line.split("=", 1) for line in out.read_text().split())
    return labels, collect(str(hw), str(hw / "nvml/libnvidia-ml.so.1"))


def test_the_real_gfd_reads_the_fake_nvml(real_labels):
    labels, _info = real_labels
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.54.15"
    assert labels["nvidia.com/gpu.family"] == "hopper"


def test_the_collections_model_of_gfd_agrees_with_the_real_one(real_labels):
    labels, info = real_labels
    model = node_gfd_labels(info, None, "none")[0]
    assert {k: v for k, v in labels.items() if k not in REAL_ONLY | HOST_SIDE} == {k: v for k, v in model.items() if k not in HOST_SIDE}
    assert model["nvidia.com/gpu.mode"] == "compute"


def test_every_label_of_the_lab_stand_in_is_the_real_ones(real_labels):
    # The stand-in writes a subset (no CUDA driver and runtime versions, no vgpu.present, machine or mode).
    labels, _info = real_labels
    stand_in = gfd_labels(load_profile("hgx-h100"), "none", None) or {}
    assert stand_in
    assert {k: labels.get(k) for k in stand_in} == stand_in
