"""The host path of MIG reconfiguration (the plan of module_utils/_common/mig.py, applied by node/mig.py) against the lab's fake NVML, which keeps
MIG changes per machine: mode changes (pending while a process holds the GPU), GPU and compute instances
at NVML's placements, read back by gpu_info, and reset by the lab's boot."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.mig import gpu_models, mig_parted_config, plan
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import slim
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import mig
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect

from lab.sim import boot
from lab.sim.hardware import build_fake_nvml, load_profile, write_hardware


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory):
    return build_fake_nvml(tmp_path_factory.mktemp("nvml-cache"))


@pytest.fixture
def a100(tmp_path, fake_nvml):
    hw = tmp_path / "hw"
    write_hardware(load_profile("a100-pcie-mig"), hw, "m1", "6.8.0-45-generic", fake_nvml)
    return hw


def read(hw):
    return collect(str(hw), str(hw / "nvml/libnvidia-ml.so.1"))


def layout(facts) -> list[tuple[bool, bool, list[str]]]:
    return [(g["mig"]["current"], g["mig"]["pending"], sorted(str(d["profile"]) for d in g["mig"]["devices"]))
            for g in facts["nvml"]["gpus"]]


def configs(facts, custom=None):
    return mig_parted_config(gpu_models(slim(facts)), custom)


def run(hw, name, custom=None):
    facts = read(hw)
    errors, plans = plan(facts, configs(facts, custom), name, "gpuops_mig_reconfigure_configs")
    assert errors == []
    log: list[str] = []
    pending = mig.apply(plans, str(hw / "nvml/libnvidia-ml.so.1"), log.append)
    return plans, pending, log


BALANCED = ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]


def test_disabled_balanced_and_back_then_nothing_to_do(a100):
    assert layout(read(a100)) == [(True, True, BALANCED), (False, False, [])]
    plans, pending, _log = run(a100, "all-disabled")
    assert [p["change"] for p in plans] == [True, False] and pending == []
    assert layout(read(a100)) == [(False, False, []), (False, False, [])]
    plans, pending, _log = run(a100, "all-balanced")
    assert [p["change"] for p in plans] == [True, True] and pending == []
    after = read(a100)
    assert layout(after) == [(True, True, BALANCED), (True, True, BALANCED)]
    # New devices, new UUIDs; the 3g.40gb sits at memory slice 4, the only place it leaves room for the rest.
    assert len({d["uuid"] for g in after["nvml"]["gpus"] for d in g["mig"]["devices"]}) == 8
    assert "migstate" in {p.name for p in (a100 / "nvml").iterdir()}
    again, _pending, _log = run(a100, "all-balanced")
    assert [p["change"] for p in again] == [False, False]
    run(a100, "all-7g.80gb")
    assert layout(read(a100)) == [(True, True, ["7g.80gb"]), (True, True, ["7g.80gb"])]


def test_a_held_gpu_leaves_the_mode_pending_until_the_boot(a100):
    dev = a100 / "nvml/dev"
    dev.mkdir()
    (dev / "nvidia1").touch()
    holder = subprocess.Popen(["sh", "-c", f"exec sleep 30 3<{dev / 'nvidia1'}"])
    try:
        for _attempt in range(50):  # until the shell has become sleep with the file open
            if any(p.resolve() == dev / "nvidia1" for p in Path(f"/proc/{holder.pid}/fd").iterdir()):
                break
            time.sleep(0.05)
        _plans, pending, log = run(a100, "all-balanced")
    finally:
        holder.kill()
        holder.wait()
    assert pending == [1]
    assert any("GPU 1 (0000:ca:00.0): MIG mode enable is pending" in line for line in log)
    assert layout(read(a100)) == [(True, True, BALANCED), (False, True, [])]
    facts = read(a100)
    _errors, plans = plan(facts, configs(facts), "all-balanced", "v")
    assert [(p["change"], p["pending"]) for p in plans] == [(False, False), (True, True)]
    assert boot.reset_mig(str(a100))
    # The boot applies the mode and, as a reset does, drops GPU 0's instances: the next run creates them.
    assert layout(read(a100)) == [(True, True, []), (True, True, [])]
    run(a100, "all-balanced")
    assert layout(read(a100)) == [(True, True, BALANCED), (True, True, BALANCED)]


def test_bad_configs_are_refused_before_any_change(a100):
    facts = read(a100)
    errors, plans = plan(facts, configs(facts), "all-3g", "gpuops_mig_reconfigure_configs")
    assert plans == [] and "MIG config 'all-3g': not a config of gpuops_mig_reconfigure_configs" in errors[0]
    custom = {"too-much": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}]}
    errors, _plans = plan(facts, configs(facts, custom), "too-much", "gpuops_mig_reconfigure_configs")
    assert "2 x 3g.40gb + 1 x 1g.10gb do not fit together" in errors[0]
    custom = {"h100": [{"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}
    errors, _plans = plan(facts, configs(facts, custom), "h100", "v")
    assert errors == ["the MIG config 'h100' has no entry for this node's GPUs (0x20B510DE)"]
    assert plan(facts, {"configs": {}}, "x", "v")[0][0].startswith("v: must be a mig-parted config")
    assert layout(read(a100))[0] == (True, True, BALANCED)


def test_no_mig_capable_gpu_is_named(tmp_path, fake_nvml):
    write_hardware(load_profile("v100"), tmp_path / "hw", "m1", "6.8.0-45-generic", fake_nvml)
    facts = read(tmp_path / "hw")
    errors, _plans = plan(facts, {"version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": False}]}},
                          "all-disabled", "v")
    assert errors == ["no GPU on this node can do MIG (Tesla V100-SXM2-16GB)"]


def test_placement_search_finds_the_only_layout():
    # A100: 3g at 0 or 4 (size 4), 2g at 0/2/4, 1g at 0..6; largest-first at the first free start would
    # put 3g at 0, 2g at 4, one 1g at 6 and have no room for the second.
    one = ([0, 1, 2, 3, 4, 5, 6], 1)
    assert mig.place([one, one, ([0, 2, 4], 2), ([0, 4], 4)]) == [2, 3, 0, 4]
    assert mig.place([([0, 4], 4), ([0, 4], 4), one]) is None
