from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab import cli, timing
from lab.timing import Row, cpu_lines, format_cpu, format_table, read_begin, read_begin_cpu, read_log, run_timed

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("cmd", "rc"), [(["true"], 0), (["false"], 1), (["sh", "-c", "exit 3"], 3)])
def test_run_timed_records_name_and_code(tmp_path: Path, cmd: list[str], rc: int) -> None:
    log = tmp_path / "new" / "dir" / "timing.tsv"
    assert run_timed(log, "lint/ruff", cmd) == rc
    [row] = read_log(log)
    assert (row.name, row.rc) == ("lint/ruff", rc)
    assert 0 <= row.seconds < 10
    assert row.start > 1.7e9


def test_run_timed_appends_and_measures(tmp_path: Path) -> None:
    log = tmp_path / "timing.tsv"
    run_timed(log, "a", ["true"])
    run_timed(log, "b", ["sleep", "0.3"])
    rows = read_log(log)
    assert [r.name for r in rows] == ["a", "b"]
    assert 0.25 <= rows[1].seconds < 5
    assert rows[0].start <= rows[1].start
    assert all(line.count("\t") == 3 for line in log.read_text().splitlines())


def test_missing_command_is_127(tmp_path: Path) -> None:
    log = tmp_path / "timing.tsv"
    assert run_timed(log, "x", ["/nonexistent/command"]) == 127
    assert read_log(log)[0].rc == 127


def test_read_log_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_log(tmp_path / "nope.tsv") == []


def test_read_log_skips_malformed_lines(tmp_path: Path) -> None:
    log = tmp_path / "timing.tsv"
    log.write_text("unit\t100.0\t41.2\t0\ngarbage\nlint\tx\t1\t0\n\nsanity\t200\t3\t0\textra\n\t1\t2\t0\nmolecule/default\t300.5\t417\t2\nhalf")
    assert read_log(log) == [Row("unit", 100.0, 41.2, 0), Row("molecule/default", 300.5, 417.0, 2)]


def test_read_begin(tmp_path: Path) -> None:
    begin = tmp_path / "begin"
    assert read_begin(begin) is None
    assert read_begin(None) is None
    begin.write_text("1700000000.25\n")
    assert read_begin(begin) == 1700000000.25
    begin.write_text("yesterday")
    assert read_begin(begin) is None
    # The start time and /proc/stat's cpu lines, as `make test` writes them.
    begin.write_text("1700000000.25\n" + STAT_BEGIN)
    assert read_begin(begin) == 1700000000.25
    assert read_begin_cpu(begin) == STAT_BEGIN.splitlines()[:3]
    assert read_begin_cpu(tmp_path / "nope") == [] and read_begin_cpu(None) == []


# /proc/stat of a 2-core machine (user nice system idle iowait irq softirq steal guest guest_nice), and 100 s later:
# 380 of the 400 jiffies busy, 8 waiting on I/O, 12 idle.
STAT_BEGIN = ("cpu  1000 10 300 5000 50 5 5 0 0 0\ncpu0 500 5 150 2500 25 3 2 0 0 0\ncpu1 500 5 150 2500 25 2 3 0 0 0\n"
              "intr 123 4 5\nctxt 999\n")
STAT_BUSY = "cpu  1300 10 380 5012 58 5 5 0 0 0\ncpu0 650 5 185 2506 29 3 2 0 0 0\ncpu1 650 5 185 2506 29 2 3 0 0 0\n"


def test_cpu_line_busy_machine() -> None:
    line = format_cpu(cpu_lines(STAT_BEGIN), cpu_lines(STAT_BUSY))
    assert line == ("cpu: 1.9 of 2 core(s) busy on average (95%), 2% waiting on I/O; "
                    "short of CPU: only less work makes it faster on this machine")


def test_cpu_line_waiting_machine() -> None:
    idle = "cpu  1100 10 320 5280 50 5 5 0 0 0\ncpu0 550 5 160 2635 25 3 2 0 0 0\ncpu1 550 5 160 2635 25 2 3 0 0 0\n"
    line = format_cpu(cpu_lines(STAT_BEGIN), cpu_lines(idle))
    assert line is not None and line.startswith("cpu: 0.6 of 2 core(s) busy on average (30%), 0% waiting on I/O; the rest")


def test_cpu_line_not_comparable() -> None:
    assert format_cpu([], cpu_lines(STAT_BUSY)) is None
    assert format_cpu(cpu_lines(STAT_BUSY), cpu_lines(STAT_BEGIN)) is None  # the counters went back (another boot)
    assert format_cpu(["cpu  x y"], cpu_lines(STAT_BUSY)) is None


ROWS = [Row("unit", 1062.0, 41.0, 0), Row("molecule/hardware", 1110.0, 417.4, 0), Row("molecule/runtime", 1530.0, 30.0, 2)]


def test_table_within_budget() -> None:
    lines = format_table(ROWS, begin=1000.0, end=1000.0 + 26 * 60 + 27, budget_s=40 * 60).splitlines()
    assert lines[0].split() == ["step", "time", "result"]
    assert lines[1].split()[:2] == ["setup", "1:02"]
    assert lines[2].split() == ["unit", "0:41", "ok"]
    assert lines[3].split() == ["molecule/hardware", "6:57", "ok"]
    assert " 6:57  ok" in lines[3]
    assert lines[4].split() == ["molecule/runtime", "0:30", "FAILED", "(rc", "2)"]
    assert lines[5].split() == ["total", "26:27"]
    assert lines[6] == "budget: 40:00 warm (docs/development.md); this run: 26:27 (within)"
    assert len(lines) == 7


