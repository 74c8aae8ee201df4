"""lab/interrupt.py: the command is killed, with its whole process group, the moment the check passes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.interrupt import kill_group, run_until


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of someone else still answers kill(0): read its state.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_the_group_is_killed_once_the_check_passes(tmp_path):
    flag = tmp_path / "flag"
    pids = tmp_path / "pids"
    # The command and a child of its own (as ansible-playbook's forks and SSH clients are): both must go.
    script = f"sleep 60 & echo $! > {pids}; echo $$ >> {pids}; sleep 0.3; touch {flag}; wait"
    result = run_until(["sh", "-c", script], f"test -e {flag}", log=tmp_path / "out.log", interval=0.05, timeout=30)
    assert result["killed_after_s"] < 30 and result["checks"] >= 1
    deadline = time.monotonic() + 5
    listed = [int(p) for p in pids.read_text().split()]
    assert len(listed) == 2
    while any(alive(p) for p in listed) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in listed)


def test_a_command_that_ends_first_is_an_error(tmp_path):
    with pytest.raises(LabError, match=r"ended \(exit 3\) before the condition held"):
        run_until(["sh", "-c", "echo done; exit 3"], "false", log=tmp_path / "out.log", interval=0.05)
    assert (tmp_path / "out.log").read_text() == "done\n"


def test_a_check_that_never_passes_times_out_and_kills(tmp_path):
    pid_file = tmp_path / "pid"
    with pytest.raises(LabError, match="did not hold within"):
        run_until(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"], "false", log=tmp_path / "out.log",
                  interval=0.05, timeout=0.5)
    assert not alive(int(pid_file.read_text()))


def test_a_child_that_left_the_group_is_killed_too(tmp_path):
    """Ansible's workers call setsid(): a kill of the group alone left them running after every interrupted run."""
    flag = tmp_path / "flag"
    pids = tmp_path / "pids"
    script = f"setsid sleep 60 & echo $! > {pids}; sleep 0.3; touch {flag}; wait"
    run_until(["sh", "-c", script], f"test -e {flag}", log=tmp_path / "out.log", interval=0.05, timeout=30)
    child = int(pids.read_text().split()[0])
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_a_process_forking_all_the_while_leaves_nothing_behind(tmp_path):
    """Children born while the kill runs were reparented to init, out of reach: the tree is stopped before it is killed."""
    marker = f"{time.monotonic_ns() % 1000000 / 1000 + 100:.3f}"
    proc = subprocess.Popen(["bash", "-c", f"while true; do setsid sleep {marker} & bash -c 'sleep {marker} & wait' & sleep 0.005; done"],
                            start_new_session=True)
    time.sleep(0.5)
    kill_group(proc.pid)
    proc.wait(timeout=10)

    def left() -> list[int]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if marker.encode() in cmdline.read_bytes():
                    found.append(int(cmdline.parent.name))
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left() == []
