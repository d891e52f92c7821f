"""``substitute``: one call from an ONNX model to a rewritten, verified one with a report.

Loads and validates the model, builds the rules, the cost and the search from their
registries, searches, writes the best graph back to ONNX (``onnx.checker``), runs both
models in onnxruntime on the same random input and refuses a result that differs (1e-4
relative: a rule bug, never silently shipped). The report carries what a compiler engineer
asks for: the steps applied, cost before and after under both costs, search time, graphs
explored, op counts, and the equivalence error.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx

from accel_model import Accelerator
from accel_model.latency import LatencyModel, make_latency_model
from data.zoo import model_source
from fusionplan.ir.errors import ConfigError, ModelError
from fusionplan.ir.io import write_atomic
from fusionplan.ir.registry import Registry
from fusionplan.passes.streams.measure import stream_latency
from fusionplan.passes.substitution.convert import (
    Equivalence,
    check_equivalence,
    from_onnx,
    load_onnx,
    run_model,
    to_onnx,
    with_input_shapes,
)
from fusionplan.passes.substitution.cost import CostBreakdown, GraphCost
from fusionplan.passes.substitution.graph import SubGraph
from fusionplan.passes.substitution.guard import guard
from fusionplan.passes.substitution.measure import ort_latencies, ort_latency
from fusionplan.passes.substitution.rules import make_rules
from fusionplan.passes.substitution.search import (
    SEARCHES,
    Problem,
    SearchResult,
    SubstitutionSearch,
)
from fusionplan.passes.substitution.search.base import DEFAULT_BUDGET
from fusionplan.passes.substitution.search.ocggs import DEFAULT_DEPTH

DEPTH_SEARCHES = ("ocggs-prune", "ocggs-dpp")


@dataclass(frozen=True)
class SubstitutionRequest:
    """What to search with; every name is checked against its registry."""

    search: str = "metaflow"
    cost: str = "sum"  # a CostKind (op latency) or an ACCELERATOR_COSTS name ("dram")
    device: str = "h100"
    budget: int = DEFAULT_BUDGET
    depth: int = DEFAULT_DEPTH  # K, for the exact OCGGS searches
    rules: Sequence[str] | None = None  # all registered rules by default
    measure: str | None = None  # AutoGraph: time the top-k here, "ort" or "streams"
    seed: int = 0
    tolerance: float = 1e-4
    standard_ops: bool = False  # write fused contrib ops as standard ONNX (for the planner)
    guard: bool = False  # time the result here (onnxruntime CPU); undo rules that slow it
    # the accelerator an ACCELERATOR_COSTS cost plans on (None: ``fusionplan plan``'s
    # default) and the planner's effort there: give the plan's own, and the pass never
    # returns a graph whose plan takes more DRAM than the original's
    accelerator: Accelerator | None = None
    plan_effort: float = 1.0


AcceleratorSearch = Callable[
    [
        onnx.ModelProto,
        SubGraph,
        SubstitutionSearch,
        SubstitutionRequest,
        "Callable[[int], None] | None",
    ],
    tuple[SearchResult, dict[str, Any]],
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
    measured: tuple[float, ...] = field(default=())
    guard: dict[str, Any] | None = None
    """With the measured guard: CPU ms of the original, the search's graph and the chosen
    one, the rule families dropped, and the search's graph's costs (``after`` is the chosen
    graph's)."""
    accelerator: dict[str, Any] | None = None
    """With an accelerator cost: the accelerator, DRAM bytes of the original's and the
    chosen graph's plans, the graphs re-planned, and how the incremental pricing went."""

    @property
    def speedup(self) -> float:
        """Latency before / after (the op-latency costs); DRAM before / after (``dram``)."""
        if self.accelerator is not None:
            a = self.accelerator
            return a["dram_before"] / a["dram_after"] if a["dram_after"] else 1.0
        chosen = getattr(self.before, self.cost_kind), getattr(self.after, self.cost_kind)
        return chosen[0] / chosen[1] if chosen[1] else 1.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}

    def summary(self) -> str:
        ms = 1e3
        if self.accelerator is not None:
            a, mb = self.accelerator, 2**20
            head = [
                f"{self.model}: {self.search} search, {self.cost_kind} cost on {a['device']}",
                f"  DRAM     {a['dram_before'] / mb:.3f} MB -> {a['dram_after'] / mb:.3f} MB "
                f"({self.speedup:.3f}x less; {len(a['replanned'])} graphs re-planned in full)",
                f"  pricing  {a['candidates']} plans, {a['seconds_per_candidate']:.2f} s each, "
                f"{a['hit_rate']:.0%} of new groups priced from other candidates",
            ]
        else:
            head = [
                f"{self.model}: {self.search} search, {self.cost_kind} cost on {self.device}",
                f"  cost     {getattr(self.before, self.cost_kind) * ms:.3f} ms -> "
                f"{getattr(self.after, self.cost_kind) * ms:.3f} ms ({self.speedup:.2f}x)",
            ]
        lines = [
            *head,
            f"  sum {self.before.sum * ms:.3f} -> {self.after.sum * ms:.3f} ms, critical path "
            f"{self.before.critical_path * ms:.3f} -> {self.after.critical_path * ms:.3f} ms",
            f"  ops      {sum(self.ops_before.values())} -> {sum(self.ops_after.values())}, "
            f"{len(self.steps)} substitutions",
            f"  search   {self.seconds:.2f} s, {self.generated} graphs built, "
            f"{self.expanded} expanded{' (budget spent)' if self.budget_hit else ''}",
            f"  check    onnxruntime outputs equal (max relative error {self.max_rel_error:.1e})",
        ]
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

    def save(self, path: str | os.PathLike) -> Path:
        """Write the rewritten model atomically."""
        return write_atomic(path, lambda tmp: onnx.save(self.model, os.fspath(tmp)))

    def summary(self) -> str:
        return self.report.summary()


