"""Splitting invalid groups: RandomSplitter and TreeSplitter (Algorithm 1).

Labels: residual_block 0 stem, 1 conv1, 2 relu1, 3 conv2, 4 add(conv2, stem), 5 relu2;
strided_chain 0 relu0, 1 conv_s (stride 2), 2 conv_b, 3 conv_c.

LBDF costs of the whole residual block and of its topological cuts (bytes, from the cost
model; see test_cost_lbdf for the formulas): whole 860 buffer / 956 DRAM;
cut p=0 -> {0} 276/660 + {1..5} 616/808 = 1468 DRAM;  p=1 -> 520/1064 + 404/916 = 1980;
p=2 -> 552/1064 + 372/916 = 1980;  p=3 -> 796/1212 + 128/768 = 1980;
p=4 -> 828/956 + 64/512 = 1468. (Each part holds 32 B a row: e.g. {0, 1} x 3 rows, stem.out
3, conv1.out 1 = 7 rows, 224 + 296 weights = 520; {2..5} conv1.out 1, relu1.out 3, conv2.out
1, stem.out 1 (the add reads it from outside at its start), add.out 1, y 1 = 8 rows, 256 +
148 = 404.)
"""

from __future__ import annotations

import random

import pytest

from accel_model import Accelerator, make_cost_model, unfusable_nodes
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import bits, is_weakly_connected, lowest, quotient_order
from fusionplan.ir.partition import cut_at, groups_from_cut_edges, make_sound
from fusionplan.planning.plan import Plan
from fusionplan.planning.split import (
    CostModelRanker,
    RandomSplitter,
    TreeConfig,
    TreeSplitter,
    group_edges,
    make_splitter,
    positions_between,
)
from tests.onnx_builders import residual_block, strided_chain, to_graph

RES_ALL = 0b111111


def lbdf(builder, beta: int):
    return make_cost_model(to_graph(builder()), Accelerator(beta, "lbdf", 1))


class FixedRanker:
    """An explainer stand-in: names ``first`` (most responsible first), then every other
    edge of the group in label order. Counts how often it is asked."""

    name = "fixed"

    def __init__(self, graph, first=()) -> None:
        self.graph, self.first, self.calls = graph, list(first), 0

    def rank(self, group):
        self.calls += 1
        rest = [e for e in group_edges(self.graph, group) if e not in self.first]
        return self.first + rest


class EmptyRanker:
    name = "empty"

    def rank(self, group):
        return []


class CountingRanker(CostModelRanker):
    def __init__(self, cm) -> None:
        super().__init__(cm)
        self.calls = 0

    def rank(self, group):
        self.calls += 1
        return super().rank(group)


def dram(cm, parts) -> int:
    return sum(cm.dram_bytes(p) for p in parts)


def check_split(cm, group, parts) -> None:
    """Parts exactly cover ``group``, each fits, each is connected, and they are acyclic."""
    union = 0
    for p in parts:
        assert p and not union & p
        union |= p
    assert union == group
    for p in parts:
        assert cm.compute_uncached(p).valid or p.bit_count() == 1
        assert is_weakly_connected(cm.graph, p)
    assert quotient_order(cm.graph, list(parts)) is not None


# ----------------------------------------------------------------------------- cover, valid, sound
@pytest.mark.parametrize("kind", ["random", "tree"])
@pytest.mark.parametrize("beta", [250, 400, 500, 700])
def test_split_small_group(kind, beta):
    cm = lbdf(residual_block, beta)
    assert not cm.is_valid(RES_ALL)
    parts = make_splitter(kind, cm).split(RES_ALL)
    assert len(parts) >= 2
    check_split(cm, RES_ALL, parts)


@pytest.fixture(scope="module")
def resnet18():
    from fusionplan.data.zoo import resolve_model

    return resolve_model("resnet18")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "tree"])
@pytest.mark.parametrize("buffer", ["64KB", "256KB"])
def test_split_real_model_plans(resnet18, kind, buffer):
    """Random proposals on ResNet-18, made sound and split, are valid plans end to end."""
    cm = make_cost_model(resnet18, Accelerator.of(buffer, "lbdf"))
    splitter = make_splitter(kind, cm, seed=1)
    unf = unfusable_nodes(cm)
    fusable = resnet18.all_nodes & ~unf
    pairs = sorted({(e.src, e.dst) for e in resnet18.edges})
    edges = [(u, v) for u, v in pairs if (fusable >> u) & (fusable >> v) & 1]
    rng = random.Random(0)
    split_any = False
    for _ in range(15):
        p = rng.random()
        proposal = groups_from_cut_edges(
            resnet18, fusable, [rng.random() < p for _ in edges], edges
        )
        sound = make_sound(resnet18, [*proposal, *(1 << v for v in bits(unf))])
        final = []
        for g in sound:
            if g & unf:
                final.append(g)
                continue
            parts = splitter.split(g)
            check_split(cm, g, parts)
            split_any |= parts != [g]
            final.extend(parts)
        Plan(resnet18, cm, sorted(final, key=lowest)).validate()
    assert split_any and splitter.stats.invalid_groups > 0


