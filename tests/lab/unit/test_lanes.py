"""The lanes of `make test` in CPU cgroups: where the cgroup goes, its weight, the CPU time, and a real run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab import lanes
from lab.cgroups import parse_own
from lab.lanes import Group, LaneResult, format_lanes, parse_mounts, plan, record, run_lane, v1_shares

# /proc/self/mounts and /proc/self/cgroup of this lab host (cgroup v1 with a v2 hierarchy beside, no controllers on it).
HYBRID_MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
HYBRID_OWN = "9:name=systemd:/\n4:memory:/process_api/x\n2:cpuacct:/\n1:cpu:/\n0::/\n"
# A systemd host on cgroup v1 mounts cpu and cpuacct together.
JOINED_MOUNTS = "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n"
JOINED_OWN = "4:cpu,cpuacct:/user.slice\n0::/user.slice/session-1.scope\n"
V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def test_weights_map_to_v1_shares():
    assert v1_shares(100) == 1024
    assert v1_shares(300) == 3072
    assert v1_shares(1) == 10
    assert v1_shares(10000) == 102400


def test_the_hierarchies_and_the_callers_place_in_them_are_read():
    assert parse_mounts(HYBRID_MOUNTS) == {"cpu": Path("/sys/fs/cgroup/cpu"), "cpuacct": Path("/sys/fs/cgroup/cpuacct"),
                                           "v2": Path("/sys/fs/cgroup/unified")}
    assert parse_own(HYBRID_OWN)["cpu"] == "/" and parse_own(HYBRID_OWN)["v2"] == "/"
    assert parse_mounts(JOINED_MOUNTS) == {"cpu": Path("/sys/fs/cgroup/cpu,cpuacct"),
                                           "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct")}
    assert parse_own(JOINED_OWN) == {"cpu": "/user.slice", "cpuacct": "/user.slice", "v2": "/user.slice/session-1.scope"}


def test_v1_is_used_where_cpu_and_cpuacct_are_mounted_under_the_callers_cgroup():
    group = plan(parse_mounts(HYBRID_MOUNTS), parse_own(HYBRID_OWN), "leaf")
    assert group == Group("v1", (Path("/sys/fs/cgroup/cpu/leaf"), Path("/sys/fs/cgroup/cpuacct/leaf")),
                          Path("/sys/fs/cgroup/cpu/leaf/cpu.shares"), Path("/sys/fs/cgroup/cpuacct/leaf/cpuacct.usage"))
    joined = plan(parse_mounts(JOINED_MOUNTS), parse_own(JOINED_OWN), "leaf")
    assert isinstance(joined, Group)
    assert joined.dirs == (Path("/sys/fs/cgroup/cpu,cpuacct/user.slice/leaf"),)


def test_v2_only_where_the_cpu_controller_is_delegated(tmp_path):
    (tmp_path / "app.slice").mkdir()
    mounts = {"v2": tmp_path}
    (tmp_path / "app.slice" / "cgroup.subtree_control").write_text("memory pids\n")
    assert plan(mounts, {"v2": "/app.slice"}, "leaf") == f"the cpu controller is not delegated to {tmp_path / 'app.slice'}"
    (tmp_path / "app.slice" / "cgroup.subtree_control").write_text("cpu memory pids\n")
    group = plan(mounts, {"v2": "/app.slice"}, "leaf")
    assert isinstance(group, Group) and group.kind == "v2" and group.weight_file == tmp_path / "app.slice/leaf/cpu.weight"
    assert plan({}, {}, "leaf") == "no cgroup cpu controller is mounted"


def test_v2_cpu_time_is_read_from_cpu_stat(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 90500000\nuser_usec 80000000\nsystem_usec 10500000\n")
    assert Group("v2", (tmp_path,), tmp_path / "cpu.weight", tmp_path / "cpu.stat").cpu_seconds() == 90.5


def test_a_lane_without_a_cgroup_still_runs_and_says_why(tmp_path):
    result = run_lane("x", 100, [sys.executable, "-c", "raise SystemExit(3)"], mounts_text="", own_text="")
    assert result == LaneResult(3, None, "no cgroup cpu controller is mounted")


def test_a_cgroup_that_cannot_be_made_leaves_nothing_and_the_lane_runs(tmp_path):
    # cpu's hierarchy is a directory, cpuacct's a plain file: the second mkdir fails, even as root.
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpuacct").write_text("")
    mounts = f"cgroup {tmp_path / 'cpu'} cgroup rw,cpu 0 0\ncgroup {tmp_path / 'cpuacct'} cgroup rw,cpuacct 0 0\n"
    result = run_lane("x", 100, [sys.executable, "-c", "pass"], mounts_text=mounts, own_text="2:cpuacct:/\n1:cpu:/\n")
    assert result.rc == 0 and result.cpu_seconds is None
    assert (result.note or "").startswith(f"cannot set up {tmp_path / 'cpuacct'}"), result.note
    assert list((tmp_path / "cpu").iterdir()) == [], "the cpu cgroup made before the failure was not removed"


def test_the_log_and_the_report_line(tmp_path):
    log = tmp_path / "lanes.tsv"
    record(log, "default", 300, LaneResult(0, 1623.4, None))
    record(log, "lab-test", 100, LaneResult(1, None, "no cgroup cpu controller is mounted"))
    assert format_lanes(log) == ("lanes: default (weight 300) 27.1 core-min; "
                                 "lab-test (weight 100) CPU not measured [no cgroup cpu controller is mounted]")
    assert format_lanes(tmp_path / "absent.tsv") is None


def _writable_cgroup() -> str | None:
    try:
        mounts, own = Path("/proc/self/mounts").read_text(), Path("/proc/self/cgroup").read_text()
    except OSError:
        return "no /proc"
    group = plan(parse_mounts(mounts), parse_own(own), f"gpuops-lane-probe-{os.getpid()}")
    if isinstance(group, str):
        return group
    why = lanes.make(group, 100)
    if why is None:
        lanes.remove(group.dirs)
    return why


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are made as root, as `make test` runs")
def test_a_real_lane_runs_in_its_cgroup_with_its_weight_and_counts_its_cpu_time(tmp_path):
    why = _writable_cgroup()
    if why is not None:
        pytest.fail(f"make test runs its lanes in cgroups, and this host has none to write: {why}")
    out = tmp_path / "out"
    # The command reads its own cgroups and weight, then burns a little CPU in a child (counted too).
    script = (
        "import pathlib, subprocess, sys\n"
        "own = pathlib.Path('/proc/self/cgroup').read_text()\n"
        "subprocess.run([sys.executable, '-c', 'import time\\nt=time.process_time()\\n"
        "while time.process_time() - t < 0.4: pass'], check=True)\n"
        f"pathlib.Path({str(out)!r}).write_text(own)\n"
    )
    result = run_lane("probe one", 250, [sys.executable, "-c", script])
    assert result.rc == 0 and result.note is None, result
    assert result.cpu_seconds is not None and result.cpu_seconds >= 0.4
    leaf = f"gpuops-lane-probe-one-{os.getpid()}"
    assert leaf in out.read_text()
    group = plan(parse_mounts(Path("/proc/self/mounts").read_text()), parse_own(Path("/proc/self/cgroup").read_text()), leaf)
    assert isinstance(group, Group) and not any(d.exists() for d in group.dirs), "the lane's cgroup was left behind"


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are made as root, as `make test` runs")
def test_the_weight_is_written(monkeypatch):
    seen = {}
    real = lanes.remove

    def capture(dirs, wait=10.0):
        group = plan(parse_mounts(Path("/proc/self/mounts").read_text()), parse_own(Path("/proc/self/cgroup").read_text()),
                     Path(dirs[0]).name)
        assert isinstance(group, Group)
        seen["weight"] = group.weight_file.read_text().strip()
        return real(dirs, wait)

    monkeypatch.setattr(lanes, "remove", capture)
    assert run_lane("w", 300, [sys.executable, "-c", "pass"]).rc == 0
    assert seen["weight"] in ("3072", "300")  # v1 shares or v2 weight


def test_the_cgroups_of_lanes_killed_before_their_cleanup_are_swept(tmp_path, monkeypatch):
    parent = tmp_path / "cpu"
    own = parent / "gpuops-lane-default-100"
    group = Group("v2", (own,), own / "cpu.weight", own / "cpu.stat")
    for name, procs in {"gpuops-lane-lab-test-111": "", "gpuops-lane-side-222": "", "gpuops-lane-busy-333": "4242\n",
                        "gpuops-lane-default-100": "", "machine-cgroup-444": ""}.items():
        (parent / name).mkdir(parents=True)
        (parent / name / "cgroup.procs").write_text(procs)
    monkeypatch.setattr(lanes, "remove_cgroup", lambda d, busy_for: __import__("shutil").rmtree(d))
    # 111 and 333 are gone, 222 still runs (another make test's lane), 100 is this lane's own.
    removed = lanes.sweep(group, alive=lambda pid: pid in (100, 222))
    assert removed == [parent / "gpuops-lane-lab-test-111"]
    left = ["gpuops-lane-busy-333", "gpuops-lane-default-100", "gpuops-lane-side-222", "machine-cgroup-444"]
    assert sorted(p.name for p in parent.iterdir()) == left


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are made as root, as `make test` runs")
def test_a_real_lane_sweeps_what_a_killed_lane_left(tmp_path):
    why = _writable_cgroup()
    if why is not None:
        pytest.fail(f"make test runs its lanes in cgroups, and this host has none to write: {why}")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mounts, own = parse_mounts(Path("/proc/self/mounts").read_text()), parse_own(Path("/proc/self/cgroup").read_text())
    stale = plan(mounts, own, f"gpuops-lane-killed-{gone.pid}")
    assert isinstance(stale, Group) and lanes.make(stale, 100) is None
    result = run_lane("sweeper", 100, [sys.executable, "-c", "pass"])
    assert result.rc == 0, result
    assert not any(d.exists() for d in stale.dirs), "the killed lane's cgroup was left"
