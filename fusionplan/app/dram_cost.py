"""What a graph costs the accelerator: the DRAM traffic of the fusion planner's plan for it
(docs/design.md, "DRAM-driven substitution").

:class:`DramCost` prices a candidate graph by planning it: the rewritten :class:`ModelGraph`
is lowered to the planner's :class:`OpGraph` (:func:`lower`), planned with one
:class:`PlanRequest` (the accelerator's buffer, scheme and bytes per element) and costed in
DRAM bytes. A rewrite touches few ops, so pricing is incremental:

- every candidate's cost model prices groups through one shared shape memo
  (:meth:`accel_model.base.CostModel.share_shape_memo`): a group whose ops, shapes and
  surroundings the rewrite left alone is priced once per search;
- each candidate's search starts from its parent's plan, carried over by op name (an op a
  rule created runs alone, or joins its input's producer's group): a few thousand work units
  of LNS then re-plan around the rewrite;
- a rewrite the planner cannot see (same lowered graph) is not planned again.

Searches run with work budgets (``effort``), never seconds: the same command gives the same
bytes. :func:`choose` then re-plans the original and the few best graphs cold with the full
request of ``fusionplan plan``, gives the original the same extra planning (the control),
and keeps a rewrite only where its plan is cheaper than the control's and its cold plan no
dearer than the original's: the pass never returns a graph whose plan costs more DRAM than
the original's under that request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import onnx

from accel_model import CostModel
from accel_model.latency import make_latency_model
from fusionplan.app.pipeline import Pipeline, PlanRequest, assemble
from fusionplan.ir.graph import OpGraph, bits
from fusionplan.ir.lowering import lower as lower_model
from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import standard_graph
from fusionplan.passes.substitution.cost import GraphCost
from fusionplan.passes.substitution.pattern import Rule
from fusionplan.passes.substitution.pipeline import (
    ACCELERATOR_COSTS,
    AcceleratorSearch,
    SubstitutionRequest,
)
from fusionplan.passes.substitution.rules import make_rules
from fusionplan.passes.substitution.search import Backtracking, MetaFlow
from fusionplan.passes.substitution.search.base import (
    DEFAULT_BUDGET,
    Problem,
    RewriteCandidate,
    RewriteResult,
    Step,
    SubstitutionSearch,
)
from fusionplan.planning.plan import Plan

FINALISTS = 3
"""Graphs besides the original that :func:`choose` re-plans with the full request."""

DRAM_ALPHA = 1.25
"""TASO's slack for the DRAM cost: a graph up to a quarter dearer than the best is still
expanded, as an enlarged kernel (9x a 1x1's weights) pays only through the merge or the
factored Add it enables."""

PROXY_EFFORT = 0.02
"""The planner's effort (search/effort.py) on each candidate while searching, a fraction of
``fusionplan plan``'s: warm-started from the parent's plan, it only has to re-plan around
the rewrite."""

NEUTRAL_RULES: tuple[str, ...] = (
    "fuse-conv-activation",
    "fuse-gemm-activation",
    "fuse-conv-add-activation",
)
"""Rules whose graph lowers to the same planner graph: standard ONNX spells a fused contrib op
as the ops it fused, and the planner fuses an activation into its producer itself. They
enable the merges (siblings merge when their epilogues agree), so :func:`normalise` applies
them all before the search, which then spends no budget on them. (``fuse-conv-add`` is not
neutral: its FusedConv needs a bias, zeros where the conv had none.)"""

DRAM_RULES: tuple[str, ...] = (
    "merge-sibling-convs",
    "enlarge-conv-kernel",
    "merge-sibling-matmuls",
    "merge-sibling-gemms",
    "fuse-conv-bn",
    "fold-mul-into-conv",
    "fold-add-into-conv",
    "fold-mul-into-matmul",
    "factor-add-convs",
    "concat-add-convs",
    "factor-add-matmuls",
    "concat-add-matmuls",
    "concat-convs-exclusive",
    "merge-group-convs",
    "cancel-split-concat",
    "cancel-concat-split",
    "merge-concat-concat",
    "concat-of-split-prefix",
    "activation-through-concat",
    "activation-through-split",
)
"""The rules a DRAM search tries: every registered rule but the neutral ones, the layout
rules that only serve a GPU (``split-group-conv``, ``conv-add-identity``) and the matmul
reassociation (a planner prices matmuls by their operands, which it leaves alone)."""


def lower(g: ModelGraph) -> OpGraph:
    """The planner's graph of ``g``: its fused contrib ops as the standard ops they fuse, then
    the planner's lowering (no ONNX in between; only weights of up to 64 elements, the
    constants the lowering reads, are ever computed, so a candidate's derived weights never
    are)."""
    return lower_model(standard_graph(g), name=g.name)


Groups = tuple[tuple[str, ...], ...]


def named_groups(plan: Plan) -> Groups:
    """A plan's groups as op names, which survive a rewrite that leaves the op alone."""
    return _names(plan.groups, plan.graph)


