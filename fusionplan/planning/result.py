"""What a search returns, typed end to end: it travels on the :class:`Plan` it produced.

It sits here, below the searches, so that :class:`~fusionplan.planning.plan.Plan` can carry
it and the CLI, the bench and reports read its fields instead of string keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fusionplan.ir.graph import Group


@dataclass(frozen=True)
class Candidate:
    """A valid partition of the whole graph and its objectives: DRAM and peak buffer in
    bytes, and ``score``, what the search minimises (accel_model/objectives.py; the DRAM
    bytes again under the default objective)."""

    groups: tuple[Group, ...]  # sorted by lowest node; unfusable singletons included
    dram: int
    mbu: int
    score: int

    @property
    def key(self) -> tuple[Group, ...]:
        return self.groups


@dataclass(frozen=True)
class ExactBound:
    """What the exact search proved: the optimum, or a lower bound when it stopped first.

    ``stopped_by`` says why it stopped (search/effort.py): ``"optimal"``, ``"effort spent"``
    (its work units, the same on every machine) or ``"time limit hit"`` (the wall-clock
    safety cap: the one outcome that depends on the machine). ``work`` counts the units.
    """

    optimal: bool
    lower_bound_bytes: int
    gap: float  # (plan DRAM - lower bound) / lower bound
    states: int
    states_generated: int
    groups_enumerated: int
    transitions: int
    downsets: int
    pruned_by_buffer: bool
    stopped_by: str = "optimal"
    work: int = 0

    @property
    def status(self) -> str:
        return "optimal" if self.optimal else self.stopped_by


@dataclass(frozen=True)
class ObjectiveBound:
    """What an exact search under another objective than DRAM proved (energy in fJ, latency
    in cycles: ``unit``): the plan's score, a lower bound on the optimum and the gap."""

    objective: str
    unit: str
    score: int
    lower_bound: int
    optimal: bool
    states: int
    stopped_by: str = "optimal"

    @property
    def gap(self) -> float:
        return (
            0.0
            if self.optimal or not self.lower_bound
            else ((self.score - self.lower_bound) / self.lower_bound)
        )

    def info(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "unit": self.unit,
            "score": self.score,
            "lower_bound": self.lower_bound,
            "optimal": self.optimal,
            "gap": round(self.gap, 6),
            "states": self.states,
            "stopped_by": self.stopped_by,
        }


@dataclass(frozen=True)
class Certificate:
    """A proven lower bound on the optimum DRAM of the model, and the plan's gap to it.

    ``method``: ``"optimal"`` (the plan is proven optimal), ``"A* bound"`` (the smallest
    f of A*'s open states when its time ran out) or ``"traffic bound"`` (the static bound of
    ``accel_model.bounds.TrafficBound``, when no A* ran).
    """

    lower_bound_bytes: int
    gap: float  # (plan DRAM - lower bound) / lower bound; 0.0 when proven optimal
    method: str
    seconds: float = 0.0  # spent proving it beyond the search itself
    work: int = 0  # A* work units spent on it (search/effort.py)
    stopped_by: str = ""  # why its A* stopped ("effort spent", "time limit hit"); "" if none ran

    @property
    def optimal(self) -> bool:
        return self.method == "optimal"


