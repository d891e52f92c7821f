"""Large-neighbourhood search (LNS): the exact search on windows of the best plan.

Where the exact search cannot finish, its A* still solves small subproblems quickly. LNS
frees a *window* of the incumbent, a run of consecutive groups (in the order they execute),
keeps every other group as it is (an atom of :class:`~fusionplan.search.exact.ExactSolver`, run as
soon as it is ready), and solves the freed ops exactly, with the incumbent as the first upper
bound. The result is the best plan that differs from the incumbent only inside the window,
so it is never worse. A window grows group by group while its ops have at most ``states``
down-sets (the subproblem's state count); windows slide by half their length from the
first group, and after a pass without improvement the cap grows by ``growth``, until one window
holds every group: that is the exact search itself, which either proves the incumbent
optimal or spends its work.

Every improvement is proposed through :meth:`FusionProblem.evaluate` (one plan each). The
search stops when its work units are spent (``effort`` x ``LNS_UNITS``, or ``work`` when
set; a window takes at most ``window_work`` of them: search/effort.py), when the plan budget
is spent, or at the wall-clock safety cap ``time_limit_s``. It starts from the best
warm-start plan, else from the exact search's greedy dive (docs/design.md, "Search").
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, quotient_order
from fusionplan.planning.result import SearchResult
from fusionplan.search.base import SEARCHES, Progress, build_config, check_start
from fusionplan.search.effort import (
    LNS_UNITS,
    STOP_BUDGET,
    STOP_CLOCK,
    STOP_OPTIMAL,
    STOP_WORK,
    WINDOW_UNITS,
    check_effort,
    check_time_cap,
    check_units,
    clock_end,
    run_units,
)
from fusionplan.search.exact import ExactSolver, SolveLimits, count_downsets, solve
from fusionplan.search.problem import BudgetExhausted, FusionProblem
from fusionplan.search.result import Recorder


@dataclass(frozen=True)
class LNSConfig:
    """Settings of :class:`LargeNeighbourhoodSearch` (``make_search("lns", **fields)``)."""

    effort: float = 1.0  # work of the whole run, in units of LNS_UNITS (search/effort.py)
    time_limit_s: float | None = None  # wall-clock safety cap; None: none
    states: int = 60  # first cap on a window's down-sets
    growth: float = 1.5  # cap growth after a pass without improvement
    window_work: int = WINDOW_UNITS  # at most this many work units on one window
    work: int | None = None  # the run's units, overriding effort (auto sets it)

    def __post_init__(self) -> None:
        check_effort("lns option", self.effort)
        check_time_cap("lns option", self.time_limit_s)
        check_units("lns option", "window_work", self.window_work)
        check_units("lns option", "work", self.work, optional=True)
        w = self.states
        if isinstance(w, bool) or not isinstance(w, int) or w < 2:
            raise ConfigError(f"lns option states must be an integer >= 2, got {w!r}")
        g = self.growth
        if isinstance(g, bool) or not isinstance(g, int | float) or not g > 1:
            raise ConfigError(f"lns option growth must be a number > 1, got {g!r}")

    @property
    def total_work(self) -> int:
        return run_units(self.effort, self.work, LNS_UNITS)


@dataclass
class LNSOutcome:
    """What the windows proved, beyond the plan (the auto search reports it)."""

    windows: int = 0  # subproblems solved
    improvements: int = 0
    optimal: bool = False  # a window covered the whole graph and A* finished
    lower_bound: int = 0  # that whole-graph solve's bound (0: none ran)
    work: int = 0  # units spent in all
    stopped_by: str = STOP_OPTIMAL  # STOP_WORK / STOP_CLOCK when a limit ended the run


class LargeNeighbourhoodSearch:
    name = "lns"

    def __init__(self, config: LNSConfig | None = None, **options: object) -> None:
        self.config = build_config(LNSConfig, config, options, self.name)
        self.outcome = LNSOutcome()

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        cfg = self.config
        self._end = clock_end(cfg.time_limit_s)
        rec = Recorder(problem, progress)
        out = self.outcome = LNSOutcome()
        if rec.best is None:
            start = ExactSolver(problem.cost_model, problem.unfusable)
            state, g0 = start.start_state()
            start.work_end, start.clock_end = min(cfg.window_work, cfg.total_work), self._end
            _, groups = start.dive(state, g0, start.atoms_in(state))
            out.work += start.work
            rec.observe(problem.evaluate([g for g in groups if not g & problem.unfusable]))
        cap = cfg.states
        try:
            while not self._spent():
                improved, covered, start = False, False, 0
                while not self._spent():
                    order = self._ordered_groups(problem, rec)
                    if start >= len(order):
                        break
                    window, length = self._window(problem, order, start, cap)
                    whole = length == len(order)
                    improved |= self._solve_window(problem, rec, window, whole)
                    covered |= whole
                    start += max(length // 2, 1)
                if covered or start == 0:
                    break  # the whole graph was one window (or nothing is searched)
                if not improved:
                    cap = int(cap * cfg.growth) + 1
        except BudgetExhausted:
            out.stopped_by = STOP_BUDGET
        return rec.result(
            self.name, seed, config=asdict(cfg), windows=out.windows,
            improvements=out.improvements, final_states=cap, work=out.work,
            stopped_by=out.stopped_by,
        )  # fmt: skip

    def _spent(self) -> bool:
        """Whether the run's work units are spent or the clock is past the safety cap
        (and if so, say which in the outcome)."""
        out = self.outcome
        if out.work >= self.config.total_work:
            out.stopped_by = STOP_WORK
        elif time.perf_counter() > self._end:
            out.stopped_by = STOP_CLOCK
        else:
            return False
        return True

    @staticmethod
    def _ordered_groups(problem: FusionProblem, rec: Recorder) -> list[Group]:
        """The incumbent's searched groups in an order they can execute in."""
        assert rec.best is not None
        groups = [g for g in rec.best.groups if not g & problem.unfusable]
        order = quotient_order(problem.graph, groups)
        assert order is not None, "a valid plan's quotient graph is acyclic"
        return [groups[i] for i in order]

    @staticmethod
    def _window(
        problem: FusionProblem, order: list[Group], start: int, cap: int
    ) -> tuple[Group, int]:
        """Consecutive groups from ``start`` while their ops have <= ``cap`` down-sets
        (always one group at least); the window's ops and how many groups it holds."""
        window, length = order[start], 1
        for grp in order[start + 1 :]:
            if not count_downsets(problem.graph, cap, region=window | grp)[1]:
                break
            window |= grp
            length += 1
        return window, length

    def _solve_window(
        self, problem: FusionProblem, rec: Recorder, window: Group, whole: bool
    ) -> bool:
        """Re-solve the incumbent's groups that touch ``window``; True if it improved.

        A window may spend ``window_work`` units (the whole-graph window: all that is left),
        and always at least one, so the run ends after finitely many windows."""
        best = rec.best
        assert best is not None
        unf = problem.unfusable
        fixed = [g for g in best.groups if not g & unf and not g & window]
        solver = ExactSolver(problem.cost_model, unf, fixed)
        out, cfg = self.outcome, self.config
        left = cfg.total_work - out.work
        limits = SolveLimits.of(left if whole else min(left, cfg.window_work), 0.0, self._end)
        found = solve(solver, limits, incumbent=(best.dram, list(best.groups)))
        out.work += max(solver.work, 1)
        out.windows += 1
        if whole and found.optimal:
            out.optimal, out.lower_bound = True, found.dram
        elif whole:
            out.lower_bound = max(out.lower_bound, found.lower_bound)
            out.stopped_by = found.stopped_by
        if found.dram >= best.dram:
            return False
        rec.observe(problem.evaluate([g for g in found.groups if not g & unf]))
        out.improvements += 1
        return True


SEARCHES.register(
    "lns", LargeNeighbourhoodSearch, help="exact search on sliding windows of the best plan"
)
