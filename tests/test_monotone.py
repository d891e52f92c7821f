"""Costs never rise with the buffer (docs/cost-model.md, "Single-layer cost").

For a fixed group, a larger buffer keeps it valid and never costs more DRAM; one op is never
charged more as a fusable singleton than run alone; hence the optimum never rises with the
buffer. The paper's convention breaks this, which is why it is not the default.
"""

from __future__ import annotations

import random

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_model import make_cost_model
from accel_model.layer import layer_geometry, single_layer_tiling
from fusionplan.app import api
from fusionplan.app.cli import cli
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.ir.graph import bits, mask_of
from fusionplan.planning.plan import Plan
from fusionplan.planning.split import make_splitter
from fusionplan.search import FusionProblem, make_search
from tests.onnx_builders import conv_chain, save, to_graph
from tests.random_dags import random_dag
from tests.test_exact import VARIANTS, accelerator

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

graphs = st.builds(random_dag, st.integers(0, 10**6), max_nodes=st.integers(3, 10))
schemes = st.sampled_from(list(VARIANTS))  # lbdf, brr, channel slices, Optimus's conventions
buffers = st.integers(16, 40_000)


def buffer_pair(graph, scheme: str, q: float, grow: float) -> tuple[int, int]:
    """Buffers near a singleton's requirement, where ops change from unfusable to fusable."""
    probe = model(graph, 1 << 40, scheme)
    needs = sorted(max(1, probe.cost(1 << v).buffer) for v in range(len(graph)))
    small = needs[min(len(needs) - 1, int(q * len(needs)))]
    return small, int(small * grow) + 1


quantiles = st.floats(0.0, 1.0)
growth = st.floats(1.0, 3.0)


def model(graph, buffer: int, scheme: str, single_layer: str = "tiled", b: int = 1):
    return make_cost_model(graph, accelerator(scheme, buffer, b, single_layer))


@PROPS
@given(graph=graphs, scheme=schemes, q=quantiles, grow=growth, seed=st.integers(0, 999),
       b=st.sampled_from([1, 2]))  # fmt: skip
def test_group_cost_never_rises_with_the_buffer(graph, scheme, q, grow, seed, b):
    small, big = buffer_pair(graph, scheme, q, grow)
    lo, hi = model(graph, small, scheme, b=b), model(graph, big, scheme, b=b)
    rng = random.Random(seed)
    n = len(graph)
    groups = [1 << v for v in range(n)]
    groups += [rng.randrange(1, 1 << n) for _ in range(30)]
    for g in groups:
        a, z = lo.cost(g), hi.cost(g)
        if a.valid:
            assert z.valid, "a group that fits a small buffer fits a larger one"
        if a.valid or g.bit_count() == 1:  # what a plan can contain at the small buffer
            assert z.dram <= a.dram, (g, small, big, a, z)


@PROPS
@given(graph=graphs, scheme=schemes, buffer=buffers, b=st.sampled_from([1, 2]))
def test_a_singleton_costs_at_most_the_layer_alone_and_at_least_io_plus_weights(
    graph, scheme, buffer, b
):
    cm = model(graph, buffer, scheme, b=b)
    for v in range(len(graph)):
        cost = cm.cost(1 << v)
        alone = cm.layer_tiling(v)
        floor = b * (cm.io_elements(1 << v) + cm.weight_elements(1 << v))
        if cm.free_alone >> v & 1:  # Optimus's unfused local layers move nothing
            assert cost == (0, 0, True)
            continue
        assert floor <= cost.dram <= b * alone.dram
        # no loop order moves less than io + W: CostModel._priced skips the tilings of a
        # group whose scheme cost is already that floor
        assert floor <= b * alone.dram
        if not cost.valid:
            assert cost.dram == b * alone.dram
        for w in bits(graph.succ_mask[v]):  # a layer with an epilogue op: the same floor
            pair = 1 << v | 1 << w
            if cm._epilogue_core(pair) == v:
                tiling = cm.epilogue_tiling(pair, v)
                extra = cm.io_elements(pair) - cm.io_elements(1 << v) + cm.weight_elements(1 << w)
                assert cm.compulsory(pair) <= b * (tiling.dram + extra)


@PROPS
@given(graph=graphs, buffers=st.lists(buffers, min_size=2, max_size=6), b=st.sampled_from([1, 2]))
def test_layer_tiling_is_non_increasing_in_the_buffer(graph, buffers, b):
    cm = model(graph, 1 << 20, "lbdf", b=b)
    for v in range(len(graph)):
        geo = layer_geometry(graph, v, cm.io_elements(1 << v))
        costs = [single_layer_tiling(geo, b, beta).dram for beta in sorted(buffers)]
        assert costs == sorted(costs, reverse=True)


def optimum(graph, buffer: int, scheme: str, single_layer: str = "tiled") -> int:
    cm = model(graph, buffer, scheme, single_layer)
    problem = FusionProblem(cm, make_splitter("tree", cm, 0), 1)
    result = make_search("exact").run(problem, 0)
    assert result.exact is not None and result.exact.optimal
    return result.best.dram


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=st.builds(random_dag, st.integers(0, 10**6), max_nodes=st.integers(3, 9)),
       scheme=schemes, q=quantiles, grow=growth)  # fmt: skip
