"""DRAM-driven substitution (issue 29): each rule family's effect on the planner's DRAM on
small hand-built graphs (figures computed by hand, 1 B/element), the lowering to the
planner's graph, the shared shape memo, and the pass's promise: never more DRAM than the
original under the plan's own settings."""

from __future__ import annotations

import json

import onnx
import pytest
from click.testing import CliRunner
from onnx import helper

import fusionplan as fp
from accel_model import Accelerator
from fusionplan.app.bench.substitute_dram import markdown as bench_markdown
from fusionplan.app.bench.substitute_dram import summary as bench_summary
from fusionplan.app.cli import cli
from fusionplan.app.dram_cost import (
    NEUTRAL_RULES,
    DramCost,
    lower,
    lowered_key,
    normalise,
    search_dram,
)
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.onnx_import import graph_from_proto
from fusionplan.ir.onnx_model import from_onnx
from fusionplan.passes import PASSES
from fusionplan.passes.manager import make_context
from fusionplan.passes.substitution.pipeline import (
    PLANNED_BUDGET,
    SubstitutionRequest,
    substitute,
)
from fusionplan.passes.substitution.rules import RULES, make_rules
from fusionplan.passes.substitution.search import Backtracking
from fusionplan.passes.substitution.search.base import DEFAULT_BUDGET
from tests.onnx_builders import save
from tests.substitution_models import apply_everywhere, inception_block, model, weight

C, HW = 16, 16
X = C * HW * HW  # one 16 x 16 x 16 activation: 4096 B


def siblings(
    k: int = 1, *, names: tuple[str, str] = ("ca", "cb"), add: bool = True, hw: int = HW
) -> onnx.ModelProto:
    """y = Conv1x1(x) + Conv_kxk(x): two convs reading one input, then an Add (without
    ``add``, both convs' outputs are the graph's)."""
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name=names[0], kernel_shape=[1, 1]),
        helper.make_node(
            "Conv", ["x", "wb"], ["b"], name=names[1], kernel_shape=[k, k], pads=[k // 2] * 4
        ),
    ]
    if add:
        nodes.append(helper.make_node("Add", ["a", "b"], ["y"], name="add"))
    inits = [weight("wa", C, C, 1, 1), weight("wb", C, C, k, k)]
    return model(nodes, {"x": (1, C, hw, hw)}, ["y"] if add else ["a", "b"], inits)


def conv_mul() -> onnx.ModelProto:
    """y = Conv1x1(x) * s, a per-channel scale."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="c", kernel_shape=[1, 1]),
        helper.make_node("Mul", ["a", "s"], ["y"], name="mul"),
    ]
    inits = [weight("w", C, C, 1, 1), weight("s", 1, C, 1, 1)]
    return model(nodes, {"x": (1, C, HW, HW)}, ["y"], inits)


def dram(graph, buffer: str, scheme: str = "lbdf") -> int:
    """The proven-optimal plan's DRAM bytes."""
    request = PlanRequest(buffer=buffer, scheme=scheme, search="exact")
    plan = plan_graph(graph, request)
    assert plan.result is not None and plan.result.certificate.method == "optimal"
    return plan.metrics.dram_bytes


def rewrite(m: onnx.ModelProto, *rules: str):
    g = from_onnx(m)
    for name in rules:
        rule = RULES.get(name)()
        g = rule.apply(g, rule.matches(g)[0])
    return g


# -- the lowering ----------------------------------------------------------------------
def test_lowering_is_the_importers_graph() -> None:
    m = inception_block()
    lowered = lower(from_onnx(m))
    imported = graph_from_proto(m, name="test")
    assert lowered_key(lowered) == lowered_key(imported)
    assert [n.weights for n in lowered.nodes] == [n.weights for n in imported.nodes]


def test_neutral_rules_lower_to_the_same_graph() -> None:
    m = inception_block()
    fused, applied = apply_everywhere(m, "fuse-conv-activation")
    assert applied > 0
    assert lowered_key(lower(fused)) == lowered_key(lower(from_onnx(m)))
    normal, steps = normalise(from_onnx(m), make_rules(list(NEUTRAL_RULES)))
    assert len(steps) == applied and lowered_key(lower(normal)) == lowered_key(lower(fused))


