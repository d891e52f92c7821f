"""``substitute``: one call from an ONNX model to a rewritten, verified one with a report.

Loads and validates the model, builds the rules, the cost and the search from their
registries, searches, writes the best graph back to ONNX (``onnx.checker``; standard ONNX
ops only unless the target is onnxruntime), runs both models in onnxruntime with its graph
optimisations off on the same random input and refuses a result that differs (1e-4
relative: a rule bug, never silently shipped). The report carries what a compiler engineer
asks for: the steps applied, cost before and after under both costs, search time, graphs
explored, op counts, the equivalence error, and, where a measurement ran, the measured
speedup over the original in onnxruntime (the headline; the latency model's is an estimate).
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import onnx

from accel_model import Accelerator
from accel_model.latency import LATENCY_MODELS, LatencyModel, make_latency_model
from fusionplan.data.zoo import model_source
from fusionplan.ir.errors import ConfigError, ModelError
from fusionplan.ir.io import write_atomic
from fusionplan.ir.model import ModelGraph, qualified, split_qualified
from fusionplan.ir.onnx_model import (
    OnnxWriter,
    from_onnx,
    load_onnx,
    standard_graph,
    to_onnx,
    with_input_shapes,
)
from fusionplan.ir.onnx_run import Equivalence, check_equivalence, run_model
from fusionplan.ir.registry import Registry
from fusionplan.passes.manager import (
    STATIC_SHAPES,
    ModelPass,
    OptionError,
    PassContext,
    PassResult,
    check_choice,
)
from fusionplan.passes.substitution.cost import COST_KINDS, CostBreakdown, GraphCost
from fusionplan.passes.substitution.guard import guard
from fusionplan.passes.substitution.measure import ort_latencies
from fusionplan.passes.substitution.measures import MEASURES
from fusionplan.passes.substitution.rules import RULES, make_rules
from fusionplan.passes.substitution.search import (
    REWRITE_SEARCHES,
    Problem,
    RewriteResult,
    SubstitutionSearch,
)
from fusionplan.passes.substitution.search.base import DEFAULT_BUDGET
from fusionplan.passes.substitution.search.ocggs import DEFAULT_DEPTH

DEPTH_SEARCHES = ("ocggs-prune", "ocggs-dpp")
Target = Literal["onnx", "onnxruntime"]
TARGETS: tuple[Target, ...] = ("onnx", "onnxruntime")
"""What the rewritten model may use: standard ONNX ops only (portable, the default), or
onnxruntime's contrib ops too (``com.microsoft.FusedConv``, ``FusedGemm``)."""
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
"""ONNX's own operator sets: every ONNX runtime implements them."""
PLANNED_BUDGET = 40
"""Candidate graphs a search under an accelerator cost builds by default: each is a plan
(~0.5 s on Inception-v3)."""
MEASURED_REPEATS = 20
MEASURED_BASELINE = (
    "the original model in onnxruntime on this CPU with ORT_ENABLE_ALL, 1 thread, "
    f"median of {MEASURED_REPEATS} interleaved runs"
)


@dataclass(frozen=True)
class SubstitutionRequest:
    """What to search with; every name is checked against its registry."""

    search: str | None = None  # metaflow; taso under an accelerator cost
    cost: str = "sum"  # a CostKind (op latency) or an ACCELERATOR_COSTS name ("dram")
    device: str = "h100"
    budget: int | None = None  # DEFAULT_BUDGET graphs; PLANNED_BUDGET under an accelerator cost
    depth: int = DEFAULT_DEPTH  # K, for the exact OCGGS searches
    rules: Sequence[str] | None = None  # all registered rules by default
    measure: str | None = None  # AutoGraph: time the top-k here, "ort" or "streams"
    seed: int = 0
    tolerance: float = 1e-4
    target: Target = "onnx"  # "onnxruntime": contrib ops (FusedConv, FusedGemm) allowed
    guard: bool = False  # time the result here (onnxruntime CPU); undo rules that slow it
    # the accelerator an ACCELERATOR_COSTS cost plans on (None: ``fusionplan plan``'s
    # default) and the planner's effort there: give the plan's own, and the pass never
    # returns a graph whose plan takes more DRAM than the original's
    accelerator: Accelerator | None = None
    plan_effort: float | None = None  # None: the plan's own (1.0 outside ``plan``)

    @property
    def planned(self) -> bool:
        """Whether the cost plans each candidate on an accelerator (``dram``)."""
        return self.cost in ACCELERATOR_COSTS.names()

    def resolved(self) -> SubstitutionRequest:
        """This request with the defaults that depend on the cost filled in: metaflow over
        :data:`DEFAULT_BUDGET` graphs for a latency cost; for an accelerator cost, where each
        candidate is a plan, taso over :data:`PLANNED_BUDGET` at effort 1."""
        planned = self.planned
        return replace(
            self,
            search=self.search or ("taso" if planned else "metaflow"),
            budget=self.budget or (PLANNED_BUDGET if planned else DEFAULT_BUDGET),
            plan_effort=1.0 if self.plan_effort is None else self.plan_effort,
        )

    def cost_conflict(self) -> str | None:
        """Why the other fields do not go with an accelerator cost, if they do not."""
        if self.planned and (self.rules is not None or self.guard or self.measure is not None):
            return f"cost {self.cost} picks its own rules; no guard, no measure"
        return None


