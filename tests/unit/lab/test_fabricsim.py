"""The lab's Fabric Manager stand-in: it fails on a driver mismatch as the daemon does, else completes the fabric."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import fabricsim


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    """A hardware root with the fake NVML's fabric file, and a daemon binary that reports 580.178.04."""
    hw = tmp_path / "hw"
    (hw / "nvml").mkdir(parents=True)
    (hw / "nvml/fabric").write_text("not_started\n")
    binary = tmp_path / "nv-fabricmanager"
    binary.write_text("#!/bin/sh\necho 'Fabric Manager version is : 580.178.04'\n")
    binary.chmod(0o755)
    config = tmp_path / "fabricmanager.cfg"
    log = tmp_path / "fm.log"
    config.write_text(f"LOG_LEVEL=4\nLOG_FILE_NAME={log}\n")
    monkeypatch.setitem(fabricsim.DAEMONS, "fabricmanager", ("nvidia-fabricmanager.service", str(binary), str(config), "/nonexistent"))
    return hw, log


def loaded(hw: Path, version: str) -> None:
    (hw / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
    (hw / "proc/driver/nvidia/version").write_text(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build\n")


def test_matching_driver_completes_the_fabric(daemon):
    hw, log = daemon
    loaded(hw, "580.178.04")
    assert fabricsim.start("fabricmanager", str(hw)) == 0
    assert (hw / "nvml/fabric").read_text() == "completed 0\n"
    assert "Successfully configured all the available NVSwitches" in log.read_text()


def test_a_mismatched_driver_fails_and_leaves_the_fabric(daemon):
    hw, log = daemon
    loaded(hw, "550.54.15")
    assert fabricsim.start("fabricmanager", str(hw)) == 1
    assert (hw / "nvml/fabric").read_text() == "not_started\n"
    assert "580.178.04 does not match the loaded NVIDIA driver version 550.54.15" in log.read_text()


def test_no_driver_loaded_fails(daemon):
    hw, log = daemon
    assert fabricsim.start("fabricmanager", str(hw)) == 1
    assert "the driver is not loaded" in log.read_text()


def test_usage():
    assert fabricsim.main(["fabric.py", "start", "nvlsm"]) == 2
    assert fabricsim.main(["fabric.py", "stop", "fabricmanager"]) == 0


def test_a_planted_fault_fails_with_its_text_and_leaves_the_fabric_in_progress(daemon):
    hw, log = daemon
    loaded(hw, "580.178.04")
    (hw / fabricsim.FAULT_NAME).write_text("NVSwitch 0000:05:00.0 failed to train its links\n")
    assert fabricsim.start("fabricmanager", str(hw)) == 1
    assert (hw / "nvml/fabric").read_text() == "in_progress\n"
    assert "[ERROR] [gpuops lab stand-in] NVSwitch 0000:05:00.0 failed to train its links" in log.read_text()