def _names(groups: Sequence[int], graph: OpGraph) -> Groups:
    return tuple(tuple(graph.nodes[v].name for v in bits(grp)) for grp in groups)


def carry_over(groups: Groups, graph: OpGraph) -> tuple[tuple[int, ...], ...]:
    """``groups`` (of another graph, by op name) as masks of ``graph``, two ways: an op the
    other graph lacks is dropped from its group, and an op only ``graph`` has (a rule made it)
    runs alone, or joins the group of the op its first input comes from (a merged conv its
    input's producer, an activation its conv). The planner makes either valid and starts
    from both."""
    label = {n.name: v for v, n in enumerate(graph.nodes)}
    masks = [sum(1 << label[n] for n in grp if n in label) for grp in groups]
    masks = [m for m in masks if m]
    covered = 0
    for m in masks:
        covered |= m
    new = [v for v in range(len(graph)) if not covered >> v & 1]
    alone = (*masks, *(1 << v for v in new))
    joined = list(masks)
    home = {v: i for i, m in enumerate(joined) for v in bits(m)}
    for v in new:  # topological order: a new op's producer is placed before it
        ins = graph.nodes[v].inputs
        producer = graph.tensors[ins[0]].producer if ins else -1
        if producer >= 0 and producer in home:
            joined[home[producer]] |= 1 << v
            home[v] = home[producer]
        else:
            home[v] = len(joined)
            joined.append(1 << v)
    return alone, tuple(joined)


def lowered_key(graph: OpGraph) -> tuple:
    """What a plan of ``graph`` depends on: its ops and tensors without their names (a fused
    contrib op's expansion renames an activation), and its inputs and outputs."""
    return (
        tuple(replace(n, name="") for n in graph.nodes),
        tuple((t.shape, t.producer) for t in graph.tensors),
        graph.inputs,
        graph.outputs,
    )


def normalise(g: ModelGraph, rules: Sequence[Rule]) -> tuple[ModelGraph, tuple[Step, ...]]:
    """``g`` with every match of ``rules`` applied until none is left, and the steps; meant
    for :data:`NEUTRAL_RULES`. Each round applies, in match order, every match whose nodes no
    earlier match of the round has replaced (deterministic; one matching per round)."""
    steps: list[Step] = []
    while True:
        start = g
        for match in [m for rule in rules for m in rule.matches(start)]:
            if all(g.nodes.get(n) is start.nodes[n] for n in match.names):
                g = match.rule.apply(g, match)
                steps.append(Step(match.rule.name, match.names))
        if g is start:
            return g, tuple(steps)


@dataclass
class PricingStats:
    """How the incremental pricing went: candidates planned, seconds, and the share of group
    prices the shared shape memo answered (over groups new to a candidate's cost model)."""

    candidates: int = 0  # graphs planned
    proven: int = 0  # plans from a warm start the exact search proved optimal (joint)
    same_lowering: int = 0  # graphs whose lowering was planned already
    seconds: float = 0.0  # lowering and planning, over both
    groups: int = 0
    shared_hits: int = 0

    @property
    def seconds_per_candidate(self) -> float:
        priced = self.candidates + self.same_lowering
        return self.seconds / priced if priced else 0.0

    @property
    def hit_rate(self) -> float:
        return self.shared_hits / self.groups if self.groups else 0.0


