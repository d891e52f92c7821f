"""Partition-plan search: random search, local search, NSGA-II and the exact optimum.

``make_search(name, **options)`` builds a registered search (``search_names()``: ``exact``,
``rs``, ``ls``, ``nsga2``, ``nsga2-openbox``); options are fields of the search's config
dataclass (:class:`ExactConfig`, :class:`LocalSearchConfig`, :class:`NSGA2Config`), e.g.
``make_search("nsga2", backend="openbox")``. Importing this package loads neither pymoo nor
OpenBox; the NSGA-II backends import them when they run.
"""

from search.base import Search, make_search, register_search, search_names
from search.problem import BudgetExhausted, Candidate, FusionProblem
from search.result import Recorder, SearchResult

__all__ = [
    "BudgetExhausted",
    "Candidate",
    "ExactConfig",
    "FusionProblem",
    "LocalSearchConfig",
    "NSGA2Config",
    "Recorder",
    "Search",
    "SearchResult",
    "make_search",
    "register_search",
    "search_names",
]


def __getattr__(name: str):
    # the config dataclasses live with their searches; load them on first use
    if name == "ExactConfig":
        from search.exact import ExactConfig

        return ExactConfig
    if name == "LocalSearchConfig":
        from search.local_search import LocalSearchConfig

        return LocalSearchConfig
    if name == "NSGA2Config":
        from search.nsga2 import NSGA2Config

        return NSGA2Config
    raise AttributeError(f"module 'search' has no attribute {name!r}")