@dataclass
class SearchResult:
    """Best plan, Pareto front (DRAM vs MBU), trace and counters of one search run."""

    algorithm: str
    best: Candidate
    pareto: list[Candidate]
    trace: list[tuple[int, int]]  # (plans proposed, best DRAM bytes) at each improvement
    proposed: int
    budget: int
    seed: int
    wall_time_s: float
    cost_queries: int
    cost_hit_rate: float
    split_calls: int
    invalid_groups: int
    rectify_rate: float
    config: dict[str, Any] = field(default_factory=dict)  # the search's settings
    exact: ExactBound | None = None  # set by the exact search
    splitter: str = ""  # set by the pipeline that assembled the search
    model: str = ""
    explained_groups: int = 0  # explainer splitters: groups explained, and how long it took
    explain_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # search-specific counters
    certificate: Certificate | None = None  # set by the pipeline (search/certify.py)
    # oracle queries (distinct groups priced since the cost model was made, the problem's
    # unfusable-op probes included; docs/design.md, "Oracles"), their seconds, the best
    # score against them at each improvement, and the query budget if one was set
    oracle_queries: int = 0
    oracle_seconds: float = 0.0
    query_trace: list[tuple[int, int]] = field(default_factory=list)
    query_budget: int | None = None
    # set by exact / auto under an objective other than DRAM (search/exact.py, solve_objective)
    objective_bound: ObjectiveBound | None = None

    @property
    def plans_per_second(self) -> float:
        return self.proposed / self.wall_time_s if self.wall_time_s > 0 else float("inf")

    def timing(self) -> dict[str, float]:
        """The seconds this run took: the only part of a plan's JSON that may differ
        between two runs of the same command (docs/design.md, "Effort")."""
        out = {
            "wall_time_s": round(self.wall_time_s, 3),
            "plans_per_second": round(self.plans_per_second, 1),
        }
        if self.explained_groups:
            out["explain_seconds"] = round(self.explain_seconds, 3)
        if self.oracle_queries:
            out["oracle_seconds"] = round(self.oracle_seconds, 3)
        if self.certificate is not None:
            out["bound_seconds"] = round(self.certificate.seconds, 3)
        return out

    def info(self) -> dict[str, Any]:
        """The JSON form stored with a plan (``search`` in the plan file); every field but
        ``timing`` is the same for the same command on any machine (unless the wall-clock
        safety cap stopped the run: ``status``/``bound_stopped_by`` then say so)."""
        out: dict[str, Any] = (
            {"model": self.model, "splitter": self.splitter}
            if (self.model or self.splitter)
            else {}
        )
        out.update(
            {
                "search": self.algorithm,
                "budget": self.budget,
                "proposed": self.proposed,
                "seed": self.seed,
                "cost_queries": self.cost_queries,
                "cost_cache_hit_rate": round(self.cost_hit_rate, 4),
                "split_calls": self.split_calls,
                "invalid_groups_split": self.invalid_groups,
                "rectify_rate": round(self.rectify_rate, 4),
                "trace": self.trace,
                "oracle_queries": self.oracle_queries,
                "query_trace": self.query_trace,
                **({"query_budget": self.query_budget} if self.query_budget else {}),
                "pareto": [{"dram_bytes": c.dram, "mbu_bytes": c.mbu} for c in self.pareto],
            }
        )
        if self.explained_groups:
            out["explained_groups"] = self.explained_groups
        if self.exact is not None:
            e = self.exact
            out.update(
                optimal=e.optimal,
                status=e.status,
                lower_bound_bytes=e.lower_bound_bytes,
                gap=round(e.gap, 6),
                states=e.states,
                states_generated=e.states_generated,
                groups_enumerated=e.groups_enumerated,
                transitions=e.transitions,
                downsets=e.downsets,
                pruned_by_buffer=e.pruned_by_buffer,
                work=e.work,
            )
        if self.certificate is not None:
            c = self.certificate
            out.update(
                lower_bound_bytes=c.lower_bound_bytes,
                gap=round(c.gap, 6),
                bound_method=c.method,
                bound_work=c.work,
            )
            if c.stopped_by:
                out["bound_stopped_by"] = c.stopped_by
        if self.objective_bound is not None:
            out["objective_bound"] = self.objective_bound.info()
        if self.config:
            out["search_config"] = self.config
        out.update(self.extra)
        out["timing"] = self.timing()
        return out


@dataclass(frozen=True)
class PassRecord:
    """What one pre-pass did to the model before it was planned, as the plan keeps it: its
    one-line summary, its report and its artifacts (the stream schedule) in JSON form (the
    passes sit above planning). ``artifacts`` holds those still true of the planned graph;
    ``invalidated`` names, per artifact dropped, the later pass whose rewrite made it stale.
    """

    name: str
    modified: bool
    summary: str
    report: dict[str, Any]
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    invalidated: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"pass": self.name, "modified": self.modified, "summary": self.summary,
               "report": self.report, "artifacts": self.artifacts}  # fmt: skip
        if self.invalidated:
            out["invalidated"] = self.invalidated
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> PassRecord:
        return PassRecord(
            data["pass"],
            bool(data["modified"]),
            data["summary"],
            dict(data.get("report") or {}),
            dict(data.get("artifacts") or {}),
            dict(data.get("invalidated") or {}),
        )
