"""``fusionplan streams``, ``plan --prepass streams``, ``fp.schedule_streams``, AutoGraph's
loop measured by the stream executor, and ``bench streams``: outputs are what they claim;
bad input is one line, exit code 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

import fusionplan as fp
from fusionplan.app.bench.streams import markdown, read_cells
from fusionplan.app.bench.streams import run_bench as run_streams_bench
from fusionplan.data.synthetic import nasnet_cells
from fusionplan.ir.errors import ConfigError
from fusionplan.passes.streams.assign import StreamAssignment
from fusionplan.passes.streams.trace import Timeline, chrome_trace
from fusionplan.passes.substitution.pipeline import SubstitutionRequest, substitute
from tests.onnx_builders import dynamic_batch, save
from tests.substitution_models import inception_block
from tests.test_cli import invoke, run_bin


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("streams") / "cell.onnx"
    onnx.save(nasnet_cells(cells=1, channels=8, size=8), path)
    return path


def test_cli_json_trace_and_gantt(cell: Path, tmp_path: Path) -> None:
    trace, gantt = tmp_path / "t.json", tmp_path / "g.png"
    out = invoke("streams", cell, "--json", "--trace", trace, "--gantt", gantt).output
    report = json.loads(out)
    assert 1 < report["streams"] == report["width"]
    assert report["events"] <= report["reduced_cross_edges"]
    sim = report["simulation"]
    assert sim["makespan_s"] >= sim["bound_s"] > 0 and sim["sequential_s"] > sim["makespan_s"]
    ops = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(ops) == report["ops"]
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_max_streams_and_cpu_execution(cell: Path) -> None:
    text = invoke("streams", cell, "--max-streams", "2", "--execute", "cpu", "--repeats", "2")
    assert "2 streams" in text.output and "measured" in text.output
    assert "max relative error vs sequential: streams 0.0e+00" in text.output


BAD = {
    "missing file": ([], "model file not found"),
    "cuda without a GPU": (["--execute", "cuda"], "needs a CUDA GPU"),
    "unknown device": (["--device", "tpu9"], "unknown latency model"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_line_and_writes_nothing(case: str, cell: Path, tmp_path: Path):
    pytest.importorskip("torch")
    if case == "cuda without a GPU":
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    flags, message = BAD[case]
    work = tmp_path / "work"
    work.mkdir()
    source = tmp_path / "nothere.onnx" if case == "missing file" else cell
    proc = run_bin("streams", source, *flags, "--trace", "t.json", "--gantt", "g.png", cwd=work)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusionplan: error: "), proc.stderr
    assert message in lines[0]
    assert list(work.iterdir()) == []


def test_a_symbolic_batch_is_fixed_with_input_shape(tmp_path: Path) -> None:
    """The error names this command (not substitution) and the option that fixes it."""
    model = save(dynamic_batch(), tmp_path, "dyn")
    proc = run_bin("streams", model, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "fusionplan: error: streams: tensor 'x' has a dynamic or unknown shape: it is a graph "
        "input with symbolic dimensions (N, 4, 8, 8); give it a static shape, e.g. --input-shape "
        "x=1x4x8x8 (API: input_shapes={'x': (...)})"
    ]
    report = json.loads(invoke("streams", model, "--input-shape", "x=1x4x8x8", "--json").output)
    assert report["ops"] == 2


def _ends_before_consumers(trace: dict, edges) -> None:
    """Every consumer starts at or after its producer's ``ts + dur`` (compared in ns, the
    trace's precision, so float noise in the µs values does not count)."""
    ops = {e["args"]["index"]: e for e in trace["traceEvents"] if e["ph"] == "X"}

    def ns(us: float) -> int:
        return round(us * 1000)

    for u, v in edges:
        assert ns(ops[v]["ts"]) >= ns(ops[u]["ts"]) + ns(ops[u]["dur"]), (u, v)


