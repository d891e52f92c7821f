"""Explainers judged by what a split needs (``fusionplan train explain-eval``, issue 28).

A splitter turns a ranked edge (u, v) into the topological cuts it spans
(:func:`fusionplan.planning.split.positions_between`). For an invalid group the cost model
says which single cuts *fix* it (every part fits the buffer) and which fixing cut is the
*cheapest* (least summed DRAM of its parts; equal-cost positions are all cheapest). An edge
is fixing / cheapest when it spans such a position. A ranker is scored on its top-1 edge:
how often it is fixing, how often cheapest -- the explainers (``gnne``, ``pg``, ``rg``), the
cost-model ranker ``tree``, the model-free ``middle`` edge (:class:`MiddleRanker`) and a random
edge (its expected value, the share of the group's edges that are fixing / cheapest, so the
baseline is exact and deterministic).

Groups are drawn as ``fusionplan train eval`` draws them (:func:`draw_invalid_groups`).
Groups that no single cut fixes (they need two or more cuts) are left out of the rates and
counted apart: no edge can be right for them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from accel_model import unfusable_nodes
from explainers.eval_gin import DEFAULT_EVAL_GROUPS
from explainers.ranking import ExplainerRanker
from explainers.splitters import load_explainer
from fusionplan.data.dataset import plan_generation
from fusionplan.data.sampling import model_context, sample_groups
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group
from fusionplan.ir.partition import cut_at, topological_positions
from fusionplan.planning.split import CostModelRanker, EdgeRanker, group_edges, positions_between

if TYPE_CHECKING:
    from accel_model.base import CostModel
    from fusionplan.planning.split import Edge

DEFAULT_CUT_GROUPS = 70
CUT_BUFFERS_KB: tuple[int, ...] = (64, 128, 512)
MIN_OPS, MAX_OPS = 8, 63
"""Group sizes judged: the dataset's size bins 8-15, 16-31 and 32-63."""
MAX_DRAW = 16 * DEFAULT_EVAL_GROUPS
"""The largest draw tried for enough invalid groups (8,000 groups of the model)."""
RANDOM, TREE, MIDDLE = "random", "tree", "middle"


@dataclass(frozen=True)
class CutTruth:
    """What the cost model says about the single topological cuts of one invalid group."""

    group: Group
    edges: tuple[Edge, ...]
    fixing: frozenset[int]
    """Cut positions after which every part fits."""
    cheapest: frozenset[int]
    """The fixing positions of least summed DRAM (empty when nothing fixes the group)."""

    def spans(self, edge: Edge, positions: frozenset[int]) -> bool:
        """Whether a cut the splitter derives from ``edge`` is one of ``positions``."""
        return any(p in positions for p in positions_between(self.group, edge))

    @property
    def fixing_edges(self) -> frozenset[Edge]:
        return frozenset(e for e in self.edges if self.spans(e, self.fixing))

    @property
    def cheapest_edges(self) -> frozenset[Edge]:
        return frozenset(e for e in self.edges if self.spans(e, self.cheapest))


def cut_truth(cost_model: CostModel, group: Group) -> CutTruth:
    """The fixing and cheapest single cuts of ``group`` under ``cost_model``."""
    graph = cost_model.graph
    dram: dict[int, int] = {}
    for p in topological_positions(group):
        parts = cut_at(graph, group, p)
        if all(cost_model.is_valid(part) for part in parts):
            dram[p] = sum(cost_model.dram_bytes(part) for part in parts)
    least = min(dram.values(), default=None)
    return CutTruth(
        group,
        tuple(group_edges(graph, group)),
        frozenset(dram),
        frozenset(p for p, d in dram.items() if d == least),
    )


