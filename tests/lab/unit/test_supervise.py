"""The machine supervisor with fake children (tiny shell scripts), never a real systemd-nspawn."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.machines import Lab, Machine, process_alive, wait_gone
from lab.supervise import REBOOT_STATUS, Options, RestartBudget, Supervisor, exit_status, parse_args, should_restart

REPO = Path(__file__).resolve().parents[3]


def reboots_then(tmp_path: Path, reboots: int, final: int) -> list[str]:
    """A fake nspawn: exits 133 `reboots` times (counted in a file), then with `final`."""
    script = tmp_path / "fake-nspawn"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {tmp_path}/count 2>/dev/null || echo 0)\n"
        f"echo $((n + 1)) > {tmp_path}/count\n"
        f"echo $$ >> {tmp_path}/pids\n"
        f'[ "$n" -lt {reboots} ] && exit {REBOOT_STATUS}\n'
        f"exit {final}\n"
    )
    script.chmod(0o755)
    return [str(script)]


def test_should_restart_only_on_a_reboot_nobody_asked_to_stop():
    assert should_restart(REBOOT_STATUS, stopping=False)
    assert not should_restart(REBOOT_STATUS, stopping=True)
    assert not should_restart(0, stopping=False)
    assert not should_restart(1, stopping=False)


def test_exit_status_reports_a_signal_as_a_shell_does():
    assert exit_status(0) == 0
    assert exit_status(133) == 133
    assert exit_status(-signal.SIGKILL) == 128 + signal.SIGKILL


def test_restart_budget_bounds_restarts_per_window():
    budget = RestartBudget(limit=2, window=60.0)
    assert budget.allow(0.0)
    assert budget.allow(1.0)
    assert not budget.allow(2.0)
    assert budget.allow(60.5)  # the first restart has left the window


def test_a_reboot_starts_the_child_again_and_a_poweroff_ends_the_supervisor(tmp_path):
    log = io.StringIO()
    pid_file = tmp_path / "nspawn.pid"
    sup = Supervisor(reboots_then(tmp_path, reboots=1, final=0), pid_file=pid_file, log=log)
    assert sup.run() == 0
    assert sup.starts == 2
    pids = (tmp_path / "pids").read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1]
    assert f"machine rebooted (pid {pids[0]} exited with status 133): started it again as pid {pids[1]} (boot 2)" in log.getvalue()
    assert not pid_file.exists()


def test_any_other_exit_ends_the_supervisor_with_that_status(tmp_path):
    sup = Supervisor(reboots_then(tmp_path, reboots=0, final=3), log=io.StringIO())
    assert sup.run() == 3
    assert sup.starts == 1


def test_a_reboot_loop_is_given_up(tmp_path):
    log = io.StringIO()
    sup = Supervisor(reboots_then(tmp_path, reboots=100, final=0), budget=RestartBudget(limit=2, window=60.0), log=log)
    assert sup.run() == REBOOT_STATUS
    assert sup.starts == 3
    assert "more than 2 times within 60s: giving up" in log.getvalue()


def test_a_stop_request_is_forwarded_and_never_restarts(tmp_path):
    log = io.StringIO()
    sup = Supervisor(reboots_then(tmp_path, reboots=5, final=0), log=log)
    sup.handle_signal(signal.SIGTERM)  # before any child: nothing to forward to, but remembered
    # The child is sent SIGTERM as soon as it starts (the fake does not trap it, so it dies of it), unless the tiny
    # script already exited with the reboot status (a loaded machine): the signal is then not sent to a reaped PID,
    # and a reboot after a stop request ends the supervisor with 0. Either way it is never started again.
    assert sup.run() in (128 + signal.SIGTERM, 0)
    assert sup.starts == 1
    assert "after a stop request" in log.getvalue()


def test_cgroups_are_made_afresh_for_every_boot(tmp_path):
    cgroup = tmp_path / "cg"
    (cgroup / "payload/leftover").mkdir(parents=True)
    sup = Supervisor(["true"], cgroups=[cgroup], log=io.StringIO())
    sup.prepare_cgroups()
    assert cgroup.is_dir() and not any(cgroup.iterdir())


def test_parse_args_splits_options_from_the_command():
    opts = parse_args(["--pid-file", "/m/nspawn.pid", "--cgroup", "/a", "--cgroup", "/b", "--max-restarts", "3", "--", "nspawn", "-D", "/m/root"])
    assert opts == Options(cmd=["nspawn", "-D", "/m/root"], pid_file=Path("/m/nspawn.pid"), cgroups=[Path("/a"), Path("/b")], max_restarts=3, window=60.0)
    for bad in (["nspawn"], ["--"], ["--bogus", "1", "--", "x"], ["--window", "--", "x"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def fake_nspawn_cmd(tmp_path: Path, trap: str) -> list[str]:
    """A child whose argv reads like the machine's nspawn (argv[0] systemd-nspawn, its root in argv)."""
    body = f"trap {trap} TERM; echo up > {tmp_path}/up; while sleep 0.05; do :; done"
    return ["bash", "-c", 'exec -a systemd-nspawn bash -c "$0" "$@"', body, "-D", f"{tmp_path}/root"]


def wait_for(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_sigterm_to_the_supervisor_process_reaches_the_child_and_both_exit(tmp_path):
    got = tmp_path / "got-term"
    cmd = fake_nspawn_cmd(tmp_path, f"'echo term > {got}; exit 0'")
    pid_file = tmp_path / "nspawn.pid"
    with (tmp_path / "log").open("wb") as log:
        sup = subprocess.Popen([sys.executable, "-m", "lab.supervise", "--pid-file", str(pid_file), "--", *cmd], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        child = int(wait_for(pid_file))
        wait_for(tmp_path / "up")
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(timeout=10) == 0
        assert got.read_text().strip() == "term"
        assert not process_alive(child)
        assert not pid_file.exists()
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()


def test_stop_kills_a_supervisor_and_a_child_that_ignore_sigterm(tmp_path):
    directory = tmp_path
    (directory / "root").mkdir()
    machine = Machine(name="fake", distro="noble", port=1, directory=str(directory))
    lab = Lab(tmp_path / "state")
    lab.supervise(machine, fake_nspawn_cmd(tmp_path, "''"), [])
    supervisor = machine.pid
    child = 0
    try:
        child = int(wait_for(directory / "nspawn.pid"))
        wait_for(tmp_path / "up")
        assert lab.is_ours(machine)
        assert lab.nspawn_pid(machine) == child
        # The supervisor forwards SIGTERM to a child that ignores it and keeps waiting: stop() must escalate.
        lab.stop(machine, timeout=1.0)
        assert not process_alive(supervisor)
        assert not process_alive(child)
        assert not directory.exists()
    finally:
        for pid in (supervisor, child):
            if pid and process_alive(pid):
                os.kill(pid, signal.SIGKILL)
                wait_gone(pid, 5.0)


def test_is_ours_wants_the_supervisor_of_this_machine(tmp_path):
    (tmp_path / "root").mkdir()
    machine = Machine(name="fake", distro="noble", port=1, directory=str(tmp_path))
    other = Machine(name="other", distro="noble", port=2, directory=str(tmp_path / "other"))
    lab = Lab(tmp_path / "state")
    lab.supervise(machine, fake_nspawn_cmd(tmp_path, "'exit 0'"), [])
    try:
        wait_for(tmp_path / "nspawn.pid")
        assert lab.is_ours(machine)
        other.pid = machine.pid
        assert not lab.is_ours(other)
    finally:
        os.kill(machine.pid, signal.SIGTERM)
        assert wait_gone(machine.pid, 10.0)
