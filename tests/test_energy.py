"""Energy and latency from schedules, the objectives and their exact search
(accel_model/energy.py, accel_model/objectives.py; docs/cost-model.md, "Energy and latency")."""

from __future__ import annotations

import functools
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_model import Accelerator
from accel_model.bounds import unfusable_nodes
from accel_model.description import (
    hardware_from,
    load_accelerator,
    load_hardware,
    read_description,
)
from accel_model.energy import MetricsModel, _compute_counts, _OpShape, schedule_metrics
from accel_model.hardware import Hardware, sram_pj_per_byte
from accel_model.layer import loop_orders
from accel_model.objectives import make_objective
from accel_model.registry import cost_model_class
from accel_model.schedule import Compute, Schedule, Step, Transfer
from accel_model.schedule_layer import _Layer
from fusionplan.app.api import load
from fusionplan.app.bench.optimus import optimus_accelerator
from fusionplan.app.cli import cli
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.app.report import knee, mark
from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Node, OpGraph, Tensor, bits
from fusionplan.planning.split import make_splitter
from fusionplan.search import FusionProblem, make_search
from fusionplan.search.exact import ExactSolver
from tests.onnx_builders import residual_block, save
from tests.random_dags import random_dag, small_buffer, valid_plans

HW = Hardware(
    pe_rows=4, pe_cols=4, clock_mhz=1000, dram_gb_per_s=2, buffer_banks=1,
    bank_bytes_per_cycle=8, dram_pj_per_byte=10, buffer_pj_per_byte=1, mac_pj=0.5,
    leakage_pj_per_cycle=0.1,
)  # fmt: skip


def one_conv() -> OpGraph:
    """x (4, 8, 8) -> 3x3 conv, pad 1, 4 -> 8 channels: 8 * 8 * 8 outputs x 36 MACs each."""
    tensors = [Tensor("x", (4, 8, 8), -1), Tensor("y", (8, 8, 8), 0)]
    conv = Node("conv", "Conv", "conv", (0,), (1,), kernel=(3, 3), pads=(1, 1, 1, 1),
                weights=8 * 4 * 9 + 8, macs=8 * 8 * 8 * 4 * 9)  # fmt: skip
    return OpGraph.build("one_conv", [conv], tensors, [0], [1])


def one_step(graph: OpGraph) -> Schedule:
    """Read x and the weights, compute every output, write y: 2-byte elements."""
    actions = (
        Transfer("read", 0, -1, (0, 8), (0, 4), 256),
        Transfer("read", -1, 0, (0, 0), (0, 8), 296),
        Compute(0, (0, 8), (0, 8)),
        Transfer("write", 1, -1, (0, 8), (0, 8), 512),
    )
    return Schedule(1, "brr", "hand", 2, 4096, steps=(Step(0, (0, 8), actions),))


def test_one_step_by_hand():
    graph = one_conv()
    m = schedule_metrics(one_step(graph), graph, HW)
    # 18,432 MACs on 4 x 4 PEs (8 channels and 8 columns: 2 x 2 full passes): 1,152 cycles
    assert m.macs == 18432 and m.compute_cycles == 1152
    # buffer: each input read feeds 4 channels (18,432 / 4), each weight 4 columns, 512
    # outputs written, and the 1,064 elements moved over DRAM: 10,792 elements, 2 B each
    assert m.buffer_bytes == 2 * (4608 + 4608 + 512 + 1064)
    assert m.dram_bytes == 2128 and m.transfer_cycles == 1064  # 2 B per cycle
    # double-buffered: the busiest of compute 1,152, DRAM 1,064, buffer 21,584 / 8 = 2,698
    assert m.latency_cycles == 2698
    assert m.energy_fj == 2128 * 10_000 + 21584 * 1_000 + 18432 * 500 + 2698 * 100
    serial_hw = Hardware(**{**HW.settings(), "double_buffering": False})
    serial = schedule_metrics(one_step(graph), graph, serial_hw)
    assert serial.latency_cycles == 2698 + 1064  # buffer-bound compute, then the transfers


def test_weight_stationary_reads_each_weight_once():
    graph = one_conv()
    ws = Hardware(**{**HW.settings(), "dataflow": "cin-cout"})
    m = schedule_metrics(one_step(graph), graph, ws)
    # rows reduce 4 input channels (one fold), columns 8 output channels (2 passes)
    assert m.compute_cycles == 18432 * 2 // (4 * 8)
    # inputs 18,432 / 4, weights 288 (loaded once each), outputs 512, DRAM 1,064
    assert m.buffer_bytes == 2 * (4608 + 288 + 512 + 1064)


