"""Local search (LS): mutation-only evolution over the top-K plans (docs/design.md, "Search").

1. Propose ``initial`` random plans (:meth:`FusionProblem.random_cuts`, the random-search
   distribution; they count against the budget) and keep the ``top_k`` best distinct ones.
2. Until the budget is spent: pick a parent from the top-K, apply exactly one 1-edit
   mutation (:class:`fusionplan.search.operators.OneEditMutation`: move a boundary node to a
   neighbouring group, merge two adjacent groups, or split a group at a topological cut),
   and propose the result; :meth:`FusionProblem.evaluate` makes it sound and splits invalid
   groups. The child enters the top-K if it is not already there and is better than the
   worst member (or the top-K is not full).

Parent selection (``selection``): ``"tournament"`` (default) draws ``tournament_size``
members uniformly with replacement and keeps the one with the lowest DRAM (ties: lower
MBU, then earlier insertion); ``"uniform"`` draws one member uniformly. Top-K order is
(DRAM, MBU) ascending. The search stops exactly when ``problem.remaining == 0``.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from fusionplan.ir.errors import ConfigError
from fusionplan.planning.result import Candidate, SearchResult
from fusionplan.search.base import SEARCHES, Progress, build_config, check_start
from fusionplan.search.operators import OneEditMutation, PlanView
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import Recorder

SELECTIONS = ("tournament", "uniform")


@dataclass(frozen=True)
class LocalSearchConfig:
    """Settings of :class:`LocalSearch` (``make_search("ls", **fields)``)."""

    top_k: int = 10  # plans kept
    initial: int | None = None  # random plans proposed first; None: top_k
    selection: str = "tournament"  # "tournament" or "uniform"
    tournament_size: int = 2
    mutations: tuple[str, ...] = ("move", "merge", "split")

    def __post_init__(self) -> None:
        for name in ("top_k", "tournament_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"ls option {name} must be an integer >= 1, got {value!r}")
        init = self.initial
        if init is not None and (isinstance(init, bool) or not isinstance(init, int) or init < 1):
            raise ConfigError(f"ls option initial must be an integer >= 1, got {init!r}")
        if self.selection not in SELECTIONS:
            raise ConfigError(
                f"ls option selection must be one of {', '.join(SELECTIONS)}, "
                f"got {self.selection!r}"
            )
        if isinstance(self.mutations, str):
            object.__setattr__(self, "mutations", (self.mutations,))
        OneEditMutation(tuple(self.mutations))  # validates the names


class _Member:
    """A top-K plan, with its mutation view built the first time it is a parent."""

    __slots__ = ("cand", "rank", "view")

    def __init__(self, cand: Candidate, seq: int) -> None:
        self.cand = cand
        self.rank = (cand.score, cand.mbu, seq)
        self.view: PlanView | None = None


class LocalSearch:
    name = "ls"

    def __init__(self, config: LocalSearchConfig | None = None, **options: object) -> None:
        self.config = build_config(LocalSearchConfig, config, options, self.name)

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        cfg = self.config
        rng = random.Random(seed)
        rec = Recorder(problem, progress)
        observe = rec.observe
        mutation = OneEditMutation(tuple(cfg.mutations))
        top_k = cfg.top_k
        elite: list[_Member] = []  # sorted by rank, best first
        keys: set[tuple] = set()
        seq = 0

        def offer(cand: Candidate) -> None:
            nonlocal seq
            if cand.key in keys:
                return
            if len(elite) >= top_k:
                worst = elite[-1]
                if (cand.score, cand.mbu) >= worst.rank[:2]:
                    return
                elite.pop()
                keys.discard(worst.cand.key)
            seq += 1
            member = _Member(cand, seq)
            keys.add(cand.key)
            elite.append(member)
            elite.sort(key=lambda m: m.rank)

        for cand in rec.started:  # warm-start plans join the elite the mutations start from
            offer(cand)
        n_init = min(cfg.initial or top_k, problem.remaining)
        for _ in range(n_init):
            if problem.remaining < 1:  # the query budget ran out while starting
                break
            offer(observe(problem.evaluate_cuts(problem.random_cuts(rng))))

        tournament = cfg.selection == "tournament"
        size = cfg.tournament_size
        randrange = rng.randrange
        while problem.remaining > 0:
            n = len(elite)
            if tournament:
                parent = elite[min(randrange(n) for _ in range(size))]
            else:
                parent = elite[randrange(n)]
            view = parent.view
            if view is None:
                view = parent.view = PlanView(problem, parent.cand)
            offer(observe(problem.evaluate(mutation.do(view, rng))))

        return rec.result(self.name, seed, config=asdict(cfg))


SEARCHES.register("ls", LocalSearch, help="local search, top-10 one-edit mutations")
