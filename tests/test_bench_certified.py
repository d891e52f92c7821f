"""``fusionplan bench certified`` and ``bench exact``: a row per cell with auto's bound and
gap, LS beside it, a resumable store, and the report's generated section only."""

from __future__ import annotations

import json

import fusionplan as fp
from fusionplan.app.api import load
from fusionplan.app.bench.certified import (
    BEGIN,
    EXACT_BEGIN,
    certified_models,
    gap_summary,
)
from fusionplan.data.zoo import zoo_names
from tests.test_cli import invoke


def test_certified_rows_resume_and_report(tmp_path):
    out, report = tmp_path / "out", tmp_path / "results.md"
    report.write_text("# Results\n\nhand-written text\n")
    args = ("bench", "certified", "--models", "resnet18", "--buffers", "128KB",
            "--ls-budget", "200", "--out", out, "--report", report, "-q")  # fmt: skip
    invoke(*args)
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["scheme"], r["buffer"]) for r in rows] == [("lbdf", "128KB"), ("brr", "128KB")]
    for r in rows:  # auto proves the optimum on ResNet-18, and LS cannot beat it
        assert r["method"] == "optimal" and r["gap"] == 0.0
        assert r["optimum_mb"] == r["auto_mb"] <= r["ls_mb"]
        assert r["bound_mb"] == r["auto_mb"]
    text = report.read_text()
    assert text.startswith("# Results\n\nhand-written text\n") and BEGIN in text
    assert "auto proved the optimum on 2" in text and "| resnet18 | 48 | LBDF | 128KB |" in text
    report.write_text("# Results\n")  # a new report from the stored cells alone
    invoke(*args)  # resumes: nothing is run again
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2
    assert "| resnet18 | 48 | BRR | 128KB |" in report.read_text()


def test_exact_table(tmp_path):
    out, report = tmp_path / "out", tmp_path / "exact.md"
    invoke("bench", "exact", "--models", "resnet18", "--schemes", "lbdf",
           "--buffers", "64KB,2MB", "--out", out, "--report", report)  # fmt: skip
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["buffer"] for r in rows] == ["64KB", "2MB"]
    assert all(r["optimal"] and r["states"] >= 1 and r["peak_mb"] > 0 for r in rows)
    text = report.read_text()
    assert EXACT_BEGIN in text and "| resnet18 | LBDF |" in text


def test_equal_time_table():
    out = invoke("bench", "equal-time", "resnet18:lbdf:128KB", "--seconds", "1.0").output
    line = next(ln for ln in out.splitlines() if ln.startswith("| resnet18 "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    lns, ls, nsga2 = float(cells[3]), float(cells[4].split()[0]), float(cells[5].split()[0])
    # LNS starts from A*'s greedy dive and re-solves windows exactly: the optimum here
    optimum = fp.plan("resnet18", buffer="128KB", scheme="lbdf", search="exact").metrics
    assert lns <= ls and lns <= nsga2 and lns == round(optimum.dram_mb, 3)
    assert cells[6].startswith("LNS")


def test_synthetic_graphs_are_certified_models():
    names = certified_models()
    assert names[:12] == tuple(zoo_names())
    wired = [n for n in names if n.startswith("randwire-")]
    assert len(wired) >= 6 and {"nasnet-c3", "nasnet-c6"} <= set(names)
    a, b = load("randwire-n32-s0"), load("randwire-n32-s1")
    assert a.name == "randwire-n32-s0" and len(a) > 4 * 32  # Relu, conv, conv per node + sums
    assert [e for e in a.edges] != [e for e in b.edges]  # each seed wires differently


def test_gap_summary_splits_catalogue_and_synthetic():
    rows = [
        {"model": "resnet18", "gap": 0.0},
        {"model": "googlenet", "gap": 0.5},
        {"model": "randwire-n32-s0", "gap": 0.01},
        {"model": "nasnet-c3", "gap": 3.0},
        {"model": "randwire-n64-s0", "gap": 0.2},
    ]
    text = gap_summary(rows)
    assert "catalogue: gap median 25.00%, max 50.00%, <= 2 % on 1 of 2 cells" in text
    assert "synthetic graphs: gap median 20.00%, max 300.00%, <= 2 % on 1 of 3 cells" in text


def test_certified_runs_a_synthetic_graph(tmp_path):
    out, report = tmp_path / "out", tmp_path / "results.md"
    invoke("bench", "certified", "--models", "randwire-n32-s0", "--schemes", "lbdf",
           "--buffers", "1MB", "--ls-budget", "50", "--exact-limit", "0",
           "--out", out, "--report", report, "-q")  # fmt: skip
    (row,) = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert row["model"] == "randwire-n32-s0" and row["ops"] == 136
    assert 0 < row["bound_mb"] <= row["auto_mb"] <= row["ls_mb"] + 1e-9
    assert "synthetic graphs: gap median" in report.read_text()