def test_sram_energy_fits_horowitz():
    # 10 / 20 / 100 pJ per 64-bit access at 8 KB / 32 KB / 1 MB, within 5 %
    for size, pj in ((8192, 10), (32768, 20), (1 << 20, 100)):
        assert sram_pj_per_byte(size) * 8 == pytest.approx(pj, rel=0.05)
    # a banked buffer pays one bank's access
    assert Hardware(buffer_banks=8).buffer_energy(1 << 20) == sram_pj_per_byte(1 << 17)


@functools.cache
def resnet18():
    return load("resnet18")


@pytest.mark.parametrize("scheme", ["lbdf", "brr"])
@pytest.mark.parametrize("buffer", ["64KB", "512KB"])
@pytest.mark.parametrize("hw", [Hardware(), Hardware(dataflow="cin-cout", pe_rows=16,
                                                      pe_cols=16, double_buffering=False,
                                                      leakage_pj_per_cycle=2.0)])  # fmt: skip
def test_every_group_of_a_zoo_plan_respects_the_bounds(scheme, buffer, hw):
    plan = plan_graph(resnet18(), PlanRequest(buffer=buffer, scheme=scheme, bound_effort=0.0))
    cm, model = plan.cost_model, MetricsModel(plan.cost_model, hw)
    energy, latency = (make_objective(n, cm, hw) for n in ("energy", "latency"))
    for group in plan.groups:
        m = model.group(group)
        macs = sum(cm.graph.nodes[v].macs for v in bits(group))
        assert m.dram_bytes == cm.cost(group).dram  # the schedule moves what was priced
        assert m.macs >= macs
        floor = max(-(-macs // hw.macs_per_cycle), hw.dram_cycles(m.dram_bytes))
        assert m.latency_cycles >= floor
        assert m.latency_cycles >= latency.rest_floor(group, cm.compulsory(group))
        # the compulsory traffic and every MAC, and the buffer reads the floors charge
        assert m.energy_fj >= energy.rest_floor(group, cm.compulsory(group))


@pytest.mark.parametrize("dataflow", ["cout-ow", "cin-cout"])
def test_every_loop_order_of_a_layer_does_its_macs(dataflow):
    """Each single-layer loop order (row bands ... direct, whose partial passes cover one
    input row of one channel) adds up to the op's MACs, at every buffer that allows it."""
    graph, hw = one_conv(), Hardware(dataflow=dataflow, pe_rows=4, pe_cols=4)
    cm = cost_model_class("brr")(graph, Accelerator(1 << 20, "brr", 1))
    geo = cm._geometry(0)
    energy = make_objective("energy", cm, hw)
    seen = set()
    for beta in (64, 256, 1024, 4096, 1 << 20):
        for tiling in loop_orders(geo, 1, beta):
            if tiling.order in seen:
                continue
            seen.add(tiling.order)
            schedule = _Layer(cm, 1, 0, tiling, "layer").build()
            op = _OpShape(graph, 0)
            passes = [a for st in schedule.steps for a in st.computes]
            # the passes' own shares add up to the op (no shortfall for the net to fill),
            # rounded up per pass by less than one MAC each
            done = sum(_compute_counts(a, op, hw)[0] for a in passes)
            assert 18432 <= done < 18432 + len(passes), tiling.order
            m = schedule_metrics(schedule, graph, hw)
            assert m.macs == done, tiling.order
            assert m.compute_cycles >= 18432 // 16, tiling.order
            assert m.energy_fj >= energy.rest_floor(1, m.dram_bytes), tiling.order
    assert {"streaming", "direct"} <= seen


# ------------------------------------------------------------------------ exact objectives
def case(seed: int, scheme: str) -> FusionProblem:
    graph = random_dag(3000 + seed, n_nodes=5 + seed % 6)
    cls = cost_model_class(scheme)
    buffer = int(small_buffer(cls, graph, seed, quantile=0.9) * (1, 2, 4)[seed % 3])
    cm = cls(graph, Accelerator(buffer, scheme, 2))
    return FusionProblem(cm, make_splitter("tree", cm, 0), 4)


CASES = [(seed, scheme) for seed in range(12) for scheme in ("lbdf", "brr")]


@pytest.mark.parametrize("seed,scheme", CASES)
@pytest.mark.parametrize("name", ["energy", "latency"])
def test_exact_objective_matches_brute_force(seed, scheme, name):
    problem = case(seed, scheme)
    hw = Hardware(pe_rows=4, pe_cols=4, dram_gb_per_s=4, leakage_pj_per_cycle=0.5)
    problem.objective = objective = make_objective(name, problem.cost_model, hw)
    best = min(objective.plan(p) for p in valid_plans(problem.cost_model))
    result = make_search("exact").run(problem, 0)
    assert result.best.score == best
    assert result.objective_bound.optimal and result.objective_bound.lower_bound == best
    problem.to_plan(result.best).validate()


@pytest.mark.parametrize("seed,scheme", CASES[:12])
def test_objective_bound_is_consistent(seed, scheme):
    """h(D) <= score(G) + h(D | G) on every transition, for energy and latency."""
    problem = case(seed, scheme)
    cm = problem.cost_model
    solver = ExactSolver(cm, problem.unfusable)
    for name in ("energy", "latency"):
        objective = make_objective(name, cm, Hardware(pe_rows=2, pe_cols=8))

        def h(done, objective=objective):
            rest = cm.graph.all_nodes & ~done
            return objective.rest_floor(rest, solver.h(done))

        start, _ = solver.start_state()
        seen, todo = {start}, [start]
        while todo:
            state = todo.pop()
            for group, absorbed, nxt, _ in solver.expand(state):
                atoms = sum(objective.group(a) for a in solver.atoms_in(absorbed))
                score = objective.group(group) + atoms
                assert objective.group_floor(group, cm.cost(group).dram) <= objective.group(group)
                assert h(state) <= score + h(nxt)
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)


def test_edp_is_refused_by_exact_and_planned_by_auto():
    problem = case(3, "brr")
    problem.objective = make_objective("edp", problem.cost_model, HW)
    with pytest.raises(ConfigError, match="objective edp is not a sum over groups"):
        make_search("exact").run(problem, 0)
    result = make_search("auto").run(problem, 0)
    plans = list(valid_plans(problem.cost_model))
    best = min(problem.objective.plan(p) for p in plans)
    bound = result.objective_bound
    assert bound.lower_bound <= best <= result.best.score


def test_energy_objective_never_spends_more_energy_than_the_dram_optimum():
    graph = resnet18()
    by_dram = plan_graph(graph, PlanRequest(buffer="128KB", scheme="brr"))
    by_energy = plan_graph(graph, PlanRequest(buffer="128KB", scheme="brr", objective="energy"))
    assert by_energy.energy.totals.energy_fj <= by_dram.energy.totals.energy_fj
    assert by_energy.metrics.dram_bytes >= by_dram.metrics.dram_bytes
    assert by_energy.result.objective_bound.optimal


# ------------------------------------------------------------------------ description file
def test_description_hardware(tmp_path):
    path = tmp_path / "npu.yaml"
    path.write_text(
        "buffer: 256KB\npe_array: {rows: 16, cols: 8, dataflow: cin-cout}\nclock_mhz: 800\n"
        "energy: {dram_pj_per_byte: 40, mac_pj: 0.2}\ndouble_buffering: false\n"
    )
    hw = hardware_from(read_description(path))
    assert (hw.pe_rows, hw.pe_cols, hw.dataflow, hw.clock_mhz) == (16, 8, "cin-cout", 800)
    assert (hw.dram_pj_per_byte, hw.mac_pj, hw.double_buffering) == (40, 0.2, False)
    assert hw.dram_gb_per_s == Hardware().dram_gb_per_s  # the defaults where it says nothing


def test_example_designs():
    """The Optimus-like example writes out the defaults; the edge NPU is its own design."""
    examples = Path(__file__).resolve().parent.parent / "docs" / "examples"
    assert load_hardware(examples / "optimus-like-npu.yaml") == Hardware()
    edge = load_hardware(examples / "edge-npu.toml")
    assert (edge.pe_rows, edge.pe_cols, edge.dataflow, edge.clock_mhz) == (16, 16, "cin-cout", 800)
    assert load_accelerator(examples / "edge-npu.toml").pe_unroll == edge.pe_cols


@pytest.mark.parametrize(
    "text,message",
    [
        ("pe_array: {rows: 0}", "pe_rows must be a whole number >= 1"),
        ("pe_array: {depth: 3}", "unknown key 'depth' in pe_array"),
        ("pe_array: {dataflow: diagonal}", "dataflow 'diagonal' is not one of"),
        ("energy: {mac_pj: -1}", "mac_pj must be a number >= 0"),
        ("clock_mhz: 0", "clock_mhz must be a number > 0"),
        ("double_buffering: 3", "double_buffering must be a bool"),
    ],
)
def test_description_hardware_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(f"buffer: 64KB\n{text}\n")
    with pytest.raises(ConfigError, match=message) as err:
        read_description(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------ sweeps, fronts, CLI
def test_knee_and_minimum_marks():
    # the point farthest below the chord of a falling curve (both axes scaled to [0, 1])
    assert knee([0, 1, 2, 3, 4], [10, 5, 3, 2.5, 2.4]) == 2
    assert knee([0, 1, 2], [3, 2, 1]) is None  # a straight line bends nowhere
    assert mark([0, 1, 2, 3], [5, 3, 4, 6]) == (1, "minimum")  # larger buffers cost more again
    assert mark([0, 1, 2, 3, 4], [10, 5, 3, 2.5, 2.4]) == (2, "knee")


def test_nsga2_front_is_non_dominated_and_priced_from_schedules():
    problem = case(5, "brr")
    problem.budget = 60
    result = make_search("nsga2", front="dram-energy-latency").run(problem, 0)
    front = result.extra["front"]
    points = [(r["dram_bytes"], r["energy_fj"], r["latency_cycles"]) for r in front]
    assert points == sorted(points) and len(set(points)) == len(points)
    for a in points:
        assert not any(b != a and all(x <= y for x, y in zip(b, a, strict=True)) for b in points)
    energy = make_objective("energy", problem.cost_model, problem.objective.hw)
    best = min(points, key=lambda p: p[1])
    assert best[1] >= min(energy.plan(p) for p in valid_plans(problem.cost_model))


def test_cli_objective_front_and_sweep(tmp_path):
    src = save(residual_block(), tmp_path, "res")

    def run(*args):
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)

    out = run("plan", src, "--buffer", "2KB", "--objective", "energy", "-q")
    assert out.exit_code == 0, out.output
    assert "energy " in out.output and "latency " in out.output
    assert "objective    energy: proven optimal" in out.output
    for args, message in (
        (("--objective", "edp", "--search", "exact"), "objective edp is not a sum over groups"),
        (("--objective", "energy", "--search", "lns"), "re-solves windows for DRAM only"),
        (("--front", "dram-energy-latency"), "--front applies to --search nsga2 only"),
    ):
        bad = subprocess.run(
            [sys.executable, "-m", "fusionplan", "plan", str(src), "--buffer", "2KB", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert bad.returncode == 2 and message in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    table = tmp_path / "sweep.csv"
    swept = run("sweep", src, "--buffers", "600B,2KB", "--objective", "latency", "-q", "-o", table)
    assert swept.exit_code == 0, swept.output
    rows = table.read_text().splitlines()
    header = rows[0].split(",")
    for row in rows[1:]:
        cells = dict(zip(header, row.split(","), strict=True))
        assert float(cells["latency_ms"]) >= float(cells["latency_bound_ms"]) > 0
        assert float(cells["energy_uj"]) >= float(cells["energy_bound_uj"]) > 0


# ------------------------------------------------------------------------ the optimus profile
@pytest.mark.parametrize("buffer", ["128KB", "512KB"])
def test_optimus_profile_energy_is_optimus_reported_energy(buffer):
    """Under the optimus profile the energy objective is Optimus's reported energy: its
    floor never passes it (every group of A*'s transitions out of the start, and the plan's),
    and the energy optimum spends no more of it than the DRAM optimum."""
    graph = load_zoo_model("optimus_squeezenet")
    request = PlanRequest(search="exact", bound_effort=0.0).on(
        optimus_accelerator("optimus_squeezenet", buffer)
    )
    by_dram = plan_graph(graph, request)
    by_energy = plan_graph(graph, replace(request, objective="energy"))
    cm = by_energy.cost_model
    tool = cm.tool_energy()
    assert by_energy.tool_energy_uj == pytest.approx(
        sum(tool.energy(g) for g in by_energy.groups) / 1e6
    )
    assert by_energy.tool_energy_uj <= by_dram.tool_energy_uj
    assert by_energy.result.objective_bound.optimal
    assert by_energy.energy is None  # no schedules: no latency, no schedule-read energy
    energy = make_objective("energy", cm)
    solver = ExactSolver(cm, unfusable_nodes(cm))
    start, _ = solver.start_state()
    groups = [t[0] for t in solver.expand(start)] + list(by_dram.groups)
    for group in groups:
        assert energy.group_floor(group, cm.cost(group).dram) <= energy.group(group)


def test_optimus_profile_refuses_what_needs_schedules():
    request = PlanRequest(search="nsga2").on(optimus_accelerator("optimus_squeezenet", "128KB"))
    for changed, message in (
        ({"objective": "latency"}, "objective latency needs each group's schedule"),
        ({"objective": "edp"}, "objective edp needs each group's schedule"),
        ({"search_options": {"front": "dram-energy-latency"}}, "--front dram-energy-latency"),
    ):
        with pytest.raises(ConfigError, match=message):
            replace(request, **changed).check()