def test_a_residual_without_activation_lowers_to_conv_and_add() -> None:
    # FusedConv(x, w, b, r) with no activation is written back as Conv + Add, nothing more
    # (its bias, zeros, is new: 16 B)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="c", kernel_shape=[1, 1]),
        helper.make_node("Add", ["a", "x"], ["y"], name="add"),
    ]
    m = model(nodes, {"x": (1, C, HW, HW)}, ["y"], [weight("w", C, C, 1, 1)])
    fused, applied = apply_everywhere(m, "fuse-conv-add")
    assert applied == 1
    lowered, imported = lower(fused), lower(from_onnx(m))
    assert [n.op_type for n in lowered.nodes] == [n.op_type for n in imported.nodes]
    assert [n.weights for n in lowered.nodes] == [C * C + C, 0]


# -- each rule family's effect on DRAM (1 B/element, the proven optimum) -----------------
def test_sibling_merge_saves_nothing_where_the_siblings_share_a_group() -> None:
    # one group reads x once, both weights (256 B each) once and writes y: 4096 + 512 + 4096
    before = lower(from_onnx(siblings()))
    merged = lower(rewrite(siblings(), "merge-sibling-convs"))
    assert dram(before, "64KB") == dram(merged, "64KB") == X + 2 * C * C + X == 8704


def test_sibling_merge_costs_dram_where_its_split_falls_out_of_the_group() -> None:
    # 2 KB: the merged conv and its Split form one group (x and 512 B of weights in, both
    # 4096 B halves out) and the Add another (both halves in, y out); unmerged, the three
    # ops still fit one group
    before = lower(from_onnx(siblings()))
    merged = lower(rewrite(siblings(), "merge-sibling-convs"))
    assert dram(before, "2KB") == 8704
    assert dram(merged, "2KB") == (X + 2 * C * C + 2 * X) + (2 * X + X) == 25088


def test_kernel_enlargement_adds_weights() -> None:
    # padding the 1x1 kernel to 3x3 before the merge reads 8 more taps per weight
    before = lower(from_onnx(siblings(3)))
    merged = lower(rewrite(siblings(3), "enlarge-conv-kernel", "merge-sibling-convs"))
    assert dram(before, "64KB") == X + C * C + 9 * C * C + X == 10752
    assert dram(merged, "64KB") == X + 2 * 9 * C * C + X == 12800


def test_folding_a_scale_drops_its_vector_and_the_unfused_intermediate() -> None:
    before = lower(from_onnx(conv_mul()))
    folded = lower(rewrite(conv_mul(), "fold-mul-into-conv"))
    assert dram(before, "64KB") == X + C * C + C + X == 8464
    assert dram(folded, "64KB") == X + C * C + X == 8448
    # 1 KB: conv and Mul cannot share a group, so a goes out and back in
    assert dram(before, "1KB") == (X + C * C + X) + (X + C + X) == 16656
    assert dram(folded, "1KB") == 8448


def test_matcher_keeps_the_valid_assignment_of_an_asymmetric_rule() -> None:
    # the 3x3 conv's name sorts first: the one valid assignment (enlarge the 1x1) reads
    # larger, and used to be dropped in favour of the invalid one
    g = from_onnx(siblings(3, names=("z_small", "a_big")))
    matches = RULES.get("enlarge-conv-kernel")().matches(g)
    assert [m.names for m in matches] == [("z_small", "a_big")]


# -- the pass ----------------------------------------------------------------------------
def request_on(buffer: str, scheme: str = "lbdf", **options) -> SubstitutionRequest:
    accel = PlanRequest(buffer=buffer, scheme=scheme).accelerator()
    return SubstitutionRequest(search="taso", cost="dram", budget=12, accelerator=accel, **options)


