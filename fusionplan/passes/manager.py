"""The pass pipeline: typed options, declared facts, results that travel (docs/design.md,
"Pass pipeline").

A pass is a :class:`ModelPass` subclass registered in :data:`fusionplan.passes.PASSES`. It
declares a frozen dataclass of options (defaults, types, a ``check`` for values), the facts
about the graph it ``needs``, ``provides`` and, if it rewrites the graph, ``keeps``; its
``run(graph, context)`` returns a :class:`PassResult`: the graph for the next pass, whether it
changed, a report and its artifacts (the stream schedule). :func:`make_context` gathers and
checks every option (accelerator file, API, command line) before a model is read, and
:class:`Sequential` runs the passes in order on the model IR, checking each pass's needs
first and dropping artifacts a later rewrite made stale.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from accel_model import Accelerator
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.model import ModelGraph
from fusionplan.ir.registry import Registry

STATIC_SHAPES = "static shapes"
"""Every tensor has a static shape: the importer establishes it for the graph it builds."""
STREAM_SCHEDULE = "stream schedule"
"""The graph's ops assigned to parallel streams (the ``streams`` pass's artifact)."""
IMPORTED: frozenset[str] = frozenset({STATIC_SHAPES})
"""The facts of a freshly imported model."""
DEVICE = "device"
"""The one context-wide setting of an options mapping: the op-latency model passes price
ops on, the default of every pass's ``device`` option."""


class Report(Protocol):
    """A pass's typed report: JSON for the plan file, a text summary for people."""

    def to_json(self) -> dict[str, Any]: ...

    def summary(self) -> str: ...


class Artifact(Protocol):
    """Something a pass computed about the graph that later stages read (by fact name)."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PassResult:
    """What one pass returns: the graph for the next stage, whether the pass changed it
    (an analysis returns its input and ``False``), its report and one-line
    headline, and its artifacts keyed by the fact each one is."""

    graph: ModelGraph
    modified: bool
    report: Report
    headline: str
    artifacts: Mapping[str, Artifact] = field(default_factory=dict)


@dataclass(frozen=True)
class NoOptions:
    """The options of a pass that takes none."""


class OptionError(ConfigError):
    """A bad option value, raised by an options class's ``check``; the pipeline names the
    pass and where the value came from."""

    def __init__(self, option: str, why: str) -> None:
        super().__init__(f"{option}: {why}")
        self.option, self.why = option, why


def check_choice(registry: Registry[Any], option: str, value: str) -> None:
    """An options class's check that ``value`` is a name in ``registry``."""
    try:
        registry.check(value)
    except ConfigError as exc:
        raise OptionError(option, str(exc)) from None


class ModelPass(ABC):
    """Base of every pass: model IR in, :class:`PassResult` out.

    A subclass sets ``name``, ``Options`` (its frozen options dataclass, whose optional
    ``check()`` raises :class:`OptionError`), ``needs`` and ``provides`` (fact names such as
    :data:`STATIC_SHAPES`, :data:`STREAM_SCHEDULE`), and, if it may change the graph,
    ``rewrites = True`` and ``keeps`` (the facts still true of the graph it returns; every
    other fact and artifact is dropped when it reports a change).
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    needs: ClassVar[frozenset[str]] = frozenset()
    provides: ClassVar[frozenset[str]] = frozenset()
    rewrites: ClassVar[bool] = False
    keeps: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else type(self).Options()

    @abstractmethod
    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        """This pass on ``graph``; ``self.options`` are its checked options."""


PassRegistry = Registry[type[ModelPass]]


@dataclass(frozen=True)
class PassContext:
    """What every pass of one pipeline sees: each pass's checked options, the op-latency
    model (``device``), the accelerator being planned for (None outside ``plan``), and the
    results and live artifacts of the passes that ran before it."""

    passes: tuple[str, ...]
    options: Mapping[str, Any]
    device: str | None = None
    accelerator: Accelerator | None = None
    plan_effort: float | None = None
    """The planner's effort of the plan the passes serve (None outside ``plan``)."""
    results: tuple[PassResult, ...] = ()
    artifacts: Mapping[str, Artifact] = field(default_factory=dict)
    """Fact -> the latest artifact of the passes so far that is still true of the graph."""

    def artifact(self, fact: str) -> Any:
        """The live artifact for ``fact`` (None where none is)."""
        return self.artifacts.get(fact)