def substitute(
    model: onnx.ModelProto | str | os.PathLike,
    request: SubstitutionRequest = SubstitutionRequest(),
    *,
    latency: LatencyModel | None = None,
    progress: Callable[[int], None] | None = None,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> SubstitutionResult:
    """Search ``model`` (a ModelProto, an ONNX path or a zoo name) for a cheaper equivalent
    graph; the rewritten model (equivalence checked) and a report. ``input_shapes`` makes
    symbolic graph inputs static (``{"x": (1, 3, 224, 224)}``); the result keeps them."""
    if not isinstance(model, onnx.ModelProto):
        path = model_source(model)
        name = name or Path(os.fspath(model)).stem
        model = load_onnx(path)
    model = with_input_shapes(model, input_shapes)
    run_model(model)  # fail now, in one line, on a model onnxruntime cannot run
    search = _make_search(request)
    latency = latency or make_latency_model(request.device)
    planned = request.cost in ACCELERATOR_COSTS.names()
    cost = GraphCost(latency, "sum" if planned else request.cost)  # type: ignore[arg-type]
    graph = from_onnx(model)
    accelerator = None
    if planned:
        if request.rules is not None or request.guard or request.measure is not None:
            raise ConfigError(f"--cost {request.cost} picks its own rules; no guard, no measure")
        on_accelerator = ACCELERATOR_COSTS.get(request.cost)
        result, accelerator = on_accelerator(model, graph, search, request, progress)
        if not result.best.steps:  # no rewrite pays: the original model, as it came
            same = Equivalence(0.0, request.tolerance)
            report = _report(name or graph.name, request, cost, result, same)
            return SubstitutionResult(model, replace(report, accelerator=accelerator))
    else:
        problem = Problem(make_rules(request.rules), cost, request.budget, progress=progress)
        result = search.run(problem, graph)
    guarded, searched = None, result.best
    if request.guard:
        guarded = guard(problem, result.original, result.best, _cpu_timer())
        result = replace(result, best=guarded.chosen)
    rewritten = to_onnx(result.best.graph, standard_ops=request.standard_ops)
    equal = check_equivalence(model, rewritten, tolerance=request.tolerance, seed=request.seed)
    if not equal.ok:
        raise ModelError(
            f"rewritten model differs from the original (relative error "
            f"{equal.max_rel_error:.1e} > {request.tolerance:g}): not written"
        )
    report = replace(
        _report(name or graph.name, request, cost, result, equal), accelerator=accelerator
    )
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
    return SubstitutionResult(rewritten, report)


def _cpu_timer() -> Callable[[Sequence[SubGraph]], list[float]]:
    """One-thread onnxruntime latencies of graphs, timed interleaved."""

    def measure(graphs: Sequence[SubGraph]) -> list[float]:
        return ort_latencies([to_onnx(g) for g in graphs], threads=1, repeats=20)

    return measure


class SubstitutionPass:
    """The ``substitute`` pre-pass of :data:`fusionplan.passes.PASSES`: ONNX in, ONNX out
    (standard ops only, so the fusion planner reads it), plus the report as JSON."""

    name = "substitute"

    def __init__(self, **options: Any) -> None:
        self.request = SubstitutionRequest(**{"standard_ops": True, **options})

    def run(self, model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Any]]:
        result = substitute(model, self.request)
        r = result.report
        gain = f"{r.speedup:.2f}x by {r.cost_kind} cost"
        if r.accelerator is not None:
            mb = 2**20
            a = r.accelerator
            gain = f"DRAM {a['dram_before'] / mb:.2f} -> {a['dram_after'] / mb:.2f} MB"
        line = (
            f"{sum(r.ops_before.values())} -> {sum(r.ops_after.values())} ops, "
            f"{gain} ({r.search}, {len(r.steps)} substitutions)"
        )
        return result.model, {**r.to_json(), "summary": line}


