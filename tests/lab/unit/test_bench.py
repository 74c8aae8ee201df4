"""make bench's kept figures: a part it does not run keeps its rows, and so does what --no-upgrade leaves out."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from lab.bench import BEGIN, END, TITLE, UPGRADE_ROW, Bench, Row, load_results, newest_from_json, write_table


def test_a_part_not_run_and_the_upgrade_left_out_keep_their_figures(tmp_path):
    path = tmp_path / "bench.json"
    rows = [Row("no-op node.yml, 1 machine", 7.2, "", "machines", "2026-12-02 15:16"),
            Row(UPGRADE_ROW, 250.8, "", "machines", "2026-12-02 15:16"),
            Row("cluster.yml, 1000 KWOK nodes, no-op", 25.8, "", "scale", "2026-12-02 15:16")]
    path.write_text(json.dumps([asdict(r) for r in rows]))
    assert [r.what for r in load_results(path, ["machines"])] == ["cluster.yml, 1000 KWOK nodes, no-op"]
    assert [r.what for r in load_results(path, ["machines"], (UPGRADE_ROW,))] == [UPGRADE_ROW, "cluster.yml, 1000 KWOK nodes, no-op"]
    assert load_results(tmp_path / "none.json", ["machines"]) == []


def test_a_no_op_row_s_note_gives_the_runs_spread_and_the_controller_s_median_cpu():
    from lab.bench import _runs

    assert _runs([(4.9, 3.0), (4.4, 3.4), (6.2, 3.1)]) == "median of 3: 4.4 to 6.2s, controller CPU 3.1s"


def _adhoc(host: str, stdout: str) -> str:
    """The json callback's output of an ad-hoc script run, as ansible prints it (a warning line may come first)."""
    return "[WARNING]: a line before the JSON\n" + json.dumps(
        {"plays": [{"tasks": [{"hosts": {host: {"rc": 0, "stdout": stdout, "changed": True}}}]}], "stats": {}})


def test_the_upgrade_s_branch_is_the_one_the_machine_s_index_names():
    assert newest_from_json(_adhoc("bench-noble", "620\r\n"), "bench-noble") == "620"


@pytest.mark.parametrize("out", [_adhoc("bench-noble", ""), _adhoc("bench-noble", "no packages\n"), _adhoc("other", "620\n"),
                                 "ERROR! the host is unreachable"])
def test_no_branch_stops_the_bench_naming_the_machine(out):
    with pytest.raises(SystemExit, match="no newest branch from bench-noble"):
        newest_from_json(out, "bench-noble")


def _bench(tmp_path, *rows: Row) -> Bench:
    return Bench(tmp_path, 2291, 8471, 1000, tmp_path / "bench.log", rows=list(rows))


def test_the_bench_rewrites_its_figures_and_keeps_the_history_around_them(tmp_path):
    out = tmp_path / "bench.md"
    out.write_text(f"{TITLE}\n\nWhat the figures are.\n\n{BEGIN}\n| old | 9.9 |\n{END}\n\n## History\n\n| 2026-11-24 | 8.1 s |\n")
    section = write_table(_bench(tmp_path, Row("no-op node.yml, 1 machine", 4.2, "37 tasks", "machines", "2026-12-04 17:30")),
                          out, 0.0)
    text = out.read_text()
    assert "| no-op node.yml, 1 machine | 4.2 | 37 tasks | 2026-12-04 17:30 |" in section and section in text
    assert "| old | 9.9 |" not in text
    assert text.startswith(f"{TITLE}\n\nWhat the figures are.\n\n{BEGIN}\nWritten by `make bench` on ")
    assert text.endswith(f"{END}\n\n## History\n\n| 2026-11-24 | 8.1 s |\n")
    write_table(_bench(tmp_path, Row("no-op node.yml, 1 machine", 4.0, "", "machines", "")), out, 0.0)
    assert out.read_text().count(BEGIN) == 1 and out.read_text().endswith("| 2026-11-24 | 8.1 s |\n")


@pytest.mark.parametrize("before", [None, "# `make bench`: measured figures\n\n| an old table the bench wrote whole |\n"])
def test_a_bench_md_without_the_markers_becomes_the_title_and_the_figures(tmp_path, before):
    out = tmp_path / "bench.md"
    if before is not None:
        out.write_text(before)
    section = write_table(_bench(tmp_path), out, 0.0)
    assert out.read_text() == f"{TITLE}\n\n{BEGIN}\n{section}{END}\n"


def test_the_repositorys_bench_md_keeps_a_history_outside_what_the_bench_writes():
    from lab.bench import REPO

    text = (REPO / "docs/bench.md").read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1 and text.index(BEGIN) < text.index(END)
    assert "## History" in text.split(END, 1)[1]
