"""Timing of `make test`: each step appends a line to a log, the report prints a table against the budget."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Row:
    """One timed step: its name, start (epoch seconds), duration in seconds and return code."""

    name: str
    start: float
    seconds: float
    rc: int


def run_timed(log: Path, name: str, cmd: list[str]) -> int:
    """Run cmd (stdout and stderr inherited), append `name\\tstart\\tseconds\\trc` to log, return its code."""
    start = time.time()
    t0 = time.monotonic()
    try:
        rc = subprocess.call(cmd)
    except FileNotFoundError:
        print(f"lab time: command not found: {cmd[0]}", file=sys.stderr)
        rc = 127
    except KeyboardInterrupt:
        rc = 130
    seconds = time.monotonic() - t0
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as f:
        f.write(f"{name}\t{start:.3f}\t{seconds:.3f}\t{rc}\n")
    return rc


def read_log(log: Path) -> list[Row]:
    """The rows of log in order; a missing file is empty, a malformed line is skipped."""
    try:
        text = log.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 4 or not parts[0]:
            continue
        try:
            rows.append(Row(parts[0], float(parts[1]), float(parts[2]), int(parts[3])))
        except ValueError:
            continue
    return rows


def mmss(seconds: float) -> str:
    """Seconds as minutes:seconds, minutes right-aligned in two columns (` 6:57`)."""
    m, s = divmod(max(0, round(seconds)), 60)
    return f"{m:>2}:{s:02d}"


def format_table(rows: list[Row], begin: float | None, end: float, budget_s: int | None) -> str:
    """The table: setup (begin to the first step), one line per step, the total and the budget line."""
    first = rows[0].start if rows else end
    width = max([len("setup"), len("total"), *(len(r.name) for r in rows)])
    lines = [f"{'step':<{width}}  {'time':>5}  result"]
    if begin is not None:
        lines.append(f"{'setup':<{width}}  {mmss(first - begin)}  venv, lab host packages, collection link")
    for r in rows:
        lines.append(f"{r.name:<{width}}  {mmss(r.seconds)}  {'ok' if r.rc == 0 else f'FAILED (rc {r.rc})'}")
    total = end - (begin if begin is not None else first)
    lines.append(f"{'total':<{width}}  {mmss(total)}")
    if budget_s is not None:
        verdict = "within" if total <= budget_s else f"OVER by {mmss(total - budget_s).strip()}"
        lines.append(f"budget: {mmss(budget_s).strip()} warm (docs/development.md); this run: {mmss(total).strip()} ({verdict})")
    return "\n".join(lines)


def read_begin(path: Path | None) -> float | None:
    """The epoch float on path's first line (written when `make test` starts), or None when absent or unreadable."""
    if path is None:
        return None
    try:
        return float((path.read_text(encoding="utf-8").splitlines() or [""])[0].strip())
    except (OSError, ValueError):
        return None


# -- how busy the machine was --------------------------------------------------------------------------
# On a 2-core machine the lanes of `make test` share the cores: a run that takes longer on a slower machine is either
# short of CPU (both cores busy all along: only less work helps) or waiting (on the network, on the disk, on a sleep).
# The begin file keeps /proc/stat's cpu lines after the start time; the report compares them with the lines at its
# end. Fields of a cpu line: user nice system idle iowait irq softirq steal (guest time is inside user already).
def cpu_lines(text: str) -> list[str]:
    """The `cpu` lines of a /proc/stat text (the total first, then one per core)."""
    return [line for line in text.splitlines() if re.match(r"^cpu\d* ", line)]


