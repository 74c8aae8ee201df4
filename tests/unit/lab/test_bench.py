"""make bench's kept figures: a part it does not run keeps its rows, and so does what --no-upgrade leaves out."""

from __future__ import annotations

import json
from dataclasses import asdict

from lab.bench import UPGRADE_ROW, Row, load_results


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
