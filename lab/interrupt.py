"""Interrupted runs (issue 23): start a command, and kill it once a condition holds on the lab.

The lab tests kill `ansible-playbook` in the middle of a driver install or a runtime restart and then run it
again. A real interruption is a whole controller going away - AWX cancelling a job, a laptop closing - so the
command starts in a session of its own and the whole process group (the playbook, its forks, their SSH
clients) gets SIGKILL: nothing on the controller side runs a cleanup. What the managed node does then (a
dpkg left running, a restart systemd finishes on its own) is the node's real behaviour, which the re-run
has to cope with.

The condition is a shell command run every `interval` seconds on this machine (typically `python -m lab
ssh MACHINE -- test ...`); the first time it exits 0 the command is killed. The command ending first, or the
timeout passing, is an error: the test meant to interrupt something and did not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .errors import LabError
from .machines import same_process


def descendants(pid: int) -> list[tuple[int, int]]:
    """Every process below pid, as (pid, start) pairs (machines.process_start), read from /proc."""
    # One read of each /proc/PID/stat gives the parent and the start; a zombie (state Z) has no start, as in
    # machines.process_start.
    children: dict[int, list[tuple[int, int | None]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        start = None if fields[0] == "Z" else int(fields[19])
        children.setdefault(int(fields[1]), []).append((int(stat.parent.name), start))
    found: list[tuple[int, int]] = []
    todo = list(children.get(pid, []))
    while todo:
        child, start = todo.pop()
        if start is not None:
            found.append((child, start))
        todo.extend(children.get(child, []))
    return found


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by pid (started with start_new_session), if it is still there, and every process
    below pid that left the group: Ansible's worker processes call setsid(), so a group kill missed them, and each
    interrupted run left its worker sleeping on a dead machine's SSH (found after CI, parented to init).

    The group and each process below pid are stopped (SIGSTOP) first, until a read of /proc finds none that is not:
    a stopped process forks no more, so nothing is born between the read and the kill and reparented to init, out of
    reach (one ansible-playbook was once found left after the test that kills a run)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGSTOP)
    stopped: dict[int, int] = {}
    for _round in range(50):
        below = [(child, start) for child, start in descendants(pid) if stopped.get(child) != start]
        if not below:
            break
        for child, start in below:
            if same_process(child, start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGSTOP)
            stopped[child] = start
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for child, start in stopped.items():
        if same_process(child, start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def run_until(command: list[str], until: str, *, log: Path, timeout: float = 900.0, interval: float = 0.5,
              clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict:
    """Run command (output to log) and kill its process group when `until` first exits 0.

    Returns {"killed_after_s": seconds, "checks": n}. Raises LabError when the command ends first or the
    timeout passes (the group is killed then too).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    start = clock()
    checks = 0
    try:
        while True:
            rc = proc.poll()
            if rc is not None:
                raise LabError(f"{command[0]} ended (exit {rc}) before the condition held ({until}); its output is in {log}")
            checks += 1
            if subprocess.run(["sh", "-c", until], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              check=False).returncode == 0:
                elapsed = clock() - start
                kill_group(proc.pid)
                proc.wait()
                return {"killed_after_s": round(elapsed, 1), "checks": checks, "log": str(log)}
            if clock() - start > timeout:
                raise LabError(f"the condition ({until}) did not hold within {timeout:.0f}s; {command[0]} killed, its output is in {log}")
            sleep(interval)
    finally:
        if proc.poll() is None:
            kill_group(proc.pid)
            proc.wait()
