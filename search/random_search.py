"""Random search (RS): an independent random partition at every step."""

from __future__ import annotations

import random

from fusionplan.planning.result import SearchResult
from fusionplan.search.base import SEARCHES, Progress
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import Recorder


class RandomSearch:
    name = "rs"

    def run(
        self, problem: FusionProblem, seed: int, progress: Progress | None = None
    ) -> SearchResult:
        rng = random.Random(seed)
        rec = Recorder(problem, progress)
        while problem.remaining > 0:
            rec.observe(problem.evaluate_cuts(problem.random_cuts(rng)))
        return rec.result(self.name, seed)


SEARCHES.register("rs", RandomSearch, help="random search")