@dataclass(frozen=True)
class PipelineResult:
    """Every pass's result in order, the final graph and the artifacts still valid for it
    (``stale``: fact -> the pass whose rewrite invalidated an earlier artifact)."""

    graph: ModelGraph
    results: tuple[PassResult, ...]
    names: tuple[str, ...]
    artifacts: Mapping[str, Artifact]
    stale: Mapping[str, str]

    @property
    def modified(self) -> bool:
        return any(r.modified for r in self.results)


class Sequential:
    """Runs the context's passes in order on the model IR (TVM's ``Sequential``)."""

    def __init__(self, registry: PassRegistry, context: PassContext) -> None:
        self.registry = registry
        self.context = context
        self.classes = [registry.get(name) for name in context.passes]
        check_order(context.passes, self.classes)

    def run(self, graph: ModelGraph) -> PipelineResult:
        artifacts: dict[str, Artifact] = {}
        stale: dict[str, str] = {}
        context = self.context
        for name, cls in zip(context.passes, self.classes, strict=True):
            result = cls(context.options.get(name)).run(graph, context)
            if result.modified and not cls.rewrites:
                raise ConfigError(f"pass {name} changed the graph but declares rewrites = False")
            if result.modified:
                for fact in [f for f in artifacts if f not in cls.keeps]:
                    del artifacts[fact]
                    stale[fact] = name
            for fact, artifact in result.artifacts.items():
                artifacts[fact] = artifact
                stale.pop(fact, None)
            graph = result.graph
            results = (*context.results, result)
            context = dataclasses.replace(context, results=results, artifacts=dict(artifacts))
        return PipelineResult(graph, context.results, context.passes, artifacts, stale)


def check_order(names: Sequence[str], classes: Sequence[type[ModelPass]]) -> None:
    """Refuse, before anything runs, a pipeline where a pass needs a fact that no earlier
    stage provides or that a rewrite before it may have invalidated."""
    facts = IMPORTED
    for name, cls in zip(names, classes, strict=True):
        missing = sorted(cls.needs - facts)
        if missing:
            raise ConfigError(
                f"pass {name} needs the {missing[0]}, which no pass before it provides "
                "(or a rewrite before it invalidates): reorder --prepass"
            )
        facts = (facts & cls.keeps if cls.rewrites else facts) | cls.provides


OptionSource = tuple[str, Mapping[str, Any] | None]
"""Where a mapping of pass options came from (for messages), and the mapping:
``{pass: {option: value}}``, optionally with ``device`` (:data:`DEVICE`)."""


def make_context(
    registry: PassRegistry,
    passes: Sequence[str],
    *,
    file: OptionSource | None = None,
    given: OptionSource | None = None,
    accelerator: Accelerator | None = None,
    plan_effort: float | None = None,
) -> PassContext:
    """A checked :class:`PassContext` for the named passes, their options from the
    accelerator ``file`` (its ``passes:`` section) and, winning over it, the ones ``given``
    by the API or the command line.

    Every name and value is checked here, before any model is read: an unknown pass, an
    unknown option, a value of the wrong type or out of range is a one-line
    :class:`ConfigError` naming where it came from. ``given`` options for a pass that does
    not run are refused (a typo would otherwise do nothing); a file may hold options for
    passes a run does not use, and they are checked all the same.
    """
    names = tuple(registry.check(name) for name in passes)
    device: tuple[str, str] | None = None  # where it came from, the name
    values: dict[str, dict[str, tuple[str, Any]]] = {}
    for source, runs_only in ((file, False), (given, True)):
        if source is None:
            continue
        where, mapping = source
        for key, value in (mapping or {}).items():
            if key == DEVICE:
                if not isinstance(value, str):
                    raise ConfigError(f"{where} {DEVICE}: expected a string, got {value!r}")
                device = (where, value)
                continue
            if key not in registry:
                raise ConfigError(f"{where} {key}: unknown pass (choose from "
                                  f"{', '.join(registry.names())}, or {DEVICE})")  # fmt: skip
            if runs_only and key not in names:
                raise ConfigError(f"{where} {key}.*: pass {key} does not run (add it with "
                                  f"--prepass {key}, or prepass=[...])")  # fmt: skip
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where} {key}: its options must be a mapping")
            for option, raw in value.items():
                values.setdefault(key, {})[str(option)] = (where, raw)
    options: dict[str, Any] = {}
    for name in dict.fromkeys((*names, *values)):
        cls = registry.get(name)
        options[name] = build_options(name, cls.Options, values.get(name, {}), device)
    return PassContext(names, options, device[1] if device else None, accelerator, plan_effort)


