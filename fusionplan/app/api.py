"""The Python API: ``fp.plan(...)`` and ``fp.sweep(...)``.

>>> import fusionplan as fp
>>> p = fp.plan("resnet18", buffer="128KB", scheme="lbdf", search="ls", budget=500)
>>> p.validate().metrics.dram_mb  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accel_model import Accelerator, make_cost_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import OpGraph
from fusionplan.planning.plan import Plan

ModelSpec = str | os.PathLike | OpGraph


@dataclass(frozen=True)
class PlanRequest:
    """Everything that determines a planning run besides the model (one sweep point)."""

    buffer: str | int = "256KB"
    scheme: str = "lbdf"
    search: str = "ls"
    splitter: str = "tree"
    budget: int = 2000
    seed: int = 0
    bytes_per_element: int = 1
    search_options: Mapping[str, Any] = field(default_factory=dict)

    def accelerator(self) -> Accelerator:
        return Accelerator.of(self.buffer, self.scheme, self.bytes_per_element)

    def check(self) -> None:
        """Reject bad settings before a possibly slow model load or export."""
        from search import search_names

        self.accelerator()
        if self.budget < 1:
            raise ConfigError(f"budget must be at least 1 plan, got {self.budget}")
        if self.search not in search_names():
            raise ConfigError(
                f"unknown search '{self.search}' (choose from {', '.join(search_names())})"
            )
        if self.splitter not in splitter_names():
            raise ConfigError(
                f"unknown splitter '{self.splitter}' (choose from {', '.join(splitter_names())})"
            )


def load(
    model: ModelSpec,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
) -> OpGraph:
    """An op graph from an ONNX path, a zoo name (``"resnet50"``) or an existing graph."""
    if isinstance(model, OpGraph):
        return model
    from data.zoo import resolve_model

    return resolve_model(model, input_shapes=input_shapes, strict_ops=strict_ops)


def plan_graph(
    graph: OpGraph,
    request: PlanRequest,
    progress: Callable[[int], None] | None = None,
) -> Plan:
    """Run one search on ``graph`` and return its best plan, validated."""
    from search import FusionProblem, make_search

    request.check()
    accel = request.accelerator()
    cost_model = make_cost_model(graph, accel)
    splitter = make_splitter(request.splitter, cost_model, request.seed)
    algorithm = make_search(request.search, **dict(request.search_options))
    problem = FusionProblem(cost_model, splitter, request.budget)
    result = algorithm.run(problem, request.seed, progress)
    info = {"model": graph.name, "splitter": request.splitter, **result.info()}
    ranker_stats = getattr(getattr(splitter, "ranker", None), "stats", None)
    if ranker_stats is not None:  # explainer rankers: how many groups, how long
        info["explained_groups"] = ranker_stats.explained
        info["explain_seconds"] = round(ranker_stats.explain_seconds, 3)
    return problem.to_plan(result.best, info).validate()


def splitter_names() -> list[str]:
    """Every splitter name, explainer-guided ones included when that package is present."""
    from fusionplan.planning.split import SPLITTERS

    _register_explainer_splitters()
    return SPLITTERS.names()


def make_splitter(name: str, cost_model, seed: int):
    """A registered splitter by name; explainer splitters register when first asked for."""
    from fusionplan.planning.split import SPLITTERS

    if name not in SPLITTERS.names():
        _register_explainer_splitters()
    return SPLITTERS.make(name, cost_model, seed)


def _register_explainer_splitters() -> None:
    """Explainer-guided splitters live in the explainers package, a layer above split."""
    with contextlib.suppress(ImportError):
        import explainers.splitters  # noqa: F401  (registers gnne / pg / rg)


def plan(
    model: ModelSpec,
    buffer: str | int = "256KB",
    scheme: str = "lbdf",
    *,
    search: str = "ls",
    splitter: str = "tree",
    budget: int = 2000,
    seed: int = 0,
    bytes_per_element: int = 1,
    search_options: Mapping[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Plan:
    """Plan fusion for ``model`` (ONNX path, zoo name or OpGraph) on one accelerator."""
    request = PlanRequest(
        buffer,
        scheme,
        search,
        splitter,
        budget,
        seed,
        bytes_per_element,
        dict(search_options or {}),
    )
    request.check()  # reject bad settings before a possibly slow model export
    return plan_graph(load(model), request, progress)


@dataclass(frozen=True)
class SweepPoint:
    buffer_bytes: int
    plan: Plan


def sweep(
    model: ModelSpec,
    buffers: Sequence[str | int],
    scheme: str = "lbdf",
    *,
    progress: Callable[[int], None] | None = None,
    **options: Any,
) -> list[SweepPoint]:
    """Plan ``model`` at each buffer size (same search settings); DRAM-vs-buffer curve."""
    if not buffers:
        raise ConfigError("sweep needs at least one buffer size")
    requests = [PlanRequest(buffer=b, scheme=scheme, **options) for b in buffers]
    for r in requests:
        r.check()
    graph = load(model)
    points = []
    for r in requests:
        points.append(SweepPoint(r.accelerator().buffer_bytes, plan_graph(graph, r, progress)))
    return sorted(points, key=lambda p: p.buffer_bytes)