def draw_invalid_groups(
    model: str,
    scheme: str,
    buffers_kb: Sequence[int],
    groups: int = DEFAULT_CUT_GROUPS,
    seed: int = 0,
) -> dict[int, tuple[CostModel, list[Group]]]:
    """Per buffer (KB): the labelling cost model and up to ``groups`` invalid groups of
    ``model`` with 8-63 ops, drawn uniformly (by ``seed``) from what
    ``fusionplan train eval MODEL --groups D --seed SEED`` draws. D starts at the eval
    default (500) and doubles (to at most 8,000) until every buffer has ``groups`` of them
    or a doubled draw finds no new group.
    Groups holding an op that does not fit alone are left out: a search never proposes
    them (such ops run layer by layer) and no cut can fix them."""
    draw, seen = DEFAULT_EVAL_GROUPS, -1
    while True:
        # only the plan's shard specs are used: no directory is read or written
        plan = plan_generation(
            ".",
            seed=seed,
            groups=0,
            unseen_groups=draw,
            models=[],
            unseen_models=[model],
            buffers_kb=buffers_kb,
            schemes=[scheme],
        )
        pool: set[Group] = set()
        ctx = None
        for spec in plan.shards:
            if spec.lo >= MIN_OPS and spec.hi <= MAX_OPS:
                ctx = model_context(spec, plan.graphs[spec.model])
                pool.update(sample_groups(ctx, spec)[0])
        if ctx is None:
            raise ConfigError(f"model {model!r} has fewer than {MIN_OPS} ops: no group to judge")
        eligible = {}
        for kb in buffers_kb:
            cm = ctx.models[(scheme, kb * 1024)]
            bad = unfusable_nodes(cm)
            eligible[kb] = (cm, [g for g in sorted(pool) if not g & bad and not cm.is_valid(g)])
        if (
            draw >= MAX_DRAW
            or len(pool) == seen  # a small model: drawing more finds no new group
            or all(len(gs) >= groups for _, gs in eligible.values())
        ):
            break
        draw, seen = 2 * draw, len(pool)
    return {
        kb: (cm, sorted(random.Random(f"{seed}:{kb}").sample(gs, min(groups, len(gs)))))
        for kb, (cm, gs) in eligible.items()
    }


