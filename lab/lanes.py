"""The lanes of `make test`, each in a CPU cgroup of its own: a weight for its share of the cores, and its CPU time.

On a 2-core machine the lanes (the first install, lab-test, the other scenarios) share the cores, and the first
install is the long pole. `nice` cannot give it the cores first: with the kernel's autogroup scheduling
(/proc/sys/kernel/sched_autogroup_enabled, on by default) every session is one scheduling entity of equal weight,
niced or not, and each lab machine, each SSH login on it and each cluster component starts a session of its own.
A cgroup is above that: the tasks in a cgroup other than the root one are not grouped by session, and the cgroup
weighs what its weight says against its siblings, with everything started inside it (machines and clusters too:
systemd-nspawn --keep-unit leaves the container in its caller's cgroup).

A lane's cgroup is made under the caller's own, in the cgroup v1 `cpu` hierarchy (cpu.shares) with the `cpuacct`
one for the CPU time, or in cgroup v2 (cpu.weight, cpu.stat) where the caller's cgroup delegates the cpu
controller. Where neither can be written (no root, a read-only /sys/fs/cgroup), the lane runs without one and says
so: the run is the same, only the weights and the CPU figure are missing.

Weights are on cgroup v2's scale: 100 is a default task's (v1: 1024 shares).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .cgroups import parse_own, remove_cgroup
from .supervise import process_alive

MOUNTS = Path("/proc/self/mounts")
OWN_CGROUPS = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class Group:
    """A lane's cgroup: the directories its processes go into, and where its weight and CPU time are."""

    kind: str  # "v1" or "v2"
    dirs: tuple[Path, ...]  # each gets the lane's processes
    weight_file: Path
    usage_file: Path

    def write_weight(self, weight: int) -> None:
        self.weight_file.write_text(f"{v1_shares(weight) if self.kind == 'v1' else weight}\n")

    def cpu_seconds(self) -> float:
        text = self.usage_file.read_text()
        if self.kind == "v1":
            return int(text.strip()) / 1e9  # cpuacct.usage: nanoseconds
        for line in text.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == "usage_usec":
                return int(fields[1]) / 1e6
        raise ValueError(f"no usage_usec in {self.usage_file}")


def v1_shares(weight: int) -> int:
    """cgroup v1's cpu.shares for a v2 weight (100 -> 1024), within v1's range."""
    return max(2, min(262144, round(weight * 1024 / 100)))


def parse_mounts(text: str) -> dict[str, Path]:
    """The mount points of the cgroup hierarchies: 'v2' for cgroup2, each v1 controller by its name."""
    found: dict[str, Path] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        where, fstype, options = Path(fields[1]), fields[2], fields[3].split(",")
        if fstype == "cgroup2":
            found.setdefault("v2", where)
        elif fstype == "cgroup":
            for option in options:
                if option in ("cpu", "cpuacct"):
                    found.setdefault(option, where)
    return found


def plan(mounts: dict[str, Path], own: dict[str, str], leaf: str) -> Group | str:
    """Where the lane's cgroup goes, or why there is none: v1 where the cpu and cpuacct hierarchies are mounted,
    else v2 where the caller's cgroup delegates the cpu controller (cgroup.subtree_control names it)."""
    if "cpu" in mounts and "cpuacct" in mounts and "cpu" in own and "cpuacct" in own:
        cpu = mounts["cpu"] / own["cpu"].lstrip("/") / leaf
        acct = mounts["cpuacct"] / own["cpuacct"].lstrip("/") / leaf
        dirs = (cpu,) if cpu == acct else (cpu, acct)
        return Group("v1", dirs, cpu / "cpu.shares", acct / "cpuacct.usage")
    if "v2" in mounts and "v2" in own:
        parent = mounts["v2"] / own["v2"].lstrip("/")
        try:
            delegated = "cpu" in (parent / "cgroup.subtree_control").read_text().split()
        except OSError as exc:
            return f"cannot read {parent / 'cgroup.subtree_control'}: {exc.strerror}"
        if not delegated:
            return f"the cpu controller is not delegated to {parent}"
        return Group("v2", (parent / leaf,), parent / leaf / "cpu.weight", parent / leaf / "cpu.stat")
    return "no cgroup cpu controller is mounted"


def make(group: Group, weight: int) -> str | None:
    """Create the lane's cgroup with its weight; None when made, else why not (what was made is removed)."""
    made: list[Path] = []
    try:
        for d in group.dirs:
            d.mkdir()
            made.append(d)
        group.write_weight(weight)
    except OSError as exc:
        remove(made)
        return f"cannot set up {exc.filename or group.dirs[0]}: {exc.strerror}"
    return None


