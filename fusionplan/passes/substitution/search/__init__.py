"""Substitution searches behind one protocol (docs/design.md, "Graph substitution")."""

from __future__ import annotations

from fusionplan.ir.registry import Registry
from fusionplan.passes.substitution.search.autograph import AutoGraph
from fusionplan.passes.substitution.search.backtracking import Backtracking
from fusionplan.passes.substitution.search.base import (
    Candidate,
    Problem,
    SearchResult,
    Step,
    SubstitutionSearch,
)
from fusionplan.passes.substitution.search.metaflow import MetaFlow
from fusionplan.passes.substitution.search.ocggs import DynamicProgramming, Pruning, Sampling

SEARCHES: Registry[type[SubstitutionSearch]] = Registry("substitution search")
SEARCHES.register("metaflow", MetaFlow, help="MetaFlow: backtracking on a flow-based split")
SEARCHES.register("taso", Backtracking, help="TASO: backtracking over the whole graph")
SEARCHES.register("ocggs-prune", Pruning, help="OCGGS Pruning: exact up to K steps")
SEARCHES.register("ocggs-dpp", DynamicProgramming, help="OCGGS DPP: exact up to K, reuses matches")
SEARCHES.register("ocggs-sample", Sampling, help="OCGGS Sampling: Q=20 samples per step")
SEARCHES.register("autograph", AutoGraph, help="AutoGraph: DP over subgraphs, top-k measured")

__all__ = [
    "SEARCHES",
    "AutoGraph",
    "Backtracking",
    "Candidate",
    "DynamicProgramming",
    "MetaFlow",
    "Problem",
    "Pruning",
    "Sampling",
    "SearchResult",
    "Step",
    "SubstitutionSearch",
]
