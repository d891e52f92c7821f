"""NSGA-II over edge-cut bit-strings, objectives (the problem's score, MBU bytes), both
minimised; with ``front="dram-energy-latency"`` (pymoo) the three objectives (DRAM bytes,
energy, latency) instead, and the result's ``extra["front"]`` lists the non-dominated plans
found (docs/cost-model.md, "Energy and latency").

Encoding: bit ``i`` set <=> ``problem.edges[i]`` is cut; a group is a connected component
of the uncut edges (:func:`fusionplan.ir.partition.groups_from_cut_edges`).

Backends (``NSGA2Config.backend``; also the registry name ``"nsga2-openbox"``):

* ``"pymoo"`` (default) — pymoo's ``NSGA2`` driven through ask/tell. Initial population:
  :class:`fusionplan.search.operators.RandomCutSampling` (the random-search distribution).
  Variation: two-point (default) or uniform crossover + bit-flip mutation at ``mutation_rate`` per
  bit (default ``1 / len(edges)``). Soundness and splitting run as a pymoo ``Repair``
  (:class:`fusionplan.search.operators.PlanRepair`) that rewrites each offspring to the cut bits of
  the valid plan it becomes, so the population always carries valid plans and pymoo's duplicate
  elimination compares real plans. Budget: the population is ``min(pop_size, remaining)``
  and, before each ``ask``, ``n_offsprings`` is capped at the remaining budget; every plan is
  counted by :meth:`FusionProblem.evaluate_realised` inside the pymoo problem's evaluation.
  If duplicate elimination leaves pymoo with no new offspring (a converged population on a
  small graph), random immigrants from the sampling operator are told instead, so the run
  still spends exactly the budget.
* ``"openbox"`` — ``openbox.NSGAOptimizer`` (the paper's choice; see
  :mod:`fusionplan.search.nsga2_openbox`). An optional extra.

Seeded runs are deterministic: pymoo draws from ``np.random.default_rng(seed)`` only.
They are also the same on every CPU: survival is :func:`stable_rank_and_crowding`, pymoo's
``RankAndCrowding`` whose one sort that can see ties (ordering the last front by crowding
distance) is stable; pymoo's own uses ``np.argsort(kind="quicksort")``, which numpy
dispatches by CPU and which orders equal distances differently with AVX-512. Every other
step of pymoo's survival and mating is tie-free or already stable: non-dominated ranks are
a function of the objective values (``moocore.pareto_rank``; each front in index order),
crowding distance sorts each objective with ``kind="mergesort"`` and inverts a permutation,
the tournament compares values (a seeded coin on equal ones), two-point crossover sorts
distinct cut points, and duplicate elimination compares distances with a threshold.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from accel_model.objectives import make_objective
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import bits
from fusionplan.planning.result import Candidate, SearchResult
from fusionplan.search.base import SEARCHES, Progress, build_config, check_start
from fusionplan.search.nsga2_openbox import MISSING, run_openbox
from fusionplan.search.operators import PlanRepair, RandomCutSampling, stable_randomized_argsort
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import Recorder

BACKENDS = ("pymoo", "openbox")
CROSSOVERS = ("two_point", "uniform")
PYMOO_ONLY = ("crossover", "crossover_prob", "mutation_rate", "eliminate_duplicates", "front")
MATING_TRIES = 10  # mating rounds per generation before pymoo gives up on unique offspring
FRONTS = ("mbu", "dram-energy-latency")


@dataclass(frozen=True)
class NSGA2Config:
    """Settings of :class:`NSGA2Search` (``make_search("nsga2", **fields)``).

    ``crossover``, ``crossover_prob``, ``mutation_rate`` and ``eliminate_duplicates`` apply
    to the pymoo backend; OpenBox uses its own operators (half-uniform crossover, bit-flip at
    1 / bits) and accepts only their defaults here.
    """

    pop_size: int = 10
    backend: str = "pymoo"  # "pymoo" or "openbox"
    crossover: str = "two_point"  # "two_point" or "uniform"
    crossover_prob: float = 0.9
    mutation_rate: float | None = None  # per bit; None: 1 / number of edges
    eliminate_duplicates: bool = True
    front: str = "mbu"  # objectives: (score, MBU) or (DRAM, energy, latency)

    def __post_init__(self) -> None:
        p = self.pop_size
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ConfigError(f"nsga2 option pop_size must be an integer >= 1, got {p!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"unknown NSGA-II backend {self.backend!r} (choose from {', '.join(BACKENDS)})"
            )
        if self.crossover not in CROSSOVERS:
            raise ConfigError(
                f"nsga2 option crossover must be one of {', '.join(CROSSOVERS)}, "
                f"got {self.crossover!r}"
            )
        if not _is_prob(self.crossover_prob):
            raise ConfigError(f"nsga2 option crossover_prob must be in [0, 1], got "
                              f"{self.crossover_prob!r}")  # fmt: skip
        if self.front not in FRONTS:
            raise ConfigError(
                f"nsga2 option front must be one of {', '.join(FRONTS)}, got {self.front!r}"
            )
        if self.mutation_rate is not None and not _is_prob(self.mutation_rate):
            raise ConfigError(f"nsga2 option mutation_rate must be in [0, 1], got "
                              f"{self.mutation_rate!r}")  # fmt: skip
        if self.backend == "openbox":
            default = NSGA2Config()
            changed = [name for name in PYMOO_ONLY if getattr(self, name) != getattr(default, name)]
            if changed:
                raise ConfigError(
                    f"nsga2 option(s) {', '.join(changed)} apply to the pymoo backend only; "
                    "the OpenBox backend uses OpenBox's own operators"
                )


def _openbox_installed() -> bool:
    """Whether OpenBox can be imported, without importing it (that takes seconds)."""
    try:
        return importlib.util.find_spec("openbox") is not None
    except (ImportError, ValueError):  # a None entry in sys.modules: blocked on purpose
        return False


def _is_prob(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0.0 <= value <= 1.0
    )


class NSGA2Search:
    """NSGA-II; ``config.backend`` picks pymoo (default) or OpenBox."""

    def __init__(self, config: NSGA2Config | None = None, **options: object) -> None:
        self.config = build_config(NSGA2Config, config, options, "nsga2")
        if self.config.backend == "openbox" and not _openbox_installed():
            raise ConfigError(MISSING)

    @property
    def name(self) -> str:
        return "nsga2" if self.config.backend == "pymoo" else "nsga2-openbox"

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        if self.config.backend == "openbox":
            return run_openbox(self.name, self.config, problem, seed, progress)
        rec = Recorder(problem, progress)
        extra: dict[str, Any] = {}
        if not problem.edges:  # nothing to encode: every proposal is the same plan
            while problem.remaining > 0:
                rec.observe(problem.evaluate_cuts([]))
        else:
            extra.update(_run_pymoo(self.config, problem, seed, rec))
        return rec.result(self.name, seed, config=asdict(self.config), **extra)


def stable_rank_and_crowding() -> Any:
    """pymoo's NSGA-II survival (``RankAndCrowding()``: non-dominated fronts, crowding
    distance ``"cd"``) with the last front ordered by :func:`stable_randomized_argsort`.

    ``_do`` is pymoo 0.6.2's ``RankAndCrowding._do`` with that one call changed: same
    random draws, same ``rank`` and ``crowding`` attributes, same survivors wherever
    pymoo's quicksort keeps ties in order, and the same survivors on every CPU.
    """
    # pymoo loads only when NSGA-II runs (keeps `import search` light)
    from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

    class StableRankAndCrowding(RankAndCrowding):
        def _do(self, problem, pop, *args, random_state=None, n_survive=None, **kwargs):
            F = pop.get("F").astype(float, copy=False)
            survivors: list[int] = []
            fronts = self.nds.do(F, n_stop_if_ranked=n_survive)
            for k, front in enumerate(fronts):
                order = np.arange(len(front))
                if len(survivors) + len(order) > n_survive:
                    # the splitting front: keep the least crowded, ties by a seeded shuffle
                    n_remove = len(survivors) + len(front) - n_survive
                    crowding = self.crowding_func.do(F[front, :], n_remove=n_remove)
                    order = stable_randomized_argsort(crowding, random_state, descending=True)
                    order = order[:-n_remove]
                else:
                    crowding = self.crowding_func.do(F[front, :], n_remove=0)
                for j, i in enumerate(front):
                    pop[i].set("rank", k)
                    pop[i].set("crowding", crowding[j])
                survivors.extend(front[order])
            return pop[survivors]

    return StableRankAndCrowding()


def _run_pymoo(cfg: NSGA2Config, problem: FusionProblem, seed: int, rec: Recorder
               ) -> dict[str, Any]:  # fmt: skip
    """The ask/tell loop; returns counters for the result's ``extra``."""
    # pymoo loads only when NSGA-II runs (keeps `import search` light)
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.population import Population
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.core.sampling import Sampling
    from pymoo.core.termination import NoTermination
    from pymoo.operators.crossover.pntx import TwoPointCrossover
    from pymoo.operators.crossover.ux import UniformCrossover
    from pymoo.operators.mutation.bitflip import BitflipMutation

    n_var = len(problem.edges)
    repair_op = PlanRepair(problem)
    sampling_op = RandomCutSampling()
    observe = rec.observe
    front = ParetoFront(problem) if cfg.front != "mbu" else None
    n_obj = 2 if front is None else 3

    class CutProblem(Problem):
        """Each row is a repaired bit-string; evaluating it proposes its plan (counted)."""

        def __init__(self) -> None:
            super().__init__(n_var=n_var, n_obj=n_obj, xl=0, xu=1, vtype=bool)

        def _evaluate(self, X, out, *args, **kwargs):
            F = np.empty((len(X), n_obj))
            for i, x in enumerate(X):
                cand = observe(problem.evaluate_realised(repair_op.plan_of(x)))
                if front is None:
                    F[i, 0], F[i, 1] = cand.score, cand.mbu
                else:
                    F[i] = front.observe(cand)
            out["F"] = F

    class CutSampling(Sampling):
        def _do(self, _problem, n_samples, *args, random_state=None, **kwargs):
            return sampling_op.do(n_samples, n_var, random_state)

    class PlanRepairOp(Repair):
        def _do(self, _problem, X, **kwargs):
            return repair_op.do(X)

    crossover = (TwoPointCrossover if cfg.crossover == "two_point" else UniformCrossover)(
        prob=cfg.crossover_prob
    )
    rate = cfg.mutation_rate if cfg.mutation_rate is not None else min(0.5, 1.0 / n_var)
    pop_size = min(cfg.pop_size, problem.remaining)
    algorithm = NSGA2(
        pop_size=pop_size,
        sampling=CutSampling(),
        crossover=crossover,
        mutation=BitflipMutation(prob=1.0, prob_var=rate),
        repair=PlanRepairOp(),
        survival=stable_rank_and_crowding(),
        eliminate_duplicates=cfg.eliminate_duplicates,
    )
    # pymoo re-mates up to 100 times to fill a generation with unique offspring; on small
    # graphs whose plans are nearly all in the population that dominates the run time
    algorithm.mating.n_max_iterations = MATING_TRIES
    pproblem = CutProblem()
    algorithm.setup(pproblem, termination=NoTermination(), seed=seed, verbose=False)
    rng = algorithm.random_state
    generations = immigrant_batches = 0
    while (room := problem.remaining) > 0:
        if algorithm.is_initialized:
            algorithm.n_offsprings = min(pop_size, room)
        infills = algorithm.ask()
        if infills is None or len(infills) == 0:
            # duplicate elimination found nothing new: bring in random immigrants
            algorithm.termination.force_termination = False
            n = min(pop_size, room)
            X = repair_op.do(sampling_op.do(n, n_var, rng))
            infills = Population.new("X", X)
            immigrant_batches += 1
        # the room before ask: its repair may spend the query budget, and the generation
        # it paid for is still proposed (the plan budget: never needed, a guard)
        infills = infills[:room]
        algorithm.evaluator.eval(pproblem, infills, algorithm=algorithm)
        algorithm.tell(infills=infills)
        generations += 1
    counters: dict[str, Any] = {"generations": generations, "immigrant_batches": immigrant_batches}
    if front is not None:
        counters["front"] = front.rows()
    return counters