def test_table_over_budget() -> None:
    table = format_table(ROWS, begin=1000.0, end=1000.0 + 43 * 60 + 12, budget_s=40 * 60)
    assert table.splitlines()[-1] == "budget: 40:00 warm (docs/development.md); this run: 43:12 (OVER by 3:12)"


def test_table_without_begin_or_budget() -> None:
    lines = format_table(ROWS, begin=None, end=1600.0, budget_s=None).splitlines()
    assert not any(line.startswith(("setup", "budget")) for line in lines)
    assert lines[-1].split() == ["total", "8:58"]  # 1600 - 1062, from the first step's start


def test_table_of_no_steps() -> None:
    lines = format_table([], begin=1000.0, end=1090.0, budget_s=None).splitlines()
    assert lines[1].split()[:2] == ["setup", "1:30"]
    assert lines[-1].split() == ["total", "1:30"]


def test_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "timing.tsv"
    log.write_text("unit\t100\t61\t0\n")
    assert cli.main(["time", "report", "--log", str(log), "--budget-min", "15"]) == 0
    out = capsys.readouterr().out
    assert "unit" in out and " 1:01  ok" in out and "budget: 15:00 warm" in out


def test_run_command_exits_with_the_code(tmp_path: Path) -> None:
    log = tmp_path / "t" / "timing.tsv"
    argv = [sys.executable, "-m", "lab", "time", "run", "--log", str(log), "--name", "molecule/x", "--", "sh", "-c", "exit 4"]
    assert subprocess.run(argv, cwd=REPO, check=False).returncode == 4
    assert [(r.name, r.rc) for r in read_log(log)] == [("molecule/x", 4)]


def test_run_command_without_a_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["time", "run", "--log", str(tmp_path / "t.tsv"), "--name", "x", "--"]) == 2
    assert "no command given" in capsys.readouterr().err


MOLECULE_LOG = """\
\x1b[2m│\x1b[0m TASK [gpuops.nvidia.driver : Check the request]
\x1b[2m│\x1b[0m \x1b[0;31mfatal: [mol-noble]: FAILED! => \x1b[0m
\x1b[2m│\x1b[0m \x1b[0;31m    msg: planted by the test\x1b[0m
\x1b[2m│\x1b[0m ...ignoring
\x1b[2m│\x1b[0m TASK [Boot the machines]
\x1b[2m│\x1b[0m \x1b[0;31mfatal: [localhost]: FAILED! => \x1b[0m
\x1b[2m│\x1b[0m \x1b[0;31m    stderr: 'lab: error: machine c1 exited while booting'\x1b[0m
\x1b[2m│\x1b[0m PLAY RECAP
ERROR    Ansible return code was 2
"""


def test_failure_blocks_name_the_task_skip_ignored_failures_and_drop_colours():
    blocks = timing.failure_blocks(MOLECULE_LOG)
    assert blocks == [
        ["TASK [Boot the machines]", "  fatal: [localhost]: FAILED! =>", "        stderr: 'lab: error: machine c1 exited while booting'"],
        ["PLAY RECAP", "  ERROR    Ansible return code was 2"],
    ]


def test_failures_are_printed_for_the_failed_steps_only(tmp_path, capsys):
    log = tmp_path / "timing.tsv"
    log.write_text("unit\t1.0\t2.0\t0\nmolecule/cluster\t3.0\t4.0\t2\nlab-test\t3.0\t9.0\t1\n")
    (tmp_path / "molecule-cluster.log").write_text(MOLECULE_LOG)
    (tmp_path / "unit.log").write_text("FAILED tests/unit/x.py::test_not_this_one\n")
    timing.print_failures(log, tmp_path)
    out = capsys.readouterr().out
    assert "==== molecule/cluster failed" in out and "exited while booting" in out
    assert "test_not_this_one" not in out
    # lab-test failed but left no log here: nothing to print for it, and no error.
    assert "lab-test" not in out


def test_a_part_of_a_step_is_read_from_its_step_s_log(tmp_path, capsys):
    """`make checks` keeps lint's whole output in lint.log; lint/mypy, which failed, has no log of its own."""
    log = tmp_path / "timing.tsv"
    log.write_text("lint/ruff\t1.0\t2.0\t0\nlint/mypy\t3.0\t4.0\t1\n")
    (tmp_path / "lint.log").write_text("plugins/x.py:3: error: Incompatible types\nFAILED lint/mypy\n")
    timing.print_failures(log, tmp_path)
    out = capsys.readouterr().out
    assert "==== lint/mypy failed; its last failures, from " + str(tmp_path / "lint.log") in out
    assert "FAILED lint/mypy" in out
    assert timing.step_log(tmp_path, "molecule/cluster") == tmp_path / "molecule-cluster.log"


@pytest.mark.parametrize("line", [
    "plugins/modules/x.py:3: error: Incompatible types in assignment  [assignment]",
    "lab/timing.py:12:5: F401 [*] `os` imported but unused",
    "ERROR: .venv/:0:0: symlinks to directories are not allowed",
    "Failed: 2 failure(s), 0 warning(s) on 409 files.",
])
def test_the_checks_failure_lines_are_found(line):
    assert timing.failure_blocks("==== lint ====\nsome output\n" + line + "\n") == [["==== lint ====", "  " + line]]


def test_passing_checks_output_holds_no_failure():
    assert timing.failure_blocks("All checks passed!\nSuccess: no issues found in 80 source files\n"
                                 "Passed: 0 failure(s), 0 warning(s) in 409 files\n64 passed in 1.26s\n") == []