def _make_search(request: SubstitutionRequest):
    cls = SEARCHES.get(request.search)
    if request.search in DEPTH_SEARCHES:
        return cls(depth=request.depth)
    if request.search == "ocggs-sample":
        return cls(seed=request.seed)
    if request.measure is not None:
        if request.search != "autograph":
            raise ConfigError("--measure applies to the autograph search only")
        if request.measure not in MEASURES:
            raise ConfigError(
                f"unknown measure '{request.measure}' (choose from {', '.join(MEASURES)})"
            )
        return cls(measure=MEASURES[request.measure])
    return cls()


MEASURES: dict[str, Callable[[SubGraph], float]] = {
    "ort": lambda g: ort_latency(to_onnx(g)),
    "streams": stream_latency,
}
"""How AutoGraph's loop times a candidate: onnxruntime on this CPU, or the graph's stream
schedule executed for real (CUDA Graph on a GPU, a thread per stream on the CPU)."""


def _report(
    name: str,
    request: SubstitutionRequest,
    cost: GraphCost,
    result: SearchResult,
    equal: Equivalence,
) -> SubstitutionReport:
    """The search's own cost (its caches hold every graph's breakdown already)."""
    return SubstitutionReport(
        model=name,
        search=result.search,
        cost_kind=request.cost,
        device=cost.latency.describe(),
        before=cost.breakdown(result.original.graph),
        after=cost.breakdown(result.best.graph),
        steps=tuple({"rule": s.rule, "nodes": list(s.nodes)} for s in result.best.steps),
        seconds=result.seconds,
        expanded=result.expanded,
        generated=result.generated,
        budget_hit=result.budget_hit,
        ops_before=_ops(result.original.graph),
        ops_after=_ops(result.best.graph),
        max_rel_error=equal.max_rel_error,
        measured=tuple(seconds for _, seconds in result.measured),
    )


def _ops(g: SubGraph) -> dict[str, int]:
    return dict(Counter(n.op for n in g.nodes.values()).most_common())