AcceleratorSearch = Callable[
    [
        onnx.ModelProto,
        ModelGraph,
        SubstitutionSearch,
        SubstitutionRequest,
        "Callable[[int], None] | None",
    ],
    tuple[RewriteResult, dict[str, Any]],
]
"""Searches ``graph`` (of ``model``) with a cost that plans every candidate on
``request.accelerator``; the result (``best``: the graph to keep, ``original`` and ``best``
priced in its unit) and the report's ``accelerator`` field."""

ACCELERATOR_COSTS: Registry[AcceleratorSearch] = Registry("accelerator cost")
"""Costs that plan each candidate on an accelerator (``dram``: the fusion planner's DRAM).
The planner sits above the passes, so fusionplan.app.dram_cost registers them."""


@dataclass(frozen=True)
class SubstitutionReport:
    model: str
    search: str
    cost_kind: str
    device: str
    before: CostBreakdown  # seconds under the latency model, whichever cost was searched
    after: CostBreakdown
    steps: tuple[dict[str, Any], ...]
    seconds: float
    expanded: int
    generated: int
    budget_hit: bool
    ops_before: Mapping[str, int]
    ops_after: Mapping[str, int]
    max_rel_error: float
    target: Target = "onnx"
    estimate_basis: str = ""  # the latency model the costs come from, e.g. "h100 roofline"
    measured_cpu: dict[str, Any] | None = None
    """Where a measurement ran (--guard, --measure): ``baseline`` (what was timed),
    ``original_ms`` and ``rewritten_ms``, the written model timed beside the original."""
    measured: tuple[float, ...] = field(default=())
    guard: dict[str, Any] | None = None
    """With the measured guard: CPU ms of the original, the search's graph and the chosen
    one, the rule families dropped, and the search's graph's costs (``after`` is the chosen
    graph's)."""
    accelerator: dict[str, Any] | None = None
    """With an accelerator cost: the accelerator, DRAM bytes of the original's and the
    chosen graph's plans, the graphs re-planned, and how the incremental pricing went."""

    @property
    def speedup_estimated(self) -> float:
        """The latency model's speedup under the searched latency cost (the sum under an
        accelerator cost): an estimate, not a timing."""
        kind = self.cost_kind if self.cost_kind in COST_KINDS else "sum"
        chosen = getattr(self.before, kind), getattr(self.after, kind)
        return chosen[0] / chosen[1] if chosen[1] else 1.0

    @property
    def dram_reduction(self) -> float | None:
        """DRAM of the original's plan over the chosen graph's on the accelerator, both
        planned alone as ``fusionplan plan`` plans them (an accelerator cost such as
        ``dram``); None under a latency cost."""
        a = self.accelerator
        if a is None:
            return None
        after = a["dram_after_cold"]
        return a["dram_before"] / after if after else 1.0

    @property
    def speedup_measured(self) -> float | None:
        """The written model's measured speedup over :data:`MEASURED_BASELINE`; None when
        nothing was measured."""
        m = self.measured_cpu
        return None if m is None else m["original_ms"] / m["rewritten_ms"]

    def headline(self) -> str:
        """What to quote: under an accelerator cost the DRAM of the two plans; else the
        measured speedup where it exists, the estimate labelled."""
        if self.accelerator is not None:
            a, mb = self.accelerator, 2**20
            return (
                f"DRAM {a['dram_before'] / mb:.3f} MB -> {a['dram_after_cold'] / mb:.3f} MB "
                f"({self.dram_reduction:.3f}x less)"
            )
        estimate = f"estimated on {self.estimate_basis}: {self.speedup_estimated:.2f}x"
        measured = self.speedup_measured
        if measured is None:
            return f"{estimate} (not measured)"
        return (
            f"{measured:.2f}x measured in onnxruntime (ORT_ENABLE_ALL) vs the original; {estimate}"
        )

    def _target_line(self) -> str:
        """What the written model may need; contrib ops the original brought that have no
        standard form (only FusedConv and FusedGemm have one) are named."""
        if self.target == "onnxruntime":
            return "onnxruntime contrib ops allowed"
        kept = [op for op in self.ops_after if split_qualified(op)[0] not in STANDARD_DOMAINS]
        if not kept:
            return "standard ONNX ops only"
        return f"standard ONNX ops, but {', '.join(kept)} of the original has no standard form"

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "speedup_estimated": self.speedup_estimated,
            "dram_reduction": self.dram_reduction,
            "speedup_measured": self.speedup_measured,
            "speedup_baseline": None if self.measured_cpu is None else MEASURED_BASELINE,
        }

    def summary(self) -> str:
        ms = 1e3
        if self.accelerator is not None:
            a = self.accelerator
            head = [
                f"{self.model}: {self.search} search, {self.cost_kind} cost on {a['device']}",
                f"  result   {self.headline()}; {len(a['replanned'])} graphs re-planned in full",
                f"  pricing  {a['candidates']} plans, {a['seconds_per_candidate']:.2f} s each, "
                f"{a['hit_rate']:.0%} of new groups priced from other candidates",
            ]
        else:
            head = [
                f"{self.model}: {self.search} search, {self.cost_kind} cost on {self.device}",
                f"  speedup  {self.headline()}",
                f"  cost     {getattr(self.before, self.cost_kind) * ms:.3f} ms -> "
                f"{getattr(self.after, self.cost_kind) * ms:.3f} ms (estimate)",
            ]
        lines = [
            *head,
            f"  sum {self.before.sum * ms:.3f} -> {self.after.sum * ms:.3f} ms, critical path "
            f"{self.before.critical_path * ms:.3f} -> {self.after.critical_path * ms:.3f} ms",
            f"  ops      {sum(self.ops_before.values())} -> {sum(self.ops_after.values())}, "
            f"{len(self.steps)} substitutions",
            f"  search   {self.seconds:.2f} s, {self.generated} graphs built, "
            f"{self.expanded} expanded{' (budget spent)' if self.budget_hit else ''}",
            f"  check    onnxruntime outputs equal, optimisations off (max relative error "
            f"{self.max_rel_error:.1e}); {self._target_line()}",
        ]
        if self.measured_cpu is not None:
            m = self.measured_cpu
            lines.append(
                f"  CPU      {m['original_ms']:.2f} ms -> {m['rewritten_ms']:.2f} ms "
                f"({MEASURED_BASELINE})"
            )
        if self.measured:
            times = ", ".join(f"{t * ms:.2f}" for t in self.measured)
            lines.append(f"  measured top {len(self.measured)} here: {times} ms; kept the fastest")
        if self.guard is not None:
            g = self.guard
            dropped = ", ".join(g["dropped"]) or "none"
            lines.append(
                f"  guard    CPU {g['original_ms']:.2f} ms -> {g['chosen_ms']:.2f} ms (search's "
                f"graph {g['searched_ms']:.2f} ms); dropped: {dropped}"
            )
        applied = Counter(s["rule"] for s in self.steps)
        if applied:
            lines.append("  rules    " + ", ".join(f"{r} x{n}" for r, n in applied.most_common()))
        return "\n".join(lines)