def sweep(group: Group, alive: Callable[[int], bool] = process_alive) -> list[Path]:
    """Remove the lane cgroups beside this lane's that a lane killed before its cleanup left: named for a lane
    (gpuops-lane-NAME-PID) whose process is gone, with no process left in them. The removed ones are returned."""
    removed = []
    for parent in sorted({d.parent for d in group.dirs}):
        try:
            entries = sorted(parent.glob("gpuops-lane-*-*"))
        except OSError:
            continue
        for d in entries:
            pid = d.name.rsplit("-", 1)[1]
            if not d.is_dir() or not pid.isdigit() or alive(int(pid)):
                continue
            try:
                if (d / "cgroup.procs").read_text().strip():
                    continue
                remove_cgroup(d, busy_for=0)
            except OSError:
                continue
            removed.append(d)
    return removed


def remove(dirs: list[Path] | tuple[Path, ...], wait: float = 10.0) -> list[Path]:
    """Remove the cgroups (and any left below them) once their processes are gone, waiting up to `wait` seconds
    (cgroups.remove_cgroup, as for the machines' own); those that stay are returned."""
    left = []
    for d in dirs:
        try:
            remove_cgroup(d, busy_for=wait)
        except OSError:
            left.append(d)
    return left


@dataclass(frozen=True)
class LaneResult:
    rc: int
    cpu_seconds: float | None
    note: str | None  # why there was no cgroup, or what was left behind


def run_lane(name: str, weight: int, command: list[str], *, mounts_text: str | None = None,
             own_text: str | None = None) -> LaneResult:
    """Run command in a cgroup of its own with the weight; its exit code, CPU time, and a note where it fell short."""
    if mounts_text is None:
        mounts_text = MOUNTS.read_text()
    if own_text is None:
        own_text = OWN_CGROUPS.read_text()
    leaf = f"gpuops-lane-{''.join(c if c.isalnum() else '-' for c in name)}-{os.getpid()}"
    group = plan(parse_mounts(mounts_text), parse_own(own_text), leaf)
    joined: Group | None = None
    if isinstance(group, str):
        note: str | None = group
    else:
        stale = sweep(group)
        note = make(group, weight)
        joined = group if note is None else None
        if stale:
            print(f"lab time lane: removed {len(stale)} cgroup(s) of lanes killed before their cleanup: "
                  + ", ".join(map(str, stale)), file=sys.stderr)

    def enter() -> None:
        if joined is not None:
            for d in joined.dirs:
                (d / "cgroup.procs").write_text("0\n")

    try:
        # preexec_fn: the caller is single-threaded; the child joins the cgroup before it runs anything.
        proc = subprocess.Popen(command, preexec_fn=enter)
    except FileNotFoundError:
        if joined is not None:
            remove(joined.dirs)
        return LaneResult(127, None, f"command not found: {command[0]}")
    # Ctrl-C reaches the whole process group, the lane's command with it: let it decide, then clean up. A TERM sent to
    # this process alone is passed on.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if joined is None:
        return LaneResult(rc, None, note)
    try:
        seconds: float | None = joined.cpu_seconds()
    except (OSError, ValueError):
        seconds = None
    left = remove(joined.dirs)
    if left:
        note = f"processes still in {', '.join(map(str, left))}: cgroup left in place"
    return LaneResult(rc, seconds, note)


def record(log: Path, name: str, weight: int, result: LaneResult) -> None:
    """Append `name\\tweight\\tcpu seconds (or -)\\tnote` to the lanes' log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    cpu = "-" if result.cpu_seconds is None else f"{result.cpu_seconds:.1f}"
    with log.open("a", encoding="utf-8") as f:
        f.write(f"{name}\t{weight}\t{cpu}\t{(result.note or '').replace(chr(9), ' ')}\n")


def format_lanes(log: Path) -> str | None:
    """One line for the timing report: each lane's weight and CPU time, or why it had none."""
    try:
        text = log.read_text(encoding="utf-8")
    except OSError:
        return None
    parts = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4:
            continue
        name, weight, cpu, note = fields
        used = f"{float(cpu) / 60:.1f} core-min" if cpu != "-" else "CPU not measured"
        parts.append(f"{name} (weight {weight}) {used}" + (f" [{note}]" if note else ""))
    return ("lanes: " + "; ".join(parts)) if parts else None


def main_lane(log: Path, name: str, weight: int, command: list[str]) -> int:
    result = run_lane(name, weight, command)
    if result.note:
        print(f"lab time lane: {name}: {result.note}", file=sys.stderr)
    record(log, name, weight, result)
    return result.rc
