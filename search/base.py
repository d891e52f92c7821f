"""The search protocol and registry: one interface, several small algorithms.

``make_search(name, **options)`` builds a registered search; ``options`` are the fields of
that search's config dataclass (``LocalSearchConfig`` for ``"ls"``, ``NSGA2Config`` for
``"nsga2"``, e.g. ``make_search("nsga2", backend="openbox", pop_size=20)``). Unknown names
and options raise :class:`~fusionplan.ir.errors.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from fusionplan.ir.errors import ConfigError
from fusionplan.ir.registry import Registry
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import SearchResult

Progress = Callable[[int], None]
C = TypeVar("C")


class Search(Protocol):
    """Propose at most ``problem.budget`` plans and return the best valid one found.

    The heuristics (rs, ls, nsga2) propose exactly the budget; the exact DP enumerates groups
    outside the budget and proposes only its answer.
    """

    name: str

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult: ...  # fmt: skip


SEARCHES: Registry[Callable[..., Search]] = Registry("search")
"""Search name -> ``factory(**options)``; the builtins register in ``search/__init__.py``."""


def search_names() -> list[str]:
    return SEARCHES.names()


def make_search(name: str, **options: Any) -> Search:
    """A fresh search by registry name, configured by its config dataclass's fields."""
    factory = SEARCHES.get(name)
    if options and not _takes_options(factory):
        raise ConfigError(f"search '{name}' takes no options, got {', '.join(sorted(options))}")
    return factory(**options)


def _takes_options(factory: Callable[..., Search]) -> bool:
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return True
    return any(p.kind is not inspect.Parameter.POSITIONAL_ONLY for p in params)


def build_config(cls: type[C], config: C | None, options: Mapping[str, Any], search: str) -> C:
    """``config`` (or the defaults) with ``options`` applied; unknown fields are an error."""
    base = config if config is not None else cls()
    known = {f.name for f in dataclasses.fields(base)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigError(
            f"search '{search}' has no option {', '.join(map(repr, unknown))} "
            f"(options: {', '.join(sorted(known))})"
        )
    return dataclasses.replace(base, **options) if options else base  # type: ignore[type-var]


def check_start(problem: FusionProblem) -> None:
    """Refuse to start a search that could not propose a single plan."""
    if problem.remaining < 1:
        raise ConfigError(
            f"search budget exhausted before the search started: {problem.proposed} of "
            f"{problem.budget} plans already proposed (budget must leave >= 1 plan)"
        )
