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