@pytest.mark.parametrize("builder", [siblings, lambda: siblings(3), inception_block])
def test_never_more_dram_than_no_pass(builder) -> None:
    m = builder()
    request = request_on("2KB")
    result = substitute(m, request)
    a = result.report.accelerator
    assert a is not None
    no_pass = plan_graph(graph_from_proto(m, name="test"), PlanRequest(buffer="2KB"))
    assert a["dram_before"] == no_pass.metrics.dram_bytes
    assert a["dram_after"] <= a["dram_control"] <= a["dram_before"]
    if not result.report.steps:  # no rewrite pays: the model comes back as it was
        assert result.model is m
    else:
        out = graph_from_proto(result.model, name="test")
        assert plan_graph(out, PlanRequest(buffer="2KB")).metrics.dram_bytes == a["dram_after_cold"]


def test_dram_cost_keeps_a_fold() -> None:
    folded = substitute(conv_mul(), request_on("1KB"))
    assert [s["rule"] for s in folded.report.steps] == ["fold-mul-into-conv"]
    assert folded.report.accelerator["dram_after"] == 8448  # from 16656


def test_sibling_merge_reads_a_shared_input_once() -> None:
    # two outputs and no common reader: unmerged, each conv is a group reading x
    before = lower(from_onnx(siblings(add=False)))
    merged = lower(rewrite(siblings(add=False), "merge-sibling-convs"))
    assert dram(before, "64KB") == 2 * (X + C * C + X) == 16896
    assert dram(merged, "64KB") == X + 2 * C * C + 2 * X == 12800
    result = substitute(siblings(add=False), request_on("64KB"))
    assert [s["rule"] for s in result.report.steps] == ["merge-sibling-convs"]
    assert result.report.accelerator["dram_after"] == 12800


def test_dram_cost_weighs_an_enlargement_against_the_read_it_saves() -> None:
    # 16 x 16 x 16: enlarging the 1x1 (8 more taps, 2048 B) to merge saves a 4096 B read of x
    paid = substitute(siblings(3, add=False), request_on("64KB")).report
    assert [s["rule"] for s in paid.steps] == ["enlarge-conv-kernel", "merge-sibling-convs"]
    assert paid.accelerator["dram_before"] == 2 * X + 10 * C * C + 2 * X == 18944
    assert paid.accelerator["dram_after"] == X + 18 * C * C + 2 * X == 16896
    # 16 x 2 x 2: the read saved is 64 B, so the original stays
    kept = substitute(siblings(3, add=False, hw=2), request_on("64KB")).report
    assert kept.steps == ()
    assert kept.accelerator["dram_after"] == 2 * 64 + 10 * C * C + 2 * 64 == 2816


def test_dram_cost_keeps_an_enlargement_that_factors_the_add() -> None:
    # enlarged, the two convs of x summed become one conv with the summed 3x3 weights:
    # 4096 + 2304 + 4096, down from 4096 + 256 + 2304 + 4096
    result = substitute(siblings(3), request_on("64KB"))
    rules = [s["rule"] for s in result.report.steps]
    assert rules == ["enlarge-conv-kernel", "factor-add-convs"]
    a = result.report.accelerator
    assert (a["dram_before"], a["dram_after"]) == (10752, X + 9 * C * C + X) == (10752, 10496)


def test_shared_memo_changes_no_plan_and_prices_repeated_groups_once() -> None:
    request = PlanRequest(buffer="4KB", scheme="brr", effort=0.05)
    graph = lower(from_onnx(inception_block()))
    cost = DramCost(request)
    shared = cost.plan(graph, request)
    alone = plan_graph(graph, request)
    assert shared.groups == alone.groups
    assert shared.metrics.dram_bytes == alone.metrics.dram_bytes
    again = DramCost(request, _memo=cost._memo, _facts=cost._facts)
    again.plan(graph, request)
    assert again.stats.groups > 0 and again.stats.hit_rate == 1.0


def test_search_is_deterministic() -> None:
    request = PlanRequest(buffer="2KB", scheme="brr", effort=0.05)
    runs = []
    for _ in range(2):
        cost = DramCost(request)
        result, choice = search_dram(from_onnx(inception_block()), cost, Backtracking(), 10)
        runs.append((result.best.steps, choice.best.bytes, [p.bytes for p in choice.priced]))
    assert runs[0] == runs[1]


