"""lab/hostlock.py: a second holder waits until the first lets go, across processes."""

from __future__ import annotations

import subprocess
import sys
import time

from lab.hostlock import host_lock


def test_a_second_process_waits_for_the_lock(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_LAB_CACHE", str(tmp_path))
    stamp = tmp_path / "second"
    code = (
        "import time; from pathlib import Path; from lab.hostlock import host_lock\n"
        f"with host_lock('t'):\n    Path({str(stamp)!r}).write_text(str(time.monotonic()))\n"
    )
    with host_lock("t"):
        proc = subprocess.Popen([sys.executable, "-c", code], env={"GPUOPS_LAB_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"})
        time.sleep(0.5)
        assert not stamp.exists()  # still waiting
        released = time.monotonic()
    assert proc.wait(timeout=30) == 0
    assert float(stamp.read_text()) >= released
    assert (tmp_path / "locks/t.lock").exists()


def test_the_cluster_toolchain_is_built_by_one_builder_at_a_time(tmp_path, monkeypatch):
    """ensure_toolchain holds the host's cluster-build lock while it builds: each build writes a fixed .tmp directory,
    which a second builder at the same time would empty under the first."""
    import fcntl

    from lab import toolchain

    monkeypatch.setenv("GPUOPS_LAB_CACHE", str(tmp_path))
    held = []

    def build(_log):
        with (tmp_path / "locks/cluster-build.lock").open("a") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(False)
                fcntl.flock(fh, fcntl.LOCK_UN)
            except BlockingIOError:
                held.append(True)
        return tmp_path

    for name in ("build_kubernetes", "build_etcd", "build_kwok", "build_nfd"):
        monkeypatch.setattr(toolchain, name, build)
    toolchain.ensure_toolchain(progress=lambda _msg: None)
    assert held == [True] * 4
