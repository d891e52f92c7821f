"""The search protocol and registry: one interface, several small algorithms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from fusionplan.errors import ConfigError
from search.problem import FusionProblem
from search.result import SearchResult

Progress = Callable[[int], None]


class Search(Protocol):
    """Propose exactly ``problem.budget`` plans; return the best valid one found."""

    name: str

    def run(
        self, problem: FusionProblem, seed: int, progress: Progress | None = None
    ) -> SearchResult: ...


_SEARCHES: dict[str, Callable[[], Search]] = {}


def register_search(name: str, factory: Callable[[], Search]) -> None:
    _SEARCHES[name] = factory


def _load_builtin() -> None:
    import search.random_search  # noqa: F401  (each module registers itself)


def search_names() -> list[str]:
    _load_builtin()
    return sorted(_SEARCHES)


def make_search(name: str) -> Search:
    _load_builtin()
    if name not in _SEARCHES:
        raise ConfigError(f"unknown search '{name}' (choose from {', '.join(search_names())})")
    return _SEARCHES[name]()