@dataclass(frozen=True)
class SubstitutionResult:
    """The rewritten model and what the search did."""

    model: onnx.ModelProto
    report: SubstitutionReport
    graph: ModelGraph  # the rewritten graph in the model IR, before it was written to ONNX

    def save(self, path: str | os.PathLike) -> Path:
        """Write the rewritten model atomically."""
        return write_atomic(path, lambda tmp: onnx.save(self.model, os.fspath(tmp)))

    def summary(self) -> str:
        return self.report.summary()


def substitute(
    model: ModelGraph | onnx.ModelProto | str | os.PathLike,
    request: SubstitutionRequest = SubstitutionRequest(),
    *,
    latency: LatencyModel | None = None,
    progress: Callable[[int], None] | None = None,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> SubstitutionResult:
    """Search ``model`` (the model IR, a ModelProto, an ONNX path or a zoo name) for a
    cheaper equivalent graph; the rewritten model (equivalence checked) and a report.
    ``input_shapes`` makes symbolic graph inputs static (``{"x": (1, 3, 224, 224)}``); the
    result keeps them."""
    graph = model if isinstance(model, ModelGraph) else None
    if graph is not None:
        if input_shapes:
            raise ConfigError("input shapes are fixed when a model is imported, not on its IR")
        model = to_onnx(graph)  # what onnxruntime runs and the result is checked against
    elif not isinstance(model, onnx.ModelProto):
        path = model_source(model)
        name = name or Path(os.fspath(model)).stem
        model = load_onnx(path)
    model = with_input_shapes(model, input_shapes)
    if request.target not in TARGETS:
        raise ConfigError(f"unknown target '{request.target}' (choose from {', '.join(TARGETS)})")
    request = request.resolved()
    conflict = request.cost_conflict()
    if conflict:
        raise ConfigError(conflict)
    run_model(model)  # fail now, in one line, on a model onnxruntime cannot run
    write = writer(request.target)
    search = _make_search(request, write)
    latency = latency or make_latency_model(request.device)
    planned = request.planned
    cost = GraphCost(latency, "sum" if planned else request.cost)  # type: ignore[arg-type]
    if graph is None:
        graph = from_onnx(model, command="substitute")
    accelerator = None
    if planned:
        on_accelerator = ACCELERATOR_COSTS.get(request.cost)
        result, accelerator = on_accelerator(model, graph, search, request, progress)
        if not result.best.steps:  # no rewrite pays: the original model, as it came
            same = Equivalence(0.0, request.tolerance)
            report = _report(name or graph.name, request, cost, result, same, model)
            return SubstitutionResult(model, replace(report, accelerator=accelerator), graph)
    else:
        problem = Problem(make_rules(request.rules), cost, request.budget, progress=progress)
        result = search.run(problem, graph)
    guarded, searched = None, result.best
    if request.guard:
        guarded = guard(problem, result.original, result.best, _cpu_timer(write))
        result = replace(result, best=guarded.chosen)
    rewritten = write(result.best.graph)
    equal = check_equivalence(model, rewritten, tolerance=request.tolerance, seed=request.seed)
    if not equal.ok:
        raise ModelError(
            f"rewritten model differs from the original (relative error "
            f"{equal.max_rel_error:.1e} > {request.tolerance:g}): not written"
        )
    report = replace(
        _report(name or graph.name, request, cost, result, equal, rewritten),
        accelerator=accelerator,
    )
    if request.guard or request.measure is not None:
        report = replace(report, measured_cpu=_measure_against(model, rewritten))
    if guarded is not None:
        ms = 1e3
        report = replace(
            report,
            guard={
                "original_ms": guarded.original_s * ms,
                "searched_ms": guarded.searched_s * ms,
                "chosen_ms": guarded.chosen_s * ms,
                "dropped": list(guarded.dropped),
                "searched_cost": asdict(cost.breakdown(searched.graph)),
            },
        )
    return SubstitutionResult(rewritten, report, result.best.graph)


def writer(target: Target) -> OnnxWriter:
    """How a graph is written for ``target``: contrib ops expanded to standard ONNX for
    ``onnx``, kept for ``onnxruntime``."""
    return functools.partial(to_onnx, standard_ops=target == "onnx")


def _measure_against(original: onnx.ModelProto, rewritten: onnx.ModelProto) -> dict[str, Any]:
    """The written model timed beside the original (:data:`MEASURED_BASELINE`)."""
    before, after = ort_latencies([original, rewritten], threads=1, repeats=MEASURED_REPEATS)
    return {"baseline": MEASURED_BASELINE, "original_ms": before * 1e3, "rewritten_ms": after * 1e3}


def _cpu_timer(write: OnnxWriter) -> Callable[[Sequence[ModelGraph]], list[float]]:
    """One-thread onnxruntime latencies of graphs as written, timed interleaved."""

    def measure(graphs: Sequence[ModelGraph]) -> list[float]:
        return ort_latencies([write(g) for g in graphs], threads=1, repeats=MEASURED_REPEATS)

    return measure


@dataclass(frozen=True)
class SubstitutionOptions(SubstitutionRequest):
    """The ``substitute`` pass's options: :class:`SubstitutionRequest`'s fields, checked."""

    def check(self) -> None:
        if self.search is not None:
            check_choice(REWRITE_SEARCHES, "search", self.search)
        check_choice(LATENCY_MODELS, "device", self.device)
        for rule in self.rules or ():
            check_choice(RULES, "rules", rule)
        for option in ("budget", "depth"):
            value = getattr(self, option)
            if value is not None and value < 1:
                raise OptionError(option, f"must be at least 1, got {value}")
        if not self.tolerance > 0:
            raise OptionError("tolerance", f"must be above 0, got {self.tolerance}")
        costs = (*COST_KINDS, *ACCELERATOR_COSTS.names())
        if self.cost not in costs:
            raise OptionError("cost", f"{self.cost!r} is not one of {', '.join(costs)}")
        if self.plan_effort is not None and not self.plan_effort > 0:
            raise OptionError("plan_effort", f"must be above 0, got {self.plan_effort}")
        conflict = self.cost_conflict()
        if conflict:
            raise OptionError("cost", conflict)
        if self.target not in TARGETS:
            raise OptionError("target", f"{self.target!r} is not one of {', '.join(TARGETS)}")
        if self.measure is not None:
            check_choice(MEASURES, "measure", self.measure)
        if self.measure is not None and self.search != "autograph":
            raise OptionError("measure", "applies to the autograph search only")


class SubstitutionPass(ModelPass):
    """The ``substitute`` pre-pass: rewrites the graph; the result is checked equal to its
    input in onnxruntime before it is handed on."""

    name = "substitute"
    Options = SubstitutionOptions
    needs = frozenset({STATIC_SHAPES})
    rewrites = True
    keeps = frozenset({STATIC_SHAPES})

    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        options = self.options
        if options.planned:  # plan the candidates as the plan this pass serves is made
            if options.accelerator is None and context.accelerator is None:
                raise ConfigError(f"cost {options.cost} plans on an accelerator: none given")
            options = replace(
                options,
                accelerator=options.accelerator or context.accelerator,
                plan_effort=options.plan_effort or context.plan_effort,
            )
        result = substitute(graph, options, name=graph.name)
        r = result.report
        line = (
            f"{sum(r.ops_before.values())} -> {sum(r.ops_after.values())} ops, "
            f"{r.headline()} ({r.cost_kind} cost, {r.search}, {len(r.steps)} substitutions)"
        )
        # the next stage reads the graph as written: standard ops unless the target allows
        # onnxruntime's (a stream schedule of FusedConv would not match the planned graph)
        out = standard_graph(result.graph) if options.target == "onnx" else result.graph
        return PassResult(out, bool(r.steps), r, line)


def _make_search(request: SubstitutionRequest, write: OnnxWriter):
    cls = REWRITE_SEARCHES.get(request.search)
    if request.search in DEPTH_SEARCHES:
        return cls(depth=request.depth)
    if request.search == "ocggs-sample":
        return cls(seed=request.seed)
    if request.measure is not None:
        if request.search != "autograph":
            raise ConfigError("--measure applies to the autograph search only")
        return cls(measure=MEASURES.get(request.measure)(write))
    return cls()


def _report(
    name: str,
    request: SubstitutionRequest,
    cost: GraphCost,
    result: RewriteResult,
    equal: Equivalence,
    rewritten: onnx.ModelProto,
) -> SubstitutionReport:
    """The search's own cost (its caches hold every graph's breakdown already); the ops
    after are those written (a fused contrib op expanded for the onnx target)."""
    description = cost.latency.describe()
    kind = "roofline" if description.startswith("roofline") else "op latencies"
    return SubstitutionReport(
        model=name,
        search=result.search,
        cost_kind=request.cost,
        device=description,
        before=cost.breakdown(result.original.graph),
        after=cost.breakdown(result.best.graph),
        steps=tuple({"rule": s.rule, "nodes": list(s.nodes)} for s in result.best.steps),
        seconds=result.seconds,
        expanded=result.expanded,
        generated=result.generated,
        budget_hit=result.budget_hit,
        ops_before=_ops(n.op for n in result.original.graph.nodes.values()),
        ops_after=_ops(qualified(n.op_type, n.domain) for n in rewritten.graph.node),
        max_rel_error=equal.max_rel_error,
        target=request.target,
        estimate_basis=f"{request.device} {kind}",
        measured=tuple(seconds for _, seconds in result.measured),
    )


def _ops(ops: Iterable[str]) -> dict[str, int]:
    return dict(Counter(ops).most_common())
