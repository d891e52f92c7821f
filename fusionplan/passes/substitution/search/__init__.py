"""Substitution searches behind one protocol (docs/design.md, "Graph substitution")."""

from __future__ import annotations

from fusionplan.ir.registry import Registry
from fusionplan.passes.substitution.search.autograph import AutoGraph
from fusionplan.passes.substitution.search.backtracking import Backtracking
from fusionplan.passes.substitution.search.base import (
    Problem,
    RewriteCandidate,
    RewriteResult,
    Step,
    SubstitutionSearch,
)
from fusionplan.passes.substitution.search.metaflow import MetaFlow
from fusionplan.passes.substitution.search.ocggs import DynamicProgramming, Pruning, Sampling

REWRITE_SEARCHES: Registry[type[SubstitutionSearch]] = Registry("substitution search")
REWRITE_SEARCHES.register("metaflow", MetaFlow, help="MetaFlow: backtracking on a flow-based split")
REWRITE_SEARCHES.register("taso", Backtracking, help="TASO: backtracking over the whole graph")
REWRITE_SEARCHES.register("ocggs-prune", Pruning, help="OCGGS Pruning: exact up to K steps")
REWRITE_SEARCHES.register(
    "ocggs-dpp", DynamicProgramming, help="OCGGS DPP: exact up to K, reuses matches"
)
REWRITE_SEARCHES.register("ocggs-sample", Sampling, help="OCGGS Sampling: Q=20 samples per step")
REWRITE_SEARCHES.register(
    "autograph", AutoGraph, help="AutoGraph: DP over subgraphs, top-k measured"
)

__all__ = [
    "REWRITE_SEARCHES",
    "AutoGraph",
    "Backtracking",
    "DynamicProgramming",
    "MetaFlow",
    "Problem",
    "Pruning",
    "RewriteCandidate",
    "RewriteResult",
    "Sampling",
    "Step",
    "SubstitutionSearch",
]
