"""The measurement commands behind docs/results.md return real, consistent numbers."""

from __future__ import annotations

from click.testing import CliRunner

from fusionplan.app import api
from fusionplan.app.bench.speed import search_speed, zoo_times
from fusionplan.app.cli import cli
from fusionplan.app.pipeline import PlanRequest
from tests.onnx_builders import residual_block, save


def test_search_speed_counts_exactly_the_budget(tmp_path):
    path = save(residual_block(), tmp_path, "res")
    request = PlanRequest(buffer="2KB", search="ls", splitter="tree", budget=50)
    (row,) = search_speed([str(path)], request, repeats=2)
    assert len(row.runs) == 2 and all(r > 0 for r in row.runs)
    # the speed runs plan exactly what the API plans for the same request
    plan = api.plan(path, "2KB", search="ls", splitter="tree", budget=50)
    assert row.best_dram_mb == plan.metrics.dram_bytes / 2**20


def test_zoo_times_exports_into_a_temporary_cache(fusionplan_cache):
    (row,) = zoo_times(["squeezenet"])
    assert row.model == "squeezenet" and row.ops == 64
    assert row.export_s > row.import_s > 0
    assert row.weights_mb > 1


def test_bench_speed_command(tmp_path):
    path = save(residual_block(), tmp_path, "res")
    result = CliRunner().invoke(
        cli, ["bench", "speed", str(path), "--buffer", "2KB", "--budget", "20", "--repeats", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "plans/s" in result.output and "res" in result.output