def _jiffies(line: str) -> tuple[int, int, int]:
    """busy, iowait and all jiffies of one cpu line."""
    fields = [int(f) for f in line.split()[1:9]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy, iowait, busy + idle + iowait


def format_cpu(before: list[str], after: list[str]) -> str | None:
    """How busy the cores were between two readings of /proc/stat's cpu lines, or None where they cannot be compared."""
    if not before or not after or not before[0].startswith("cpu ") or not after[0].startswith("cpu "):
        return None
    try:
        b_busy, b_wait, b_all = _jiffies(before[0])
        a_busy, a_wait, a_all = _jiffies(after[0])
    except ValueError:
        return None
    total = a_all - b_all
    if total <= 0:
        return None
    cores = max(len(after) - 1, 1)
    busy = (a_busy - b_busy) / total
    wait = (a_wait - b_wait) / total
    verdict = ("short of CPU: only less work makes it faster on this machine" if busy >= 0.9
               else "the rest of the time it waited (network, disk, sleeps)")
    return f"cpu: {busy * cores:.1f} of {cores} core(s) busy on average ({busy:.0%}), {wait:.0%} waiting on I/O; {verdict}"


def read_begin_cpu(path: Path | None) -> list[str]:
    """The cpu lines kept in the begin file after its start time; none where absent."""
    if path is None:
        return []
    try:
        return cpu_lines(path.read_text(encoding="utf-8"))
    except OSError:
        return []


# -- why a step failed -----------------------------------------------------------------------------
# CI shows only the end of `make test`'s output, and a scenario's failure sits many screens above it, under the
# output of the steps that ran beside it. `failures` repeats, at the end, the last failures of each failed step.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"^\s*│ ?")
_HEADER = re.compile(r"^(TASK|PLAY|RUNNING HANDLER) \[|^PLAY RECAP|^_{3,} .* _{3,}$|^={3,} .* ={3,}$|^INFO |^DETAILS")
# The checks' own failure lines too: mypy's "path:3: error:", ruff's "path:3:1: F401", ansible-test's "ERROR: " and
# ansible-lint's summary.
_FAILURE = re.compile(r"fatal: \[|FAILED! =>|^failed: \[|lab: error:|^ERROR[ :]|^FAILED |^E  |^\S+:\d+: error: "
                      r"|^\S+:\d+:\d+: [A-Z]+\d+ |^Failed: \d+ failure")
_IGNORED = "...ignoring"


def failure_blocks(text: str, keep: int = 3, lines_per_block: int = 40, width: int = 300) -> list[list[str]]:
    """The last `keep` failures in a log: each the task (or test) it happened in, the failure, what follows it.

    A failure Ansible was told to ignore ("...ignoring") is not one. Colours and molecule's frame are taken off.
    """
    blocks: list[list[str]] = []
    header = ""
    current: list[str] | None = None
    for raw in text.splitlines():
        line = _FRAME.sub("", _ANSI.sub("", raw).rstrip())
        if _HEADER.search(line):
            header, current = line, None
            continue
        if current is not None:
            if line.strip() == _IGNORED:
                blocks.remove(current)
                current = None
            elif len(current) < lines_per_block:
                current.append("    " + line[:width])
            continue
        if _FAILURE.search(line):
            current = [header[:width]] if header else []
            current.append("  " + line[:width])
            blocks.append(current)
    return blocks[-keep:]


def failed_steps(rows: list[Row]) -> list[str]:
    """The names of the steps that failed, each once, in the order they ran."""
    return list(dict.fromkeys(r.name for r in rows if r.rc != 0))


def step_log(build_dir: Path, name: str) -> Path:
    """Where a step's output is kept: molecule/runtime in molecule-runtime.log, lab-test in lab-test.log; a part of a
    step without its own (lint/mypy) in its step's (lint.log, which `make checks` writes)."""
    own = build_dir / (name.replace("/", "-") + ".log")
    whole = build_dir / (name.split("/", 1)[0] + ".log")
    return own if own.exists() or not whole.exists() else whole


def print_failures(log: Path, build_dir: Path) -> None:
    for name in failed_steps(read_log(log)):
        path = step_log(build_dir, name)
        try:
            blocks = failure_blocks(path.read_text(errors="replace"))
        except OSError:
            continue
        print(f"==== {name} failed; its last failures, from {path} ====")
        for block in blocks:
            print("\n".join(block))