@dataclass
class DramCost:
    """``cost(g)``: DRAM bytes of the planner's plan for ``g`` under ``request`` at the
    search's effort (``request.effort * scale``), warm-started from the plan of the graph
    :attr:`parent` names (set by :class:`DramProblem` before each child is priced)."""

    request: PlanRequest
    scale: float = PROXY_EFFORT
    joint: bool = False
    """Plan every candidate with ``request`` itself (the exact search, warm-started), not
    the LNS proxy: rewrites and fusion searched together."""
    stats: PricingStats = field(default_factory=PricingStats)
    parent: ModelGraph | None = None
    root_plan: Plan | None = None
    """The plan of the first graph priced (the original), with the full request."""
    _memo: dict = field(default_factory=dict, repr=False)
    _facts: dict = field(default_factory=dict, repr=False)
    _plans: dict[int, Groups] = field(default_factory=dict, repr=False)
    _bytes: dict[int, int] = field(default_factory=dict, repr=False)
    _lowered: dict[tuple, tuple[Groups, int]] = field(default_factory=dict, repr=False)

    @property
    def proxy(self) -> PlanRequest:
        """The search's request: LNS from the warm starts at a fraction of the plan's work
        (joint: the plan's own request)."""
        if self.joint:
            return self.request
        return replace(self.request, search="lns", effort=self.request.effort * self.scale)

    def __call__(self, g: ModelGraph) -> float:
        cached = self._bytes.get(g.fingerprint)
        if cached is not None:
            return float(cached)
        started = time.perf_counter()
        graph = lower(g)
        key = lowered_key(graph)
        known = self._lowered.get(key)
        if known is not None:  # a rewrite the planner cannot see: the same plan
            self.stats.same_lowering += 1
            plan_groups, dram = known
        else:
            if self.root_plan is None:  # the search's root: planned as ``fusionplan plan`` does
                plan = self.root_plan = self.plan(graph, self.request)
                plan_groups, dram = named_groups(plan), plan.metrics.dram_bytes
            else:  # from the parent's plan (a part of the graph: from the root's)
                parent = None if self.parent is None else self._plans.get(self.parent.fingerprint)
                start = parent or named_groups(self.root_plan)
                plan_groups, dram = self.improve(graph, carry_over(start, graph))
            self._lowered[key] = (plan_groups, dram)
            self.stats.candidates += 1
        self._plans[g.fingerprint] = plan_groups
        self._bytes[g.fingerprint] = dram
        self.stats.seconds += time.perf_counter() - started
        return float(dram)

    def known(self, g: ModelGraph) -> tuple[Groups, int] | None:
        """The search's plan of ``g`` (op names) and its DRAM bytes, if it priced ``g``."""
        fp = g.fingerprint
        return (self._plans[fp], self._bytes[fp]) if fp in self._bytes else None

    def plan(self, graph: OpGraph, request: PlanRequest) -> Plan:
        """The plan ``fusionplan plan`` makes of ``graph`` under ``request`` (the shared
        shape memo changes no price and no work count, so not the plan either)."""
        pipeline = self._assemble(graph, request)
        plan = pipeline.run()
        self._count(pipeline.cost_model)
        return plan

    def improve(self, graph: OpGraph, warm: Sequence[tuple[int, ...]]) -> tuple[Groups, int]:
        """The proxy's plan of ``graph`` from the ``warm`` plans, as op names, and its DRAM
        bytes: the search only (no certificate, no validation: its plans are valid by
        construction and only the best is kept)."""
        pipeline = self._assemble(graph, self.proxy)
        pipeline.problem.warm_start = list(warm)
        found = pipeline.search.run(pipeline.problem, self.request.seed)
        self._count(pipeline.cost_model)
        self.stats.proven += found.exact is not None and found.exact.optimal
        best = found.best
        return _names(best.groups, graph), best.dram

    def _assemble(self, graph: OpGraph, request: PlanRequest) -> Pipeline:
        return assemble(graph, request, shape_memo=(self._memo, self._facts))

    def _count(self, cm: CostModel) -> None:
        self.stats.groups += cm.stats.queries - cm.stats.hits
        self.stats.shared_hits += cm.stats.shape_hits


@dataclass
class DramProblem(Problem):
    """A :class:`Problem` whose cost is a :class:`DramCost`: it tells the cost which graph a
    child came from, so the child's plan starts from its parent's."""

    def child(self, parent: RewriteCandidate, match):  # type: ignore[override]
        self.cost.parent = parent.graph  # type: ignore[attr-defined]
        return super().child(parent, match)

    def replay(
        self, start: RewriteCandidate, steps, *, skip_missing: bool = False
    ) -> RewriteCandidate:
        self.cost.parent = start.graph  # type: ignore[attr-defined]
        return super().replay(start, steps, skip_missing=skip_missing)

    def fork(self, budget: int) -> Problem:
        return DramProblem(self.rules, self.cost, max(budget, 0), self.max_growth, self.progress)


