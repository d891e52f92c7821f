"""One registry helper for every plug point (docs/design.md, "Plug points").

A :class:`Registry` maps names to implementations: cost-model classes, splitter factories,
searches, explainers, passes. Each plug point owns one registry object; its package lists
the builtin implementations once, and each implementation module registers itself with one
line. The CLI's choices and help, the bench labels and the dataset schemes read the
registry, so adding an implementation touches no other file.

Implementations that need a heavy library (torch) register *lazily*, as a ``"module:attr"``
target imported on first :meth:`Registry.get`: their names and help show up in
``fusionplan --help`` without importing torch, and a broken import raises its own error
instead of hiding as "unknown name".
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

from fusionplan.ir.errors import ConfigError

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    value: T | None  # None until a lazy target is imported
    target: str  # "module:attr" for lazy entries, "" otherwise
    help: str


class Registry(Generic[T]):
    """Name -> implementation for one plug point, in registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # what one entry is, for messages: "fusion scheme", "search", ...
        self._entries: dict[str, _Entry[T]] = {}

    @overload
    def register(self, name: str, value: None = None, *, help: str = "") -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, value: T, *, help: str = "") -> T: ...

    def register(self, name: str, value: T | None = None, *, help: str = "") -> Any:
        """Register ``value`` under ``name``; without ``value``, a decorator that does.

        Registering a name again replaces the earlier entry (a user may override a builtin).
        """
        if value is None:
            return lambda v: self.register(name, v, help=help)
        self._entries[name] = _Entry(value, "", help or _first_line(value))
        return value

    def register_lazy(self, name: str, target: str, *, help: str = "") -> None:
        """Register ``"module:attr"``, imported when ``name`` is first asked for."""
        module, sep, attr = target.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"lazy {self.kind} target must be 'module:attr', got {target!r}")
        self._entries[name] = _Entry(None, target, help)

    def unregister(self, name: str) -> None:
        self._entries.pop(name, None)

    @contextmanager
    def registered(self, name: str, value: T, *, help: str = "") -> Iterator[T]:
        """Register ``value`` for the duration of a ``with`` block (tests, experiments)."""
        previous = self._entries.get(name)
        self.register(name, value, help=help)
        try:
            yield value
        finally:
            if previous is None:
                self.unregister(name)
            else:
                self._entries[name] = previous

    def names(self) -> list[str]:
        """Registered names, builtins first, in registration order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def check(self, name: str) -> str:
        """``name`` if registered, else a :class:`ConfigError` listing the choices."""
        if name not in self._entries:
            raise ConfigError(
                f"unknown {self.kind} '{name}' (choose from {', '.join(self.names())})"
            )
        return name

    def get(self, name: str) -> T:
        """The implementation registered as ``name`` (importing a lazy one now)."""
        entry = self._entries[self.check(name)]
        if entry.value is None:
            module, _, attr = entry.target.partition(":")
            entry.value = getattr(importlib.import_module(module), attr)
        return entry.value

    def describe(self) -> str:
        """``name (help) | name (help) ...``: the text CLI options show."""
        parts = [f"{n} ({e.help})" if e.help else n for n, e in self._entries.items()]
        return " | ".join(parts)


def _first_line(value: object) -> str:
    """A default help text: the first line of the implementation's docstring."""
    if not (inspect.isclass(value) or inspect.isfunction(value)):
        return ""
    doc = inspect.getdoc(value) or ""
    return doc.splitlines()[0].rstrip(".") if doc else ""
