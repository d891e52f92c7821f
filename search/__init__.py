"""Partition-plan search: random search, local search, NSGA-II and the exact optimum.

``make_search(name, **options)`` builds a registered search (``search_names()``: ``rs``,
``ls``, ``nsga2``, ``nsga2-openbox``, ``exact``, ``lns``, ``auto``); options are fields of
the search's config dataclass (:class:`ExactConfig`, :class:`LocalSearchConfig`,
:class:`NSGA2Config`, ...), e.g. ``make_search("nsga2", backend="openbox")``. Importing this
package loads neither pymoo nor OpenBox; the NSGA-II backends import them when they run.

A new search is one module that registers its factory with ``SEARCHES.register(...)``, plus
one import line below (or, from outside the package, the registration line alone).
"""

from fusionplan.planning.result import Candidate, ExactBound, SearchResult
from fusionplan.search.base import SEARCHES, Search, make_search, search_names
from fusionplan.search.effort import WORK_SEARCHES
from fusionplan.search.problem import BudgetExhausted, FusionProblem
from fusionplan.search.result import Recorder

# isort: off
# the builtin searches register themselves, in this order (the CLI lists them so)
from fusionplan.search.random_search import RandomSearch
from fusionplan.search.local_search import LocalSearch, LocalSearchConfig
from fusionplan.search.nsga2 import NSGA2Config, NSGA2Search
from fusionplan.search.exact import ExactConfig, ExactSearch
from fusionplan.search.lns import LargeNeighbourhoodSearch, LNSConfig
from fusionplan.search.auto import AutoConfig, AutoSearch
# isort: on

__all__ = [
    "SEARCHES",
    "WORK_SEARCHES",
    "AutoConfig",
    "AutoSearch",
    "BudgetExhausted",
    "Candidate",
    "ExactBound",
    "ExactConfig",
    "ExactSearch",
    "FusionProblem",
    "LNSConfig",
    "LargeNeighbourhoodSearch",
    "LocalSearch",
    "LocalSearchConfig",
    "NSGA2Config",
    "NSGA2Search",
    "RandomSearch",
    "Recorder",
    "Search",
    "SearchResult",
    "make_search",
    "search_names",
]