# ----------------------------------------------------------------------------- memo and counters
@pytest.mark.parametrize("kind", ["random", "tree"])
def test_memo_hit_on_repeat(kind):
    cm = lbdf(residual_block, 400)
    splitter = make_splitter(kind, cm)
    first = splitter.split(RES_ALL)
    second = splitter.split(RES_ALL)
    assert second == first
    st = splitter.stats
    assert (st.calls, st.invalid_groups, st.memo_hits) == (2, 1, 1)


def test_tree_memo_does_not_ask_the_ranker_again():
    cm = lbdf(residual_block, 400)
    ranker = CountingRanker(cm)
    splitter = TreeSplitter(cm, ranker)
    splitter.split(RES_ALL)
    asked = ranker.calls
    assert asked >= 1
    splitter.split(RES_ALL)
    assert ranker.calls == asked


def test_valid_groups_and_single_ops_are_not_split():
    cm = lbdf(residual_block, 400)
    assert cm.is_valid(0b000110)  # {conv1, relu1}: 148 + (3 + 1 + 1) rows * 32 = 308 B
    for splitter in (RandomSplitter(cm), TreeSplitter(cm, CostModelRanker(cm))):
        assert splitter.split(0b000110) == [0b000110]
        assert splitter.stats.calls == 1 and splitter.stats.invalid_groups == 0
    cm = lbdf(residual_block, 100)  # every conv is unfusable alone (148 + 4 rows * 32 = 276 B)
    splitter = RandomSplitter(cm)
    assert splitter.split(1 << 1) == [1 << 1]
    assert splitter.stats.invalid_groups == 0


def test_tree_with_cost_ranker_rectifies():
    cm = lbdf(residual_block, 400)  # needs two levels: no single cut makes both parts fit
    assert all(not all(cm.is_valid(p) for p in cut_at(cm.graph, RES_ALL, q)) for q in range(5))
    splitter = TreeSplitter(cm, CostModelRanker(cm))
    parts = splitter.split(RES_ALL)
    check_split(cm, RES_ALL, parts)
    assert len(parts) >= 3
    st = splitter.stats
    assert (st.invalid_groups, st.rectified, st.fallbacks) == (1, 1, 0)
    assert st.rectify_rate == 1.0


def test_random_splitter_never_rectifies():
    splitter = RandomSplitter(lbdf(residual_block, 400))
    splitter.split(RES_ALL)
    splitter.split(0b011111)
    st = splitter.stats
    assert st.invalid_groups == 2 and st.rectified == 0 and st.rectify_rate == 0.0


class OutsideRanker:
    name = "outside"

    def rank(self, group):
        return [(0, 1), (4, 5)]


@pytest.mark.parametrize("ranker", [EmptyRanker(), OutsideRanker()], ids=["nothing", "outside"])
def test_ranker_without_usable_edges_falls_back_to_random(ranker):
    cm = lbdf(residual_block, 400)
    group = 0b011110  # conv1 .. add: invalid (296 + 9 rows * 32 = 584 B); (0, 1), (4, 5) leave it
    assert not cm.is_valid(group)
    splitter = TreeSplitter(cm, ranker, seed=3)
    parts = splitter.split(group)
    check_split(cm, group, parts)
    st = splitter.stats
    assert st.fallbacks == 1 and st.rectified == 0 and st.invalid_groups == 1
    assert parts == RandomSplitter(cm, seed=3).split(group)


def test_fallback_anywhere_in_the_tree_is_not_rectified():
    # the ranker names (4, 5) for the whole block and nothing for smaller groups: the cut
    # leaves {stem..add} (892 B) invalid and only a random cut can split it
    cm = lbdf(residual_block, 400)

    class FirstLevelOnly:
        name = "first-level"

        def rank(self, group):
            return [(4, 5)] if group == RES_ALL else []

    splitter = TreeSplitter(cm, FirstLevelOnly())
    parts = splitter.split(RES_ALL)
    check_split(cm, RES_ALL, parts)
    assert 1 << 5 in parts
    assert splitter.stats.fallbacks == 1 and splitter.stats.rectified == 0


def test_max_depth_zero_is_the_random_splitter():
    cm = lbdf(residual_block, 400)
    ranker = CountingRanker(cm)
    tree = TreeSplitter(cm, ranker, seed=7, config=TreeConfig(max_depth=0))
    assert tree.split(RES_ALL) == RandomSplitter(cm, seed=7).split(RES_ALL)
    assert ranker.calls == 0
    assert tree.stats.fallbacks == 1 and tree.stats.rectified == 0