def test_the_optimum_never_rises_with_the_buffer(graph, scheme, q, grow):
    small, big = buffer_pair(graph, scheme, q, grow)
    assert optimum(graph, big, scheme) <= optimum(graph, small, scheme)


def test_the_paper_convention_is_not_monotone_and_tiled_is():
    # BRR, conv2 of conv_chain alone: (4,8,8) -> (8,8,8), io 768, 296 weights, footprint
    # 64 + 3 * 32 = 160 bytes. At 160 B it does not fit; at 161 B it fits with h_tile = 1,
    # streaming its weights once per each of 8 rows: 768 + 8 * 296 = 3136.
    graph = to_graph(conv_chain())
    conv2 = mask_of((2,))
    paper_small = model(graph, 160, "brr", "paper").cost(conv2)
    paper_big = model(graph, 161, "brr", "paper").cost(conv2)
    assert (paper_small.valid, paper_small.dram) == (False, 768 + 296)  # io + weights once
    assert (paper_big.valid, paper_big.dram) == (True, 3136)  # more buffer, more DRAM
    # Tiled, at both sizes: output tiles of 2 channels x 5 rows (the fit test counts per
    # input channel 2 * 9 weights, 2 * 40 partial sums and a 7 x 8 window: 154 < 160): 4
    # channel tiles, 2 row tiles (rows 0..5 and 5..8 read input rows 0..6 and 4..8, padding
    # left out: 6 + 4 = 10 rows, a 2-row halo) read the weights twice and 4 * 10 * 8 = 320
    # input elements a pass: 512 + 2 * 296 + 4 * 320 = 2384; the schedule holds
    # 18 + 80 + 6 * 8 = 146. (Channel passes of one channel, or streaming: 2856.)
    assert model(graph, 160, "brr").cost(conv2) == (146, 2384, False)
    assert model(graph, 161, "brr").cost(conv2).dram == 2384
    assert model(graph, 160, "brr").layer_tiling(2)[:3] == ("output-tiles", 8, 2384)


def test_a_warm_started_search_is_never_worse_than_its_start():
    graph = to_graph(conv_chain())
    small = api.plan(graph, 300, "brr", search="rs", budget=1, seed=3)
    # one random proposal at the larger buffer, started from the smaller buffer's plan
    request = PlanRequest(buffer=2000, scheme="brr", search="rs", budget=1, seed=5)
    warm = plan_graph(graph, request, warm_start=[small])
    recosted = Plan(graph, warm.cost_model, small.groups).validate()
    assert warm.metrics.dram_bytes <= recosted.metrics.dram_bytes <= small.metrics.dram_bytes
    assert warm.result is not None
    # the warm plan is the first incumbent, observed before any proposal
    assert warm.result.trace[0] == (0, recosted.metrics.dram_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
@pytest.mark.parametrize("search", ["rs", "ls"])
def test_zoo_sweeps_never_rise(model, scheme, search):
    buffers = ["64KB", "128KB", "256KB", "512KB", "1MB", "2MB"]
    points = api.sweep(model, buffers, scheme, search=search, budget=40, seed=1)
    assert [p.buffer_bytes for p in points] == sorted(p.buffer_bytes for p in points)
    dram = [p.plan.metrics.dram_bytes for p in points]
    assert dram == sorted(dram, reverse=True), dram


def test_bench_sweeps_reports_curves_that_never_rise(tmp_path):
    path = save(conv_chain(), tmp_path, "chain")
    result = CliRunner().invoke(
        cli,
        ["bench", "sweeps", str(path), "--buffers", "150B,161B,300B,2KB", "--budget", "5"],
    )
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.startswith("| chain")]
    assert len(rows) == 2  # LBDF and BRR
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        curves = [[float(v) for v in cells[i].split(" / ")] for i in (2, 3, 4)]
        for curve in curves[:2]:  # the warm-started heuristic and the tiled optimum
            assert curve == sorted(curve, reverse=True) and len(curve) == 4
        assert cells[5].startswith("0 / 0 / ") and cells[6] == "yes"


@pytest.mark.slow
@pytest.mark.parametrize("model", ["shufflenet_v2_x0_5", "vit_b_16"])
def test_a_channel_shuffle_cnn_and_a_vision_transformer_plan(model):
    """Both were refused before shape resolution; both plan, validly and never dearer with
    more buffer, under both schemes (the catalogue bench does every torchvision model)."""
    for scheme in ("lbdf", "brr"):
        points = api.sweep(model, ["128KB", "512KB"], scheme, search="ls", budget=60)
        plans = [p.plan.validate() for p in points]
        dram = [p.metrics.dram_bytes for p in plans]
        assert dram[1] <= dram[0]
        assert all(d >= p.metrics.lower_bound_bytes for d, p in zip(dram, plans, strict=True))
