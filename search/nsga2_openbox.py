"""The OpenBox backend of NSGA-II (``make_search("nsga2-openbox")`` or ``backend="openbox"``).

The paper ran NSGA-II through ``openbox.NSGAOptimizer``; OpenBox 0.9 implements it on top of
Platypus. The search space is a ConfigSpace with one categorical hyperparameter ``e<i>`` in
{0, 1} per edge of ``problem.edges`` (1 = cut); Platypus encodes each as a one-bit integer
and evolves them with half-uniform crossover and bit-flip mutation (1 / bits per bit). The
objective function decodes a configuration into cut bits, the cut bits into groups
(:class:`fusionplan.search.operators.EdgeCodec`, same result as ``FusionProblem.evaluate_cuts``) and
proposes them with :meth:`FusionProblem.evaluate` (made sound and split there); objectives
(DRAM, MBU).

Differences from the pymoo backend: OpenBox has no repair hook, so the population keeps the
raw bit-strings (their plans are still repaired when evaluated), the initial population is
uniform random bits, and there is no duplicate elimination.

Budget: ``NSGAOptimizer.run`` evaluates whole generations and would overshoot a budget
that is not a multiple of the population, so the objective raises a private exception the
moment ``problem.remaining`` is 0 and the run is ended there: exactly ``budget`` plans.
Platypus draws from Python's global ``random`` (OpenBox seeds it from ``random_state``);
its state is saved and restored around the run, so a seeded run is deterministic and
leaves the caller's ``random`` untouched.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from fusionplan.ir.errors import ConfigError
from fusionplan.planning.result import SearchResult
from fusionplan.search.operators import EdgeCodec
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import Recorder

if TYPE_CHECKING:
    from fusionplan.search.base import Progress
    from fusionplan.search.nsga2 import NSGA2Config

MISSING = "the OpenBox backend needs the extra: pip install 'fusionplan[openbox]'"


class _BudgetSpent(Exception):
    """Raised from the objective to end the OpenBox run exactly at the budget."""


def _import_openbox():
    try:
        # an optional extra: imported only when the OpenBox backend runs
        from ConfigSpace import CategoricalHyperparameter, ConfigurationSpace
        from openbox import NSGAOptimizer
    except ImportError as exc:
        raise ConfigError(MISSING) from exc
    return NSGAOptimizer, ConfigurationSpace, CategoricalHyperparameter


def edge_space(n_edges: int, seed: int):
    """The ConfigSpace: one {0, 1} categorical per edge, named ``e0 .. e<n-1>``."""
    _, ConfigurationSpace, CategoricalHyperparameter = _import_openbox()
    space = ConfigurationSpace(seed=seed)
    space.add_hyperparameters([CategoricalHyperparameter(f"e{i}", [0, 1]) for i in range(n_edges)])
    return space


def run_openbox(name: str, cfg: NSGA2Config, problem: FusionProblem, seed: int,
                progress: Progress | None = None) -> SearchResult:  # fmt: skip
    NSGAOptimizer, _, _ = _import_openbox()
    rec = Recorder(problem, progress)
    extra: dict[str, Any] = {}
    if not problem.edges:  # Platypus cannot evolve zero variables: one plan, repeated
        while problem.remaining > 0:
            rec.observe(problem.evaluate_cuts([]))
        return rec.result(name, seed, config=asdict(cfg), **extra)

    n_edges = len(problem.edges)
    order = [f"e{i}" for i in range(n_edges)]
    space = edge_space(n_edges, seed)
    # the configuration vector follows the space's (sorted) hyperparameter order
    position = {hp: i for i, hp in enumerate(space.get_hyperparameter_names())}
    index = [position[hp] for hp in order]
    observe = rec.observe
    decode = EdgeCodec(problem).decode

    def objective(config) -> dict[str, list[int]]:
        if problem.remaining <= 0:
            raise _BudgetSpent
        vector = config.get_array()  # category index: 0 -> value 0, 1 -> value 1
        cand = observe(problem.evaluate(decode([vector[i] > 0.5 for i in index])))
        return {"objectives": [cand.score, cand.mbu]}

    budget = problem.remaining
    state = random.getstate()
    try:
        with tempfile.TemporaryDirectory(prefix="fusionplan-openbox-") as logdir:
            optimizer = NSGAOptimizer(
                objective,
                space,
                num_objectives=2,
                max_runs=budget,
                population_size=min(cfg.pop_size, budget),
                random_state=seed,
                task_id="fusionplan-nsga2",
                logging_dir=logdir,
                logger_kwargs={"stream": False, "logdir": None, "level": "ERROR"},
            )
            with contextlib.suppress(_BudgetSpent):
                optimizer.run()
    finally:
        random.setstate(state)
    # Platypus stops on its own evaluation count, which equals the budget; a shortfall
    # would only come from a future OpenBox change, so top up with whole-graph proposals
    while problem.remaining > 0:
        rec.observe(problem.evaluate(problem.whole_components()))
    return rec.result(name, seed, config=asdict(cfg), **extra)