def build_options(
    name: str,
    options: type,
    values: Mapping[str, tuple[str, Any]],
    device: tuple[str, str] | None = None,
) -> Any:
    """``options`` (a dataclass) from ``values`` (option -> (where, value)), each value
    converted to its field's type; the context's ``device`` (where, name) fills a ``device``
    option not given. Errors name the pass, the option and where the value came from."""
    hints = typing.get_type_hints(options)
    fields = {f.name for f in dataclasses.fields(options)}
    if device is not None and DEVICE in fields:
        values = {DEVICE: device, **values}
    converted: dict[str, Any] = {}
    for option, (where, raw) in values.items():
        if option not in fields:
            known = ", ".join(sorted(fields)) or "none"
            raise ConfigError(f"{where} {name}.{option}: no such option (known: {known})")
        try:
            converted[option] = convert(hints[option], raw)
        except ValueError as exc:
            raise ConfigError(f"{where} {name}.{option}: {exc}") from None
    made = options(**converted)
    check = getattr(made, "check", None)
    if check is not None:
        try:
            check()
        except OptionError as exc:
            where = values.get(exc.option, ("pass options",))[0]
            raise ConfigError(f"{where} {name}.{exc.option}: {exc.why}") from None
    return made


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NONE = ("none", "null")


def convert(kind: Any, value: Any) -> Any:
    """``value`` (a command-line string, or a YAML/TOML/Python value) as type ``kind``:
    bool, int, float, str, a ``Literal`` of strings, ``X | None`` and sequences of
    strings (a comma list on the command line); a ValueError saying what was expected."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in _NONE):
            return None
        if len(inner) != 1:
            raise ValueError(f"unsupported option type {kind}")
        return convert(inner[0], value)
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{value!r} is not one of {', '.join(map(str, args))}")
        return value
    if origin in (Sequence, list, tuple, typing.Sequence):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"expected a list of names, got {value!r}")
        return tuple(i.strip() for i in items if i.strip())
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"expected true or false, got {value!r}")
    if kind in (int, float):
        what = "an integer" if kind is int else "a number"
        if isinstance(value, bool) or (kind is int and isinstance(value, float)):
            raise ValueError(f"expected {what}, got {value!r}")
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"expected {what}, got {value!r}") from None
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"expected a string, got {value!r}")
        return value
    raise ValueError(f"unsupported option type {kind}")


def parse_option_items(items: Sequence[str], where: str = "--pass-option") -> dict[str, Any]:
    """Command-line ``PASS.OPTION=VALUE`` items (and ``device=NAME``) -> the nested mapping
    :func:`make_context` reads; values stay strings, converted there."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, option = key.strip().partition(".")
        if sep and key.strip() == DEVICE:
            out[DEVICE] = value.strip()
            continue
        if not (sep and dot and name and option):
            raise ConfigError(f"{where} {item!r} is not PASS.OPTION=VALUE (or {DEVICE}=NAME)")
        out.setdefault(name, {})[option] = value.strip()
    return out
