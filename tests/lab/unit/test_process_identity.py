"""Stopping by a recorded PID only while it is still the recorded process, and a machine whose supervisor died at once.

PIDs come round again (pid_max 32768 here), so a PID the lab recorded may name someone else's process by the time
the lab stops it. These tests stand a live process of ours in for "someone else": the lab must leave it running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from lab import toolkit
from lab.cluster import Cluster, ClusterState
from lab.errors import LabError
from lab.machines import NO_CONSOLE_OUTPUT, Lab, Machine, process_start, same_process, wait_gone


@pytest.fixture
def bystander():
    """A process that is not the one a state file recorded, though it may now carry the recorded PID."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_process_is_known_by_its_pid_and_start(bystander):
    start = process_start(bystander.pid)
    assert isinstance(start, int) and start > 0
    assert same_process(bystander.pid, start)
    assert not same_process(bystander.pid, start + 1)
    assert not same_process(bystander.pid, None)
    # Another process on the recorded PID counts as the recorded one being gone, at once.
    assert wait_gone(bystander.pid, 5.0, start + 1)
    assert not wait_gone(bystander.pid, 0.3, start)


def test_a_process_that_exited_has_no_start():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert process_start(proc.pid) is None


def test_cluster_down_stops_the_recorded_process_and_not_one_on_a_reused_pid(tmp_path, bystander):
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        cluster = Cluster(tmp_path)
        state = ClusterState(kwokctl=str(tmp_path / "no-kwokctl"), workdir=str(tmp_path / "kwok"))
        state.record("devplugin-sim", ours.pid)
        # What an older run recorded for nfd-master; its PID now belongs to the bystander.
        state.pids["nfd-master"] = bystander.pid
        state.starts["nfd-master"] = process_start(bystander.pid) + 1
        # A component recorded without a start (a state from before starts were kept): never signalled.
        state.pids["etcd"] = bystander.pid
        cluster.save(state)

        assert cluster.status()["components"]["nfd-master"]["running"] is False
        assert cluster.status()["components"]["devplugin-sim"]["running"] is True
        cluster.down(progress=lambda _msg: None)

        # down() reaps it (wait_gone), so its status is not ours to read here: it is enough that it is gone.
        assert ours.wait(timeout=10) is not None
        assert process_start(ours.pid) is None
        assert bystander.poll() is None
        assert not cluster.dir.exists()
    finally:
        if ours.poll() is None:
            ours.kill()
            ours.wait()


def test_toolkit_down_leaves_a_process_on_the_servers_reused_pid(tmp_path, bystander):
    toolkit._state(tmp_path).write_text(json.dumps({"pid": bystander.pid, "start": process_start(bystander.pid) + 1}))
    assert toolkit.status(tmp_path)["running"] is False
    assert toolkit.down(tmp_path) is False
    assert bystander.poll() is None
    assert not toolkit._state(tmp_path).exists()


def test_a_supervisor_that_died_before_its_first_line_is_named(tmp_path, monkeypatch):
    lab = Lab(tmp_path / "state")
    machine = Machine(name="m1", distro="noble", port=1, directory=str(tmp_path / "m1"))
    (tmp_path / "m1" / "root").mkdir(parents=True)
    # A supervisor that is killed before it logs anything: an empty console log, a SIGTERM exit.
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")
    silent.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(silent))
    lab.supervise(machine, ["sleep", "60"], [])
    monkeypatch.undo()
    os.kill(machine.pid, signal.SIGTERM)
    with pytest.raises(LabError, match=f"exited while booting: {NO_CONSOLE_OUTPUT} \\(supervisor killed by SIGTERM\\)"):
        lab.wait_ready(machine, timeout=5)


def test_a_supervisor_is_recognised_as_soon_as_supervise_returns(tmp_path):
    """Popen returns while the child is still in execve, and its /proc/PID/cmdline reads empty for a moment: 97 of 100
    supervisors started here were not recognised right away before supervise() waited for it, and on a loaded CI host a
    machine was taken for one that had exited while booting."""
    lab = Lab(tmp_path / "state")
    for i in range(20):
        machine = Machine(name=f"m{i}", distro="noble", port=1, directory=str(tmp_path / f"m{i}"))
        (tmp_path / f"m{i}" / "root").mkdir(parents=True)
        lab.supervise(machine, ["sh", "-c", "exec sleep 60", "-D", f"{machine.directory}/root"], [])
        try:
            assert lab.is_ours(machine), i
        finally:
            os.kill(machine.pid, signal.SIGTERM)
            assert wait_gone(machine.pid, 10.0)
