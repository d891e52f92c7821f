"""``fusionplan train explain-eval``: a ranker's top edge judged by the single cuts that fix
an invalid group (every part fits) and by the cheapest of them.

LBDF costs of residual_block's topological cuts, from tests/test_split.py (bytes; buffer of
each part, DRAM of the cut): p=0 {0} 276 + {1..5} 616, 1468;  p=1 520 + 404, 1980;
p=2 552 + 372, 1980;  p=3 796 + 128, 1980;  p=4 828 + 64, 1468. A part fits when its buffer
is below the buffer size. Edges and the positions they span: (0,1) [0], (1,2) [1], (2,3) [2],
(3,4) [3], (0,4) [0, 1, 2, 3], (4,5) [4].
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_model import Accelerator, make_cost_model, unfusable_nodes
from fusionplan.app.cli import cli
from fusionplan.planning.split import CostModelRanker
from tests.onnx_builders import residual_block, save, to_graph, wide_chains

pytest.importorskip("torch_geometric")

from explainers.eval_cuts import (
    MAX_OPS,
    MIN_OPS,
    MiddleRanker,
    cut_truth,
    draw_invalid_groups,
    judge_rankers,
    random_hits,
    top1_hits,
)

RES_ALL = 0b111111
SKIP = (0, 4)


def residual(beta: int):
    return make_cost_model(to_graph(residual_block()), Accelerator(beta, "lbdf", 1))


@pytest.mark.parametrize(
    ("beta", "fixing", "cheapest", "fixing_edges", "cheapest_edges"),
    [
        # every cut leaves a part of 520 B or more: two cuts are needed
        (500, set(), set(), set(), set()),
        # p=1 and p=2 fit (616, 796 and 828 do not); both cost 1980 B: a tie, both cheapest
        (600, {1, 2}, {1, 2}, {(1, 2), (2, 3), SKIP}, {(1, 2), (2, 3), SKIP}),
        # p=0 .. p=3 fit (828 does not); p=0 alone costs 1468 B
        (800, {0, 1, 2, 3}, {0}, {(0, 1), (1, 2), (2, 3), (3, 4), SKIP}, {(0, 1), SKIP}),
        # every cut fits; p=0 and p=4 tie at 1468 B
        (840, {0, 1, 2, 3, 4}, {0, 4}, {(0, 1), (1, 2), (2, 3), (3, 4), SKIP, (4, 5)},
         {(0, 1), SKIP, (4, 5)}),
    ],
)  # fmt: skip
def test_fixing_and_cheapest_cuts_are_the_hand_computed_ones(
    beta, fixing, cheapest, fixing_edges, cheapest_edges
) -> None:
    cm = residual(beta)
    assert not cm.is_valid(RES_ALL)  # whole block: 860 B
    truth = cut_truth(cm, RES_ALL)
    assert (truth.fixing, truth.cheapest) == (fixing, cheapest)
    assert (truth.fixing_edges, truth.cheapest_edges) == (fixing_edges, cheapest_edges)


def test_random_edge_is_the_share_of_fixing_and_cheapest_edges() -> None:
    assert random_hits(cut_truth(residual(800), RES_ALL)) == (5 / 6, 2 / 6)
    assert random_hits(cut_truth(residual(600), RES_ALL)) == (3 / 6, 3 / 6)


def test_top1_is_the_first_ranked_edge_inside_the_group() -> None:
    truth = cut_truth(residual(800), RES_ALL)
    assert top1_hits(truth, [(4, 5), (0, 1)]) == (0.0, 0.0)  # spans p=4 only
    assert top1_hits(truth, [(1, 2)]) == (1.0, 0.0)  # p=1 fixes at 1980 B, not the cheapest
    assert top1_hits(truth, [(6, 7), SKIP]) == (1.0, 1.0)  # (6, 7) is outside: skipped
    assert top1_hits(truth, []) == (0.0, 0.0)


def test_middle_edge_spans_the_middle_cut_then_the_nearest() -> None:
    # cut positions 0..4, middle 2: spanned by (0, 4) and (2, 3); (1, 2) and (3, 4) are one
    # position away, (0, 1) and (4, 5) two; ties by label
    order = MiddleRanker(residual(800)).rank(RES_ALL)
    assert order == [SKIP, (2, 3), (1, 2), (3, 4), (0, 1), (4, 5)]
    assert top1_hits(cut_truth(residual(800), RES_ALL), order) == (1.0, 1.0)


class Fixed:
    """A ranker naming the same edges first whatever the group."""

    name = "fixed"

    def __init__(self, edges) -> None:
        self.edges = edges

    def rank(self, group):
        return self.edges


def test_rates_leave_out_groups_that_need_two_cuts() -> None:
    drawn = {500: (residual(500), [RES_ALL]), 800: (residual(800), [RES_ALL])}
    report = judge_rankers(drawn, {"tree": CostModelRanker, "fixed": lambda cm: Fixed([(1, 2)])})
    assert [(d.buffer_kb, d.groups, d.needs_two_cuts) for d in report.draws] == [
        (500, 1, 1),
        (800, 1, 0),
    ]
    assert report.draws[1].fixing_positions == 4 / 5
    score = {(s.ranker, s.buffer_kb): s for s in report.scores}
    assert [s.ranker for s in report.scores] == ["tree"] * 3 + ["fixed"] * 3 + ["random"] * 3
    assert score["tree", 500].groups == 0  # the group needing two cuts is not ranked
    # the cost ranker's best edge spans p=0, the cheapest cut; (1, 2) only a fixing one
    assert (score["tree", 800].fixing, score["tree", 800].cheapest) == (1.0, 1.0)
    assert (score["fixed", None].fixing, score["fixed", None].cheapest) == (1.0, 0.0)
    assert (score["random", None].groups, score["random", None].fixing) == (1, 5 / 6)


def test_the_draw_is_deterministic_and_keeps_invalid_groups_a_search_could_see(
    tmp_path: Path,
) -> None:
    model = str(save(wide_chains(), tmp_path, "wide"))
    drawn = draw_invalid_groups(model, "lbdf", (1,), groups=5, seed=3)
    assert drawn.keys() == {1}
    for cm, groups in drawn.values():
        assert len(groups) == 5
        bad = unfusable_nodes(cm)
        for g in groups:
            assert MIN_OPS <= g.bit_count() <= MAX_OPS
            assert not cm.is_valid(g) and not g & bad
    again = draw_invalid_groups(model, "lbdf", (1,), groups=5, seed=3)
    assert {kb: gs for kb, (_, gs) in again.items()} == {kb: gs for kb, (_, gs) in drawn.items()}


def test_command_judges_and_writes_json(tmp_path: Path) -> None:
    model = save(wide_chains(), tmp_path, "wide")
    out = tmp_path / "cuts.json"
    result = CliRunner().invoke(
        cli,
        ["train", "explain-eval", str(model), "--scheme", "lbdf", "--groups", "3",
         "--buffers", "1KB", "--explainers", "pg", "--json", str(out), "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "top-1 cheapest" in result.output
    data = json.loads(out.read_text())
    assert [(d["buffer_kb"], d["groups"]) for d in data["draws"]] == [(1, 3)]
    rankers = [(s["ranker"], s["buffer_kb"]) for s in data["scores"]]
    assert rankers == [(r, kb) for r in ("pg", "tree", "middle", "random") for kb in (1, None)]
    for s in data["scores"]:
        assert 0 <= s["cheapest"] <= s["fixing"] <= 1  # a cheapest cut is a fixing one


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--explainers", "pg,nope"], "Invalid value for --explainers"),
        (["--explainers", "pg,pg"], "Invalid value for --explainers"),
        (["--buffers", "1500B"], "Invalid value for --buffers: whole KB sizes"),
        (["--groups", "0"], "Invalid value for '--groups'"),
    ],
)
def test_bad_options_fail_in_one_line_before_any_work(tmp_path, args, message) -> None:
    model = save(residual_block(), tmp_path, "res")
    result = CliRunner().invoke(
        cli, ["train", "explain-eval", str(model), "--scheme", "brr", *args]
    )
    assert result.exit_code != 0
    assert message in result.output
