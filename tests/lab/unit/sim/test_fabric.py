"""The lab's Fabric Manager stand-in: it fails on a driver mismatch as the daemon does, else completes the fabric."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lab.sim import fabric


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
    monkeypatch.setitem(fabric.DAEMONS, "fabricmanager", ("nvidia-fabricmanager.service", str(binary), str(config), "/nonexistent"))
    return hw, log


def loaded(hw: Path, version: str) -> None:
    (hw / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
    (hw / "proc/driver/nvidia/version").write_text(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build\n")


def test_matching_driver_completes_the_fabric(daemon):
    hw, log = daemon
    loaded(hw, "580.178.04")
    assert fabric.start("fabricmanager", str(hw)) == 0
    assert (hw / "nvml/fabric").read_text() == "completed 0\n"
    assert "Successfully configured all the available NVSwitches" in log.read_text()


def test_a_mismatched_driver_fails_and_leaves_the_fabric(daemon):
    hw, log = daemon
    loaded(hw, "550.54.15")
    assert fabric.start("fabricmanager", str(hw)) == 1
    assert (hw / "nvml/fabric").read_text() == "not_started\n"
    assert "580.178.04 does not match the loaded NVIDIA driver version 550.54.15" in log.read_text()


def test_no_driver_loaded_fails(daemon):
    hw, log = daemon
    assert fabric.start("fabricmanager", str(hw)) == 1
    assert "the driver is not loaded" in log.read_text()


def test_usage():
    assert fabric.main(["fabric.py", "start", "nvlsm"]) == 2
    assert fabric.main(["fabric.py", "stop", "fabricmanager"]) == 0


def test_a_planted_fault_fails_with_its_text_and_leaves_the_fabric_in_progress(daemon):
    hw, log = daemon
    loaded(hw, "580.178.04")
    (hw / fabric.FAULT_NAME).write_text("NVSwitch 0000:05:00.0 failed to train its links\n")
    assert fabric.start("fabricmanager", str(hw)) == 1
    assert (hw / "nvml/fabric").read_text() == "in_progress\n"
    assert "[ERROR] [gpuops lab stand-in] NVSwitch 0000:05:00.0 failed to train its links" in log.read_text()


def test_the_daemon_s_version_is_its_package_s_where_dpkg_knows_the_binary(daemon, tmp_path, monkeypatch):
    """IMEX of branch 620 prints its own version (2.0.0.rel49), not the driver's: the package's version is the daemon's."""
    hw, log = daemon
    binary = fabric.DAEMONS["fabricmanager"][1]
    Path(binary).write_text("#!/bin/sh\necho 'IMEX version is: 2.0.0.rel49'\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # dpkg-query as dpkg answers: -S names the package that installed the file (with its architecture), -W its version.
    fake = bin_dir / "dpkg-query"
    fake.write_text(f"""#!/bin/sh
case "$1" in
  -S) [ "$2" = "{binary}" ] && echo "nvidia-imex-620:amd64: {binary}" && exit 0; exit 1 ;;
  -W) [ "$4" = "nvidia-imex-620:amd64" ] && printf '620.70.06-0ubuntu0.24.04.1' && exit 0; exit 1 ;;
esac
exit 2
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert fabric.daemon_version(binary) == "620.70.06"
    loaded(hw, "620.70.06")
    assert fabric.start("fabricmanager", str(hw)) == 0
    loaded(hw, "580.196.07")
    assert fabric.start("fabricmanager", str(hw)) == 1
    assert "version 620.70.06 does not match the loaded NVIDIA driver version 580.196.07" in log.read_text()