@dataclass(frozen=True)
class Priced:
    """A graph the pass may keep, with its plan's DRAM both ways: planned cold with the full
    request (what ``fusionplan plan`` gives on it alone) and the best plan known for it (the
    cold one, or the search's, whichever is cheaper: what a planner warm-started from the
    pass's plan gives)."""

    candidate: RewriteCandidate
    cold_bytes: int
    bytes: int
    groups: Groups  # the best plan known, as op names


@dataclass(frozen=True)
class Choice:
    """The graph the DRAM pass keeps, and every graph it re-planned (the original first)."""

    best: Priced
    original: Priced
    priced: tuple[Priced, ...]


def choose(
    cost: DramCost,
    original: RewriteCandidate,
    finalists: Sequence[RewriteCandidate],
    imported: OpGraph | None = None,
) -> Choice:
    """Re-plan ``original`` and ``finalists`` cold with the full request of ``fusionplan
    plan`` and keep the graph whose best known plan is cheapest among those whose cold plan
    is no dearer than the original's (so the kept graph costs no more DRAM than no pass
    whether the planner starts from the pass's plan or not); a tie keeps the graph with
    fewer steps, so a rewrite that saves nothing is not applied. The original's own plan gets
    the same extra work a candidate's got (LNS from its cold plan at the search's effort), so
    a rewrite is kept only for what the rewrite saves. ``imported``: the original as the
    planner imports its model file, planned cold instead where its lowering differs."""
    request = cost.request
    graph = lower(original.graph)
    if imported is not None and lowered_key(imported) != lowered_key(graph):
        graph = imported
        base = cost.plan(graph, request)
    else:
        cost(original.graph)  # its cold plan is the search root's, priced once
        base = cost.root_plan
    assert base is not None
    improved, dram = cost.improve(graph, (base.groups,))
    cold = base.metrics.dram_bytes
    groups = improved if dram < cold else named_groups(base)
    first = Priced(original, cold, min(cold, dram), groups)
    best, rows = first, [first]
    seen = {original.graph.fingerprint}
    for c in finalists:
        if c.graph.fingerprint in seen:
            continue
        seen.add(c.graph.fingerprint)
        plan = cost.plan(lower(c.graph), request)
        cold, proxy = plan.metrics.dram_bytes, cost.known(c.graph)
        if proxy is not None and proxy[1] < cold:
            row = Priced(c, cold, proxy[1], proxy[0])
        else:
            row = Priced(c, cold, cold, named_groups(plan))
        rows.append(row)
        eligible = row.cold_bytes <= first.cold_bytes  # never dearer planned alone either
        if eligible and (row.bytes, len(c.steps)) < (best.bytes, len(best.candidate.steps)):
            best = row
    return Choice(best, first, tuple(rows))


def search_dram(
    g: ModelGraph,
    cost: DramCost,
    search: SubstitutionSearch,
    budget: int,
    *,
    finalists: int = FINALISTS,
    progress: Callable[[int], None] | None = None,
    imported: OpGraph | None = None,
    extra: Sequence[RewriteCandidate] = (),
) -> tuple[RewriteResult, Choice]:
    """The DRAM-driven search: normalise ``g`` by :data:`NEUTRAL_RULES` (kept only if the
    planner sees the same graph), search :data:`DRAM_RULES` from there under ``cost`` within
    ``budget`` candidates, add the graph every cheaper candidate's steps make together, and
    :func:`choose` among the original, the ``finalists`` cheapest graphs and ``extra`` (the
    latency search's graph). The result's ``best`` is the chosen graph, its costs DRAM
    bytes."""
    normal, pre = normalise(g, make_rules(list(NEUTRAL_RULES)))
    if pre and lowered_key(lower(normal)) != lowered_key(lower(g)):
        normal, pre = g, ()
    problem = DramProblem(make_rules(list(DRAM_RULES)), cost, budget, progress=progress)
    result = search.run(problem, normal)
    cheaper = [c for c in result.top if c.cost < result.original.cost]
    if len(cheaper) > 1:  # their rewrites together (each one's steps where they still apply)
        steps = [s for c in cheaper for s in c.steps]
        problem.replay(result.original, list(dict.fromkeys(steps)), skip_missing=True)
    top = tuple(RewriteCandidate(c.graph, (*pre, *c.steps), c.cost) for c in problem.top())
    original = RewriteCandidate(g, (), result.original.cost)
    pool = [*[c for c in top if c.steps][:finalists], *extra]
    choice = choose(cost, original, pool, imported)
    best = replace(choice.best.candidate, cost=float(choice.best.bytes))
    return replace(result, original=original, best=best, top=top), choice