def test_substitute_cli_dram_cost(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(conv_mul(), path)
    args = ["substitute", str(path), "--cost", "dram", "--buffer", "1KB", "--budget", "5"]
    out = CliRunner().invoke(cli, [*args, "--json", "-q"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["accelerator"]["dram_before"] == 16656
    assert report["accelerator"]["dram_after"] == 8448
    bad = CliRunner().invoke(cli, ["substitute", str(path), "--buffer", "1KB", "-q"])
    assert bad.exit_code != 0 and "--cost dram" in bad.output


def test_joint_mode_plans_candidates_exactly() -> None:
    accel = Accelerator.of("1KB", "lbdf", 1)
    request = SubstitutionRequest(search="taso", cost="dram-exact", budget=5, accelerator=accel)
    a = substitute(conv_mul(), request).report.accelerator
    assert a["planner"]["search"] == "exact" and a["dram_after"] == 8448
    assert a["proven"] == 2  # the folded graph's plan and the original's control plan


def test_prepass_takes_the_dram_cost_and_the_plans_accelerator(tmp_path) -> None:
    """``plan --prepass substitute`` with the DRAM cost plans its candidates on the plan's
    own accelerator (1 KB here), and the plan is of the rewritten graph."""
    path = save(conv_mul(), tmp_path, "conv_mul")
    options = {"substitute": {"cost": "dram", "search": "taso", "budget": 5}}
    planned = fp.plan(path, buffer="1KB", prepass=["substitute"], pass_options=options)
    (record,) = planned.prepasses
    assert record.modified and record.summary.startswith("2 -> 1 ops, DRAM 0.016 MB -> 0.008 MB")
    assert record.report["accelerator"]["dram_after"] == planned.metrics.dram_bytes == 8448
    alone = plan_graph(graph_from_proto(conv_mul(), name="test"), PlanRequest(buffer="1KB"))
    assert alone.metrics.dram_bytes > 8448


def test_defaults_follow_the_cost_and_conflicts_fail_before_a_model_loads() -> None:
    """A latency cost searches 5000 graphs with metaflow; a DRAM cost, where each candidate
    is a plan, 40 with taso at effort 1 (the plan's own effort inside ``plan``); a DRAM cost
    with hand-picked rules, the guard or a measure is refused as an option."""
    latency = SubstitutionRequest().resolved()
    assert (latency.search, latency.budget) == ("metaflow", DEFAULT_BUDGET)
    dram = SubstitutionRequest(cost="dram").resolved()
    assert (dram.search, dram.budget, dram.plan_effort) == ("taso", PLANNED_BUDGET, 1.0)
    assert SubstitutionRequest(cost="dram", budget=7).resolved().budget == 7
    given = ("api", {"substitute": {"cost": "dram", "guard": True}})
    with pytest.raises(ConfigError, match="picks its own rules"):
        make_context(PASSES, ["substitute"], given=given)


def test_bench_counts_lower_equal_higher_against_no_pass() -> None:
    def row(model: str, none: int, latency: int, dram: int) -> dict:
        report = {"dram_control": none, "kept": "original", "candidates": 1}
        report |= {"seconds_per_candidate": 0.1, "hit_rate": 0.5}
        return {
            "model": model, "ops": 3, "none_bytes": none, "latency_bytes": latency,
            "dram_bytes": dram, "dram_planned_bytes": dram, "dram_steps": 0,
            "dram_rules": [], "dram_report": report,
        }  # fmt: skip

    rows = [row("a", 1000, 1100, 900), row("b", 10**8, 10**8, 10**8 - 256), row("c", 50, 40, 50)]
    s = bench_summary(rows)
    assert (s["latency_bytes"]["lower"], s["latency_bytes"]["higher"]) == (1, 1)
    assert (s["dram_planned_bytes"]["lower"], s["dram_planned_bytes"]["equal"]) == (2, 1)
    assert s["dram_planned_bytes"]["median_change_pct_where_changed"] == pytest.approx(-5.000128)
    assert s["rewrite_vs_control"]["lower"] == 2
    table = bench_markdown(rows)
    assert "| -10.00 % |" in table and "| -256 B |" in table