# ----------------------------------------------------------------------------- Algorithm 1 choices
def test_category1_takes_the_cheapest_all_valid_cut():
    # beta 850: every cut of the block fits (its largest part 828 B), the block (860 B) does
    # not; the ranker names the 1980-B cut (p=2) first and the 1468-B cut (p=0) second: the
    # splitter must take the cheaper one, not the first
    cm = lbdf(residual_block, 850)
    g = cm.graph
    cuts = {p: cut_at(g, RES_ALL, p) for p in (0, 2)}
    assert all(cm.is_valid(part) for parts in cuts.values() for part in parts)
    assert dram(cm, cuts[2]) == 1064 + 916 and dram(cm, cuts[0]) == 660 + 808
    for first in ([(2, 3), (0, 1)], [(0, 1), (2, 3)]):
        splitter = TreeSplitter(cm, FixedRanker(g, first), config=TreeConfig(top_edges=2))
        parts = splitter.split(RES_ALL)
        assert sorted(parts) == sorted(cuts[0])
        assert dram(cm, parts) == 1468
        assert splitter.stats.rectified == 1


def test_category1_on_a_strided_chain():
    # {relu0, conv_s, conv_b} at 1350 B: needs 880 + x 64 + relu0.out 192 + conv_s.out 192
    # + conv_b.out 64 = 1392 B. Both cuts fit (the largest part, {conv_s, conv_b}, 1328 B):
    # p=0: {relu0} 2048 + {conv_s, conv_b} 2416 = 4464; p=1: {relu0, conv_s} 1832 + {conv_b} 1608
    cm = lbdf(strided_chain, 1350)
    group = 0b0111
    assert not cm.is_valid(group)
    cut0, cut1 = cut_at(cm.graph, group, 0), cut_at(cm.graph, group, 1)
    assert all(cm.is_valid(p) for p in cut0 + cut1)
    assert (dram(cm, cut0), dram(cm, cut1)) == (2048 + 2416, 1832 + 1608)
    splitter = TreeSplitter(cm, FixedRanker(cm.graph, [(0, 1), (1, 2)]))
    assert sorted(splitter.split(group)) == sorted(cut1)


@pytest.mark.parametrize("bad", [(1, 2), (3, 4), (4, 5)])
def test_planted_bad_edge_is_where_the_tree_cuts(bad):
    # beta 850: any single cut fits, so the explainer's top edge alone decides where to cut
    cm = lbdf(residual_block, 850)
    splitter = TreeSplitter(cm, FixedRanker(cm.graph, [bad]), config=TreeConfig(top_edges=1))
    parts = splitter.split(RES_ALL)
    assert sorted(parts) == sorted(cut_at(cm.graph, RES_ALL, bad[0]))
    assert splitter.stats.rectified == 1


def test_planted_skip_edge_tries_every_cut_it_spans():
    # the skip edge stem -> add spans positions 0..3; the cheapest all-valid one is p=0
    cm = lbdf(residual_block, 850)
    assert positions_between(RES_ALL, (0, 4)) == [0, 1, 2, 3]
    splitter = TreeSplitter(cm, FixedRanker(cm.graph, [(0, 4)]), config=TreeConfig(top_edges=1))
    assert sorted(splitter.split(RES_ALL)) == sorted(cut_at(cm.graph, RES_ALL, 0))


def test_category2_keeps_the_largest_valid_side():
    # beta 400, candidate cuts p=0 ({stem} fits), p=3 ({add, relu2} fits), p=4 ({relu2}
    # fits), each with an invalid other side: keep {add, relu2}, recurse on the rest
    cm = lbdf(residual_block, 400)
    ranker = FixedRanker(cm.graph, [(0, 1), (3, 4), (4, 5)])
    parts = TreeSplitter(cm, ranker, config=TreeConfig(top_edges=3)).split(RES_ALL)
    check_split(cm, RES_ALL, parts)
    assert 0b110000 in parts


# ----------------------------------------------------------------------------- helpers, registry
def test_group_edges_and_positions():
    g = to_graph(residual_block())
    assert group_edges(g, RES_ALL) == [(0, 1), (0, 4), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert group_edges(g, 0b010011) == [(0, 1), (0, 4)]
    assert positions_between(0b010011, (0, 4)) == [0, 1]


def test_registry():
    cm = lbdf(residual_block, 400)
    assert isinstance(make_splitter("random", cm, 1), RandomSplitter)
    tree = make_splitter("tree", cm, 1)
    assert isinstance(tree, TreeSplitter) and tree.name == "tree[cost]"
    # explainer splitters (gnne, pg, rg) join the list once their package is imported
    with pytest.raises(ConfigError, match=r"unknown splitter 'gin' \(choose from .*random.*tree"):
        make_splitter("gin", cm)


def test_random_splitter_is_deterministic_per_seed():
    cm = lbdf(residual_block, 300)
    runs = {tuple(RandomSplitter(cm, seed).split(RES_ALL)) for seed in range(20)}
    assert len(runs) > 1  # the seed matters ...
    for seed in range(5):  # ... and fixes the result
        assert RandomSplitter(cm, seed).split(RES_ALL) == RandomSplitter(cm, seed).split(RES_ALL)
