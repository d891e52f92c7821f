"""Large-neighbourhood search (LNS): the exact search on windows of the best plan.

Where the exact search cannot finish, its A* still solves small subproblems quickly. LNS
frees a *window* of the incumbent, a run of consecutive groups (in the order they execute),
keeps every other group as it is (an atom of :class:`~search.exact.ExactSolver`, run as soon
as it is ready), and solves the freed ops exactly, with the incumbent as the first upper
bound. The result is the best plan that differs from the incumbent only inside the window,
so it is never worse. A window grows group by group while its ops have at most ``states``
down-sets (the subproblem's state count); windows slide by half their length from the
first group, and after a pass without improvement the cap grows by ``growth``, until one window
holds every group: that is the exact search itself, which either proves the incumbent
optimal or runs out of time.

Every improvement is proposed through :meth:`FusionProblem.evaluate` (one plan each); the
search stops at ``time_limit_s`` or when the budget is spent. It starts from the best
warm-start plan, else from the exact search's greedy dive (docs/design.md, "Search").
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, quotient_order
from fusionplan.planning.result import SearchResult
from search.base import SEARCHES, Progress, build_config, check_start
from search.exact import ExactSolver, count_downsets, solve
from search.problem import BudgetExhausted, FusionProblem
from search.result import Recorder


@dataclass(frozen=True)
class LNSConfig:
    """Settings of :class:`LargeNeighbourhoodSearch` (``make_search("lns", **fields)``)."""

    time_limit_s: float = 10.0  # wall-clock limit of the whole run
    states: int = 60  # first cap on a window's down-sets
    growth: float = 1.5  # cap growth after a pass without improvement
    window_time_s: float = 1.0  # at most this long on one window

    def __post_init__(self) -> None:
        for name in ("time_limit_s", "window_time_s"):
            t = getattr(self, name)
            if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
                raise ConfigError(f"lns option {name} must be a number > 0, got {t!r}")
        w = self.states
        if isinstance(w, bool) or not isinstance(w, int) or w < 2:
            raise ConfigError(f"lns option states must be an integer >= 2, got {w!r}")
        g = self.growth
        if isinstance(g, bool) or not isinstance(g, int | float) or not g > 1:
            raise ConfigError(f"lns option growth must be a number > 1, got {g!r}")


@dataclass
class LNSOutcome:
    """What the windows proved, beyond the plan (the auto search reports it)."""

    windows: int = 0  # subproblems solved
    improvements: int = 0
    optimal: bool = False  # a window covered the whole graph and A* finished
    lower_bound: int = 0  # that whole-graph solve's bound (0: none ran)


class LargeNeighbourhoodSearch:
    name = "lns"

    def __init__(self, config: LNSConfig | None = None, **options: object) -> None:
        self.config = build_config(LNSConfig, config, options, self.name)
        self.outcome = LNSOutcome()

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        cfg = self.config
        t0 = time.perf_counter()
        end = t0 + cfg.time_limit_s
        rec = Recorder(problem, progress)
        out = self.outcome = LNSOutcome()
        if rec.best is None:
            start = ExactSolver(problem.cost_model, problem.unfusable)
            state, g0 = start.start_state()
            start.deadline = end
            _, groups = start.dive(state, g0, start.atoms_in(state))
            rec.observe(problem.evaluate([g for g in groups if not g & problem.unfusable]))
        cap = cfg.states
        try:
            while time.perf_counter() < end:
                improved, covered, start = False, False, 0
                while time.perf_counter() < end:
                    order = self._ordered_groups(problem, rec)
                    if start >= len(order):
                        break
                    window, length = self._window(problem, order, start, cap)
                    whole = length == len(order)
                    improved |= self._solve_window(problem, rec, window, whole, end)
                    covered |= whole
                    start += max(length // 2, 1)
                if covered or start == 0:
                    break  # the whole graph was one window (or nothing is searched)
                if not improved:
                    cap = int(cap * cfg.growth) + 1
        except BudgetExhausted:
            pass
        return rec.result(
            self.name, seed, config=asdict(cfg), windows=out.windows,
            improvements=out.improvements, final_states=cap,
        )  # fmt: skip

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
        self, problem: FusionProblem, rec: Recorder, window: Group, whole: bool, end: float
    ) -> bool:
        """Re-solve the incumbent's groups that touch ``window``; True if it improved."""
        best = rec.best
        assert best is not None
        unf = problem.unfusable
        fixed = [g for g in best.groups if not g & unf and not g & window]
        solver = ExactSolver(problem.cost_model, unf, fixed)
        now = time.perf_counter()
        deadline = end if whole else min(end, now + self.config.window_time_s)
        found = solve(solver, deadline, now, deadline, incumbent=(best.dram, list(best.groups)))
        out = self.outcome
        out.windows += 1
        if whole and found.optimal:
            out.optimal, out.lower_bound = True, found.dram
        elif whole:
            out.lower_bound = max(out.lower_bound, found.lower_bound)
        if found.dram >= best.dram:
            return False
        rec.observe(problem.evaluate([g for g in found.groups if not g & unf]))
        out.improvements += 1
        return True


SEARCHES.register(
    "lns", LargeNeighbourhoodSearch, help="exact search on sliding windows of the best plan"
)