class ParetoFront:
    """The non-dominated plans by (DRAM bytes, energy fJ, latency cycles) seen so far,
    each plan's energy and latency read off its schedules (one metrics model for both)."""

    def __init__(self, problem: FusionProblem) -> None:
        cm, shared = problem.cost_model, problem.objective
        self.names = [n.name for n in cm.graph.nodes]
        self.energy = make_objective("energy", cm, shared.hw, shared.metrics)
        self.latency = make_objective("latency", cm, shared.hw, shared.metrics)
        self.points: dict[tuple[int, ...], tuple[int, int, int]] = {}

    def observe(self, cand: Candidate) -> tuple[int, int, int]:
        point = (cand.dram, self.energy.plan(cand.groups), self.latency.plan(cand.groups))
        if not any(_dominates(p, point) or p == point for p in self.points.values()):
            self.points = {k: p for k, p in self.points.items() if not _dominates(point, p)}
            self.points[cand.groups] = point
        return point

    def rows(self) -> list[dict[str, Any]]:
        """The front, DRAM ascending (ties by energy, then latency), each with its plan's
        groups as op names."""
        names = self.names
        return [
            {"dram_bytes": d, "energy_fj": e, "latency_cycles": t,
             "groups": [[names[v] for v in bits(g)] for g in groups]}
            for groups, (d, e, t) in sorted(self.points.items(), key=lambda kv: kv[1])
        ]  # fmt: skip


def _dominates(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def _openbox_factory(config: NSGA2Config | None = None, **options: Any) -> NSGA2Search:
    if options.get("backend", "openbox") != "openbox":
        raise ConfigError("search 'nsga2-openbox' always uses the OpenBox backend")
    options["backend"] = "openbox"
    return NSGA2Search(config, **options)


SEARCHES.register("nsga2", NSGA2Search, help="NSGA-II over (DRAM, peak buffer)")
SEARCHES.register("nsga2-openbox", _openbox_factory, help="NSGA-II on OpenBox")
