"""Every plan certified: a proven lower bound on the optimum DRAM and the plan's gap to it.

The exact and auto searches carry their own A* bound. For any other search the pipeline
calls :func:`certify`: A* runs for ``effort`` x ``CERTIFY_UNITS`` work units
(search/effort.py) with the search's plan as the first upper bound, so it either proves that
plan optimal or leaves the smallest f of its open states as the bound; with effort 0 (or a
graph too branchy to count) the static :class:`~accel_model.bounds.TrafficBound` is the
bound (docs/design.md, "Certified plans"). Counting work, not seconds, gives the same
certificate on every machine; ``time_limit_s`` is only a safety cap.
"""

from __future__ import annotations

import time

from fusionplan.planning.result import Certificate, SearchResult
from fusionplan.search.effort import CERTIFY_UNITS, clock_end, units
from fusionplan.search.exact import ExactSolver, SolveLimits, count_downsets, solve
from fusionplan.search.problem import FusionProblem

DEFAULT_MAX_DOWNSETS = 200_000


def relative_gap(dram: int, lower_bound: int) -> float:
    """``(dram - bound) / bound``; 0.0 for a zero bound (nothing to move)."""
    return (dram - lower_bound) / lower_bound if lower_bound > 0 else 0.0


def certify(
    problem: FusionProblem,
    result: SearchResult,
    effort: float = 1.0,
    time_limit_s: float | None = None,
    max_downsets: int = DEFAULT_MAX_DOWNSETS,
) -> Certificate:
    """The certificate of ``result.best`` (see the module docstring)."""
    dram = result.best.dram
    e = result.exact
    if e is not None:
        lb = dram if e.optimal else e.lower_bound_bytes
        return Certificate(lb, relative_gap(dram, lb), "optimal" if e.optimal else "A* bound")
    t0 = time.perf_counter()
    solver = ExactSolver(problem.cost_model, problem.unfusable, chains=True)
    static = solver.bound.total()
    if effort <= 0 or not count_downsets(problem.graph, max_downsets)[1]:
        return Certificate(static, relative_gap(dram, static), "traffic bound", _since(t0))
    limits = SolveLimits.of(units(effort, CERTIFY_UNITS), 0.0, clock_end(time_limit_s, t0))
    out = solve(solver, limits, incumbent=(dram, list(result.best.groups)))
    seconds, work = _since(t0), solver.work
    if out.optimal:
        method = "optimal" if out.dram >= dram else "exact optimum"
        lb = out.dram
    else:
        method, lb = "A* bound", max(out.lower_bound, static)
    stopped = "" if out.optimal else out.stopped_by
    return Certificate(lb, relative_gap(dram, lb), method, seconds, work, stopped)


def _since(t0: float) -> float:
    return time.perf_counter() - t0
