"""`fusionplan bench`: the paper's experiments, resumable, rendered next to the optimum."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from fusionplan.app.bench import BEGIN, END, BenchConfig, Run, planned_runs, splice
from fusionplan.app.bench import runner as bench_runner
from fusionplan.app.bench.experiments import exact_runs
from fusionplan.app.bench.render import best_at
from fusionplan.app.bench.runner import ResultStore, execute, run_all
from fusionplan.ir.errors import ConfigError
from tests.onnx_builders import residual_block, save


def test_default_config_plans_the_paper_grid_once():
    runs = planned_runs(BenchConfig())
    searches = [r for r in runs if r.search != "exact"]
    assert len(runs) == len(set(runs))
    t2 = [r for r in searches if r.buffer == "256KB"]
    assert len(t2) == 3 * 3 * 5 * 3  # models x searches x splitters x seeds
    assert {r.budget for r in t2} == {5000}
    small = [r for r in searches if r.buffer == "128KB" and r.budget == 2000]
    assert len(small) == 5 * 2 * 2 * 5 * 3  # models x schemes x (LS, RS) x splitters x seeds
    cells = {(r.model, r.scheme, r.buffer) for r in searches}
    assert {(r.model, r.scheme, r.buffer) for r in runs if r.search == "exact"} == cells


@pytest.mark.parametrize(
    "overrides, message",
    [({"experiments": ("table9",)}, "unknown experiment table9"), ({"seeds": 0}, "seeds")],
)
def test_bad_config_is_one_clear_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        BenchConfig(**overrides).check()


def test_splice_replaces_only_the_generated_section(tmp_path):
    path = tmp_path / "results.md"
    assert splice(path, "first") == f"{BEGIN}\nfirst\n{END}\n"  # missing file: created
    path.write_text("# Results\n\nhand-written\n")
    once = splice(path, "one")
    assert once.startswith("# Results\n\nhand-written\n") and once.endswith(f"{END}\n")
    path.write_text(once + "\n## after\n")
    twice = splice(path, "two")
    assert "one" not in twice and "two" in twice
    assert twice.count(BEGIN) == 1 and twice.endswith("\n## after\n")


def test_best_at_reads_the_improvement_trace():
    trace = [(1, 9.0), (5, 7.0), (40, 6.5)]
    assert best_at(trace, 0) is None
    assert [best_at(trace, b) for b in (1, 4, 5, 39, 40, 1000)] == [9.0, 9.0, 7.0, 7.0, 6.5, 6.5]


def test_store_ignores_a_torn_line_and_resume_skips_finished_runs(tmp_path, monkeypatch):
    model = str(save(residual_block(), tmp_path, "res"))
    runs = [Run(model, "lbdf", "2KB", "ls", "tree", 20, seed) for seed in (0, 1)]
    store = ResultStore(tmp_path / "out")
    store.add(execute(runs[0]))
    with open(store.path, "a") as f:
        f.write('{"key": "torn')  # an interruption mid-write
    calls = []
    monkeypatch.setattr(
        bench_runner, "execute", lambda run, *a: calls.append(run) or {"key": run.key}
    )
    rows = run_all(runs, ResultStore(tmp_path / "out"))
    assert calls == [runs[1]]  # the finished run came from disk
    assert set(rows) == {r.key for r in runs}
    assert len(ResultStore(tmp_path / "out").rows) == 2


def test_execute_reports_a_validated_plan_and_the_optimum(tmp_path):
    model = str(save(residual_block(), tmp_path, "res"))
    row = execute(Run(model, "lbdf", "2KB", "ls", "tree", 30, 0))
    (exact_run,) = exact_runs([Run(model, "lbdf", "2KB", "ls", "tree", 30, 0)])
    exact = execute(exact_run)
    assert "error" not in row and exact["optimal"] is True
    assert exact["lower_bound_mb"] <= exact["dram_mb"] <= row["dram_mb"]
    assert row["compulsory_mb"] <= exact["dram_mb"]
    assert row["trace"][-1][1] == pytest.approx(row["dram_mb"])
    assert row["trace"][-1][0] <= 30


def test_a_failing_run_is_recorded_not_dropped(tmp_path):
    row = execute(Run(str(tmp_path / "missing.onnx"), "lbdf", "2KB", "ls", "tree", 5, 0))
    assert "missing.onnx" in row["error"]


@pytest.mark.slow
def test_bench_quick_runs_resumes_and_never_beats_the_optimum(tmp_path):
    out, report = tmp_path / "out", tmp_path / "docs" / "results.md"
    report.parent.mkdir()
    report.write_text("# Results\n\nkept\n")
    cmd = [sys.executable, "-m", "fusionplan", "bench", "--quick", "-q", "-j", "2",
           "--out", str(out), "--report", str(report)]  # fmt: skip
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    text = report.read_text()
    assert text.startswith("# Results\n\nkept\n")
    for heading in ("Table II", "Table III", "Table IV", "Table V", "Figure 3", "Figure 5"):
        assert f"### {heading}" in text
    assert "Failed runs" not in text
    assert (report.parent / "img" / "bench-fig3.png").stat().st_size > 1000
    assert (report.parent / "img" / "bench-fig5.png").stat().st_size > 1000
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    optimum = {(r["model"], r["scheme"], r["buffer"]): r for r in rows if r["search"] == "exact"}
    assert optimum and all(o["optimal"] for o in optimum.values())
    for r in rows:  # no heuristic may beat the proven optimum
        assert r["dram_mb"] >= optimum[(r["model"], r["scheme"], r["buffer"])]["dram_mb"] - 1e-9
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    n = len(rows)
    assert re.search(rf"{n} runs \({n} reused", report.read_text())
    assert len((out / "runs.jsonl").read_text().splitlines()) == n


def test_bench_rejects_an_unknown_splitter(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "fusionplan", "bench", "--quick", "--splitters", "magic",
         "--out", str(tmp_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    assert "unknown splitter 'magic'" in result.stderr and len(result.stderr.splitlines()) == 1