def planner_request(request: SubstitutionRequest, *, joint: bool) -> PlanRequest:
    """The plan request a DRAM cost prices with: ``fusionplan plan``'s defaults on the
    request's accelerator at its ``plan_effort``; the exact search in the joint mode."""
    plan = PlanRequest(effort=request.plan_effort, search="exact" if joint else "auto")
    return plan if request.accelerator is None else plan.on(request.accelerator)


def _on_accelerator(joint: bool) -> AcceleratorSearch:
    def run(
        model: onnx.ModelProto,
        graph: ModelGraph,
        search: SubstitutionSearch,
        request: SubstitutionRequest,
        progress: Callable[[int], None] | None,
    ) -> tuple[RewriteResult, dict[str, Any]]:
        plan_request = planner_request(request, joint=joint).check()
        cost = DramCost(plan_request, joint=joint)
        if type(search) is Backtracking:
            search = Backtracking(DRAM_ALPHA, search.queue_cap, search.focus)
        imported = lower(graph)  # the original, as `fusionplan plan` plans it
        latency = latency_candidate(graph, request)
        result, choice = search_dram(
            graph,
            cost,
            search,
            request.budget,
            progress=progress,
            imported=imported,
            extra=() if latency is None else (latency,),
        )
        return result, _report(choice, cost, latency)

    return run


def latency_candidate(g: ModelGraph, request: SubstitutionRequest) -> RewriteCandidate | None:
    """The graph the latency-driven pass would write (metaflow, sum of op latencies on
    ``request.device``, every rule): a finalist of the DRAM pass too, so the DRAM pass keeps
    it where its plan is the cheapest; None if it rewrote nothing."""
    cost = GraphCost(make_latency_model(request.device), "sum")
    best = MetaFlow().run(Problem(make_rules(None), cost, DEFAULT_BUDGET), g).best
    return best if best.steps else None


def _report(choice: Choice, cost: DramCost, latency: RewriteCandidate | None) -> dict[str, Any]:
    """The report's ``accelerator`` field: the figures, the plan handed on, the pricing."""
    stats, request = cost.stats, cost.request
    best, original = choice.best, choice.original
    latency_fp = None if latency is None else latency.graph.fingerprint
    return {
        "device": request.accelerator().describe(),
        "planner": {"search": request.search, "effort": request.effort},
        "dram_before": original.cold_bytes,  # the original planned as ``fusionplan plan`` does
        "dram_control": original.bytes,  # the original with the extra planning the pass did
        "dram_after": best.bytes,  # the kept graph with its best plan
        "dram_after_cold": best.cold_bytes,  # the kept graph planned alone, cold
        "kept": "original"
        if not best.candidate.steps
        else "latency search's graph"
        if best.candidate.graph.fingerprint == latency_fp
        else "DRAM search's graph",
        "plan_groups": [list(grp) for grp in best.groups],  # op names: a planner's warm start
        "replanned": [
            {"steps": len(p.candidate.steps), "cold_bytes": p.cold_bytes, "bytes": p.bytes}
            for p in choice.priced
        ],
        "candidates": stats.candidates,
        "proven": stats.proven,
        "same_lowering": stats.same_lowering,
        "seconds_per_candidate": stats.seconds_per_candidate,
        "hit_rate": stats.hit_rate,
    }


ACCELERATOR_COSTS.register(
    "dram", _on_accelerator(False), help="DRAM of the fusion planner's plan (auto) per candidate"
)
ACCELERATOR_COSTS.register(
    "dram-exact",
    _on_accelerator(True),
    help="joint: every candidate planned by the exact search (proven optimal where affordable)",
)