def test_trace_ops_end_before_their_consumers_start(cell: Path) -> None:
    # a chain whose ts and dur, rounded apart, overlapped op 0 with op 1 by a nanosecond
    start, finish = (1.0006e-6, 2.0004e-6, 3.0009e-6), (2.0004e-6, 3.0009e-6, 4e-6)
    chain = StreamAssignment((0, 0, 0), ((0, 1, 2),), (0, 1, 2), (), 1, 0)
    timeline = Timeline("simulated", start, finish)
    trace = chrome_trace(["a", "b", "c"], ["Relu"] * 3, chain, [timeline])
    _ends_before_consumers(trace, [(0, 1), (1, 2)])
    scheduled = fp.schedule_streams(cell)
    _ends_before_consumers(scheduled.trace(), scheduled.dag.edges)


def test_plan_with_streams_prepass_carries_the_schedule(cell: Path, tmp_path: Path) -> None:
    out, html = tmp_path / "plan.json", tmp_path / "plan.html"
    text = invoke("plan", cell, "--prepass", "streams", "--pass-option", "streams.max_streams=2",
                  "--budget", "20", "-q", "-o", out, "--html", html).output  # fmt: skip
    (record,) = json.loads(out.read_text())["prepasses"]
    schedule = record["artifacts"]["stream schedule"]
    direct = fp.schedule_streams(cell, max_streams=2)  # the same schedule, computed alone
    assert schedule["streams"] == [list(ops) for ops in direct.schedule().streams]
    assert len(schedule["streams"]) == record["report"]["streams"] == direct.report.streams == 2
    assert schedule["makespan_s"] == pytest.approx(direct.simulation.makespan)
    assert f"prepass      streams: {direct.schedule().headline()}" in text
    page = html.read_text(encoding="utf-8").split('id="fp-data">', 1)[1].split("</script>")[0]
    (shown,) = json.loads(page)["plans"][0]["prepasses"]  # the report lists each stream's ops
    assert shown["streams"] == schedule["streams"] and shown["summary"] == record["summary"]
    # an analysis leaves the model as it was: the plan is the one planned without it
    plain = json.loads(invoke("plan", cell, "--budget", "20", "-q", "--json").output)
    assert json.loads(out.read_text())["groups"] == plain["groups"]


def test_api_report_matches_simulation(cell: Path) -> None:
    result = fp.schedule_streams(cell, device="v100", max_streams=3)
    assert result.report.streams <= 3 and "v100" in result.report.device
    assert result.simulation.makespan >= result.simulation.bound
    scheduled = [op for stream in result.schedule().streams for op in stream]
    assert sorted(scheduled) == sorted(result.graph.nodes)  # every op on exactly one stream


def test_autograph_loop_measures_with_the_stream_executor() -> None:
    request = SubstitutionRequest(search="autograph", cost="mixed", budget=60, measure="streams")
    result = substitute(inception_block(), request)
    assert result.report.measured and all(t > 0 for t in result.report.measured)
    assert list(result.report.measured) == sorted(result.report.measured)
    assert "kept the fastest" in result.summary()


def test_measure_is_refused_outside_autograph() -> None:
    with pytest.raises(ConfigError, match="autograph"):
        substitute(inception_block(), SubstitutionRequest(search="taso", measure="streams"))
    with pytest.raises(ConfigError, match="unknown measure"):
        substitute(inception_block(), SubstitutionRequest(search="autograph", measure="gpu"))


@pytest.mark.slow
def test_bench_resumes_and_renders(tmp_path: Path) -> None:
    cells = run_streams_bench(["squeezenet", "nasnet"], tmp_path, execute=False)
    assert [c.model for c in cells] == ["squeezenet", "nasnet"]
    again = run_streams_bench(["squeezenet", "nasnet"], tmp_path, execute=False)
    assert again == cells  # nothing redone: the log already had both
    assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 2
    table = markdown(read_cells(tmp_path / "runs.jsonl"))
    assert "| squeezenet | 65 |" in table and "| nasnet |" in table


def test_bench_refuses_a_foreign_log(tmp_path: Path) -> None:
    (tmp_path / "runs.jsonl").write_text('{"model": "x", "search": "taso"}\n')
    with pytest.raises(ConfigError, match="not a streams bench log"):
        read_cells(tmp_path / "runs.jsonl")
