"""Partition-plan search: random search, local search, NSGA-II (and, later, exact)."""

from search.base import Search, make_search, register_search, search_names
from search.problem import BudgetExhausted, Candidate, FusionProblem
from search.result import Recorder, SearchResult

__all__ = [
    "BudgetExhausted",
    "Candidate",
    "FusionProblem",
    "Recorder",
    "Search",
    "SearchResult",
    "make_search",
    "register_search",
    "search_names",
]
