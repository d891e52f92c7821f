"""Memory layouts and the PyTorch executor for dynamic batching (issue 13)."""

from __future__ import annotations

import json

import pytest
import torch

from fusionplan.app.bench.batching import markdown, run_bench
from fusionplan.batching.cells import build_cells
from fusionplan.batching.executor import (
    compile_program,
    node_outputs,
    run_program,
    run_unbatched,
)
from fusionplan.batching.graph import CellNode, DataflowGraph
from fusionplan.batching.layout import (
    FLOAT_BYTES,
    copy_stats,
    is_view,
    member_order,
    naive_layout,
    pq_layout,
    slot_rows,
)
from fusionplan.batching.pipeline import BatchingRequest, run_batching
from fusionplan.batching.policies import AgendaPolicy, DepthPolicy
from fusionplan.batching.workloads import WORKLOADS, Sentence, get_workload
from fusionplan.ir import timing
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.timing import time_interleaved

HIDDEN = 8


def widths_of(workload: str) -> dict[str, int]:
    return {t: s.output_width(HIDDEN) for t, s in get_workload(workload).cell_types().items()}


def test_copy_bytes_by_hand_on_one_chain():
    """Two sentences, naive layout: each step gathers what is not already a run in order."""
    wl = get_workload("bilstm")
    graph = wl.graph_of([Sentence((1, 2)), Sentence((3, 4))])
    batches = DepthPolicy().schedule(graph)
    layout = naive_layout(graph, batches, widths_of("bilstm"))
    stats = copy_stats(graph, batches, layout)
    expected = 0
    for batch in batches:
        members = member_order(batch, layout)
        for j in range(len(graph.nodes[members[0]].args)):
            rows = [(layout.arena[p], layout.row[p]) for p in slot_rows(graph, members, j)]
            in_place = len({a for a, _ in rows}) == 1 and [r for _, r in rows] == list(
                range(rows[0][1], rows[0][1] + len(rows))
            )
            if not in_place:
                expected += sum(layout.widths[a] for a, _ in rows) * FLOAT_BYTES
    assert stats.bytes_copied == expected > 0


@pytest.mark.parametrize("name", WORKLOADS.names())
def test_every_batch_writes_one_run_and_pq_never_copies_more_than_naive(name):
    wl = get_workload(name)
    graph = wl.graph(12, seed=5)
    widths = widths_of(name)
    for policy in (AgendaPolicy(), DepthPolicy()):
        batches = policy.schedule(graph)
        naive = naive_layout(graph, batches, widths)
        pq = pq_layout(graph, batches, widths)
        for layout in (naive, pq):
            rows = sorted(
                (layout.arena[n], layout.row[n]) for n in range(len(graph))
            )  # every node has its own row
            assert len(set(rows)) == len(graph)
            for batch in batches:
                members = member_order(batch, layout)
                assert is_view(members, layout)  # the outputs are one run, in member order
        assert (
            copy_stats(graph, batches, pq).bytes_copied
            <= copy_stats(graph, batches, naive).bytes_copied
        )


@pytest.mark.parametrize("name", WORKLOADS.names())
@pytest.mark.parametrize("layout_fn", [naive_layout, pq_layout])
def test_batched_execution_equals_node_by_node(name, layout_fn):
    wl = get_workload(name)
    graph = wl.graph(6, seed=1)
    batches = AgendaPolicy().schedule(graph)
    program = compile_program(graph, batches, layout_fn(graph, batches, widths_of(name)))
    cells = build_cells(wl, HIDDEN, seed=3)
    batched = node_outputs(program, run_program(program, cells))
    reference = run_unbatched(graph, cells)
    for got, want in zip(batched, reference, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert program.kernels == len(batches) + sum(
        o.index is not None for s in program.steps for o in s.operands
    )


def test_compile_rejects_a_layout_that_splits_a_batch():
    graph = DataflowGraph((CellNode("a"), CellNode("b"), CellNode("a")), (0, 0, 0))
    batches = [(0, 2), (1,)]
    layout = naive_layout(graph, [(0,), (1,), (2,)], {"a": 1, "b": 1})
    with pytest.raises(ValueError, match="does not give batch rows"):
        compile_program(graph, batches, layout)


def test_pipeline_runs_trains_caches_and_verifies(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONPLAN_CACHE_DIR", str(tmp_path))
    request = BatchingRequest("treegru", "fsm", "pq", batch_size=8, hidden=16, repeats=1)
    first = run_batching(request)
    assert first.train_seconds is not None  # trained and cached
    assert first.batches == first.lower_bound
    assert first.max_abs_error is not None and first.max_abs_error < 1e-4
    again = run_batching(request)
    assert again.train_seconds is None  # loaded from the cache
    assert again.batches == first.batches and again.bytes_copied == first.bytes_copied
    assert list((tmp_path / "batching").glob("fsm-treegru-*.json"))


def test_bad_requests_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown workload"):
        BatchingRequest("nope").check()
    with pytest.raises(ConfigError, match="unknown layout"):
        BatchingRequest("bilstm", layout="weird").check()
    with pytest.raises(ConfigError, match=">= 1"):
        BatchingRequest("bilstm", batch_size=0).check()


def test_cli_batch_prints_json_and_rejects_bad_input(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONPLAN_CACHE_DIR", str(tmp_path))
    from click.testing import CliRunner

    from fusionplan.app.cli import cli

    runner = CliRunner()
    ok = runner.invoke(
        cli,
        [
            "batch",
            "bilstm",
            "--policy",
            "agenda",
            "--layout",
            "naive",
            "--batch-size",
            "4",
            "--hidden",
            "8",
            "--repeats",
            "1",
            "--json",
        ],
    )
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert data["batches"] >= data["lower_bound"] > 0 and data["max_abs_error"] < 1e-4
    bad = runner.invoke(cli, ["batch", "bilstm", "--batch-size", "0"])
    assert bad.exit_code == 2 and "batch-size" in bad.output


def test_bench_verifies_once_per_size_and_compares_with_the_faster_baseline(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSIONPLAN_CACHE_DIR", str(tmp_path))
    cells = run_bench(["treegru"], [2], [4, 8], repeats=1)
    assert [(c.batch_size, c.hidden) for c in cells] == [(2, 4), (2, 8)]
    first, second = cells
    assert all(
        r.max_abs_error is not None and r.max_abs_error < 1e-4 for r in first.results.values()
    )
    assert all(r.max_abs_error is None for r in second.results.values())
    agenda, depth = first.get("agenda", "naive"), first.get("depth", "naive")
    assert first.baseline.seconds == min(agenda.seconds, depth.seconds)
    assert first.speedup == first.baseline.seconds / first.get("fsm", "pq").seconds
    table = markdown(cells).splitlines()
    assert len(table) == 4 and table[2].startswith("| treegru | 2 | 4 |")


def test_time_interleaved_runs_round_robin_and_takes_medians(monkeypatch):
    calls: list[str] = []
    ticks = iter([0.0, 1.0, 1.0, 3.0, 3.0, 4.0, 4.0, 9.0])  # (start, end) of a, b, a, b
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    medians = time_interleaved(
        [lambda: calls.append("a"), lambda: calls.append("b")], repeats=2, warmup=1
    )
    assert calls == ["a", "b", "a", "b", "a", "b"]  # warm-up, then one of each per round
    assert medians == [1.0, (2.0 + 5.0) / 2]