class MiddleRanker:
    """No model: edges by how far their span lies from the group's middle cut position (0
    when they span it), ties by label. The reference a learned ranker has to beat: a long
    edge spans many cuts, and a middle cut often leaves two parts that fit."""

    name = MIDDLE

    def __init__(self, cost_model: CostModel) -> None:
        self.graph = cost_model.graph

    def rank(self, group: Group) -> list[Edge]:
        positions = topological_positions(group)
        if not positions:
            return []
        middle = positions[len(positions) // 2]

        def distance(edge: Edge) -> int:
            span = positions_between(group, edge)
            return 0 if span[0] <= middle <= span[-1] else min(abs(p - middle) for p in span)

        return sorted(group_edges(self.graph, group), key=lambda e: (distance(e), e))


def top1_hits(truth: CutTruth, ranked: Sequence[Edge]) -> tuple[float, float]:
    """(fixing, cheapest) of the first ranked edge inside the group, each 1.0 or 0.0."""
    g = truth.group
    top = next((e for e in ranked if (g >> e[0]) & (g >> e[1]) & 1), None)
    if top is None:
        return 0.0, 0.0
    return float(truth.spans(top, truth.fixing)), float(truth.spans(top, truth.cheapest))


def random_hits(truth: CutTruth) -> tuple[float, float]:
    """A uniformly random edge's chance of being fixing and cheapest: exact, not sampled."""
    n = len(truth.edges)
    return len(truth.fixing_edges) / n, len(truth.cheapest_edges) / n


@dataclass(frozen=True)
class DrawSummary:
    """The invalid groups judged at one buffer."""

    buffer_kb: int
    groups: int
    needs_two_cuts: int
    """Groups no single cut fixes: left out of the rates (no edge can be right for them)."""
    mean_ops: float
    fixing_positions: float
    """Mean share of a group's cut positions that fix it (how easy the group is)."""


@dataclass(frozen=True)
class RankerScore:
    """One ranker's top-1 edge at one buffer (``buffer_kb`` None: all buffers together)."""

    ranker: str
    buffer_kb: int | None
    groups: int
    """Groups with a fixing single cut: the rates' denominator."""
    fixing: float
    cheapest: float
    seconds: float
    """Mean seconds ranking one group (0 for the random baseline, an expectation)."""
    gin_valid: int | None = None
    """Explainers: groups the GIN called valid (the explainer still explains "invalid")."""

    @classmethod
    def of(
        cls,
        ranker: str,
        buffer_kb: int | None,
        hits: Sequence[tuple[float, float]],
        seconds: float,
        gin_valid: int | None = None,
    ) -> RankerScore:
        n = len(hits)
        return cls(
            ranker,
            buffer_kb,
            n,
            sum(h[0] for h in hits) / n if n else 0.0,
            sum(h[1] for h in hits) / n if n else 0.0,
            seconds / n if n else 0.0,
            gin_valid,
        )


@dataclass(frozen=True)
class CutReport:
    """What ``fusionplan train explain-eval`` prints and writes as JSON."""

    draws: tuple[DrawSummary, ...]
    scores: tuple[RankerScore, ...]
    """Per ranker, its score at every buffer, then over all buffers."""

    def to_json(self) -> dict[str, Any]:
        return {
            "draws": [asdict(d) for d in self.draws],
            "scores": [asdict(s) for s in self.scores],
        }


RankerFactory = Callable[["CostModel"], EdgeRanker]


def judge_rankers(
    drawn: dict[int, tuple[CostModel, list[Group]]],
    rankers: dict[str, RankerFactory],
    progress: Callable[[int, int], None] | None = None,
) -> CutReport:
    """Score every ranker (built per buffer's cost model) and the random edge on the
    ``drawn`` groups (:func:`draw_invalid_groups`); ``progress(done, total)`` per group."""
    names = [*rankers, RANDOM]
    hits: dict[tuple[str, int], list[tuple[float, float]]] = {}
    seconds: dict[tuple[str, int], float] = {}
    gin_valid: dict[tuple[str, int], int] = {}
    draws = []
    total, done = sum(len(gs) for _, gs in drawn.values()), 0
    for kb, (cm, groups) in drawn.items():
        built = {name: make(cm) for name, make in rankers.items()}
        for name in names:
            hits[name, kb], seconds[name, kb] = [], 0.0
        truths = []
        for g in groups:
            t = cut_truth(cm, g)
            truths.append(t)
            if t.fixing:  # a group that needs two cuts is not ranked: no edge is right
                hits[RANDOM, kb].append(random_hits(t))
                for name, ranker in built.items():
                    start = time.perf_counter()
                    ranked = ranker.rank(g)
                    seconds[name, kb] += time.perf_counter() - start
                    hits[name, kb].append(top1_hits(t, ranked))
            done += 1
            if progress is not None:
                progress(done, total)
        for name, ranker in built.items():
            if isinstance(ranker, ExplainerRanker):
                gin_valid[name, kb] = ranker.stats.disagreements
        n = len(truths) or 1
        draws.append(
            DrawSummary(
                kb,
                len(truths),
                sum(not t.fixing for t in truths),
                sum(t.group.bit_count() for t in truths) / n,
                sum(len(t.fixing) / (t.group.bit_count() - 1) for t in truths) / n,
            )
        )
    scores = []
    for name in names:
        for kb in drawn:
            scores.append(
                RankerScore.of(
                    name, kb, hits[name, kb], seconds[name, kb], gin_valid.get((name, kb))
                )
            )
        pooled = [h for kb in drawn for h in hits[name, kb]]
        spent = sum(seconds[name, kb] for kb in drawn)
        gin = [gin_valid[name, kb] for kb in drawn if (name, kb) in gin_valid]
        scores.append(RankerScore.of(name, None, pooled, spent, sum(gin) if gin else None))
    return CutReport(tuple(draws), tuple(scores))


def explain_eval(
    model: str,
    scheme: str,
    *,
    groups: int = DEFAULT_CUT_GROUPS,
    buffers_kb: Sequence[int] = CUT_BUFFERS_KB,
    explainers: Sequence[str] = ("gnne", "pg", "rg"),
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> CutReport:
    """The explainers of ``scheme`` (shipped or ``$FUSIONPLAN_WEIGHTS_DIR`` weights), the
    cost-model ranker ``tree``, the ``middle`` edge and a random edge, judged on ``groups``
    invalid groups of ``model`` per buffer."""
    loaded = {kind: load_explainer(kind, scheme, seed) for kind in explainers}
    rankers: dict[str, RankerFactory] = {
        kind: (lambda cm, e=e, kind=kind: ExplainerRanker(cm, e, kind))
        for kind, e in loaded.items()
    }
    rankers[TREE] = CostModelRanker
    rankers[MIDDLE] = MiddleRanker
    drawn = draw_invalid_groups(model, scheme, buffers_kb, groups, seed)
    return judge_rankers(drawn, rankers, progress)
