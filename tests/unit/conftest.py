"""Hardware facts of the lab profiles, as gpu_info reads them, for the module_utils tests."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect

from lab.hardware import build_fake_nvml, load_profile, write_hardware


@pytest.fixture(scope="module")
def info_of(tmp_path_factory):
    lib = build_fake_nvml(tmp_path_factory.mktemp("cache"))
    cache: dict[str, dict] = {}

    def read(profile: str) -> dict:
        if profile not in cache:
            hw = tmp_path_factory.mktemp(profile)
            write_hardware(load_profile(profile), hw, "m", "6.8.0-45-generic", lib)
            nvml = hw / "nvml/libnvidia-ml.so.1"
            cache[profile] = collect(str(hw), str(nvml) if nvml.exists() else None, {}, "none")
        return cache[profile]

    return read
