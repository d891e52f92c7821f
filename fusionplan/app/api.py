"""The Python API: ``fp.plan(...)``, ``fp.sweep(...)`` and ``fp.load(...)``.

>>> import fusionplan as fp
>>> p = fp.plan("resnet18", buffer="128KB", scheme="lbdf")  # auto: exact, then LNS
>>> p.validate().metrics.dram_mb, p.metrics.gap  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx

from accel_model import Accelerator, parse_size
from accel_model.description import load_accelerator, load_hardware, read_description
from accel_model.hardware import Hardware
from accel_model.latency import LATENCY_MODELS
from accel_model.oracle import Oracle
from fusionplan.app import dram_cost  # noqa: F401 (registers the accelerator costs)
from fusionplan.app.pipeline import PlanRequest, default_search, plan_graph, sweep_graph
from fusionplan.data.zoo import model_source, resolve_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.lowering import lower
from fusionplan.ir.onnx_import import check_batch_one
from fusionplan.ir.onnx_model import (
    from_onnx,
    load_onnx,
    standard_graph,
    to_onnx,
    with_input_shapes,
)
from fusionplan.passes import PASSES
from fusionplan.passes.manager import (
    OptionSource,
    PassContext,
    PipelineResult,
    Sequential,
    make_context,
)
from fusionplan.passes.streams.pipeline import StreamsRequest, StreamsResult
from fusionplan.passes.streams.pipeline import schedule_streams as run_streams
from fusionplan.passes.streams.simulate import EVENT_S
from fusionplan.passes.substitution.pipeline import (
    ACCELERATOR_COSTS,
    SubstitutionRequest,
    SubstitutionResult,
    Target,
)
from fusionplan.passes.substitution.pipeline import substitute as run_substitution
from fusionplan.passes.substitution.search import REWRITE_SEARCHES
from fusionplan.passes.substitution.search.ocggs import DEFAULT_DEPTH
from fusionplan.planning.plan import Plan
from fusionplan.planning.result import PassRecord

ModelSpec = str | os.PathLike | OpGraph


def load(
    model: ModelSpec,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
) -> OpGraph:
    """An op graph from an ONNX path, a zoo name (``"resnet50"``) or an existing graph."""
    if isinstance(model, OpGraph):
        return model
    return resolve_model(model, input_shapes=input_shapes, strict_ops=strict_ops)


def plan(
    model: ModelSpec,
    buffer: str | int | None = None,
    scheme: str = "lbdf",
    *,
    accelerator: Accelerator | str | os.PathLike | None = None,
    search: str | None = None,
    splitter: str = "tree",
    budget: int = 2000,
    seed: int = 0,
    bytes_per_element: int = 1,
    profile: str = "fusionplan",
    single_layer: str | None = None,
    pe_unroll: int | None = None,
    search_options: Mapping[str, Any] | None = None,
    effort: float = 1.0,
    bound_effort: float = 1.0,
    time_limit_s: float | None = None,
    prepass: Sequence[str] = (),
    pass_options: Mapping[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
    objective: str = "dram",
    hardware: Hardware | None = None,
    oracle: Oracle | Callable[[dict[str, Any]], Any] | None = None,
    query_budget: int | None = None,
) -> Plan:
    """Plan fusion for ``model`` (ONNX path, zoo name or OpGraph) on one accelerator,
    after the named pre-passes (``prepass=["substitute", "streams"]``) ran on its graph,
    with ``pass_options`` (``{"substitute": {"search": "ocggs-dpp"}, "device": "a100"}``,
    over an accelerator file's ``passes:``); ``plan.prepasses`` records what they did.

    ``objective`` is what the search minimises (``dram``, ``energy``, ``latency``, ``edp``);
    energy and latency run on ``hardware`` (a description file gives it; None: the file's,
    else accel_model.hardware's defaults).

    The accelerator is ``buffer`` (default 256KB), ``scheme`` and the cost settings, or an
    :class:`Accelerator` / a description file (``accelerator="acc.yaml"``), whose buffer an
    explicit ``buffer`` replaces. The plan's ``metrics`` carry a proven lower bound on the
    optimum and the gap to it: the default ``auto`` search proves the optimum when it can
    within its ``effort`` (work, not seconds: the same plan on any machine); ``time_limit_s``
    is only a wall-clock safety cap.

    ``oracle`` prices groups instead of the scheme's model: an :class:`~accel_model.oracle.
    Oracle` or a function ``query -> {"fits", "dram_bytes"[, "buffer_bytes"]}``
    (docs/design.md, "Oracles"); the search then defaults to ``ls`` (auto needs the built-in
    model's bounds). ``query_budget`` stops a heuristic search after that many oracle
    queries; ``plan.info["oracle_queries"]`` reports them for every search."""
    request = PlanRequest(
        buffer="256KB" if buffer is None else buffer,
        scheme=scheme,
        search=default_search(search, oracle),
        splitter=splitter,
        budget=budget,
        seed=seed,
        bytes_per_element=bytes_per_element,
        profile=profile,
        single_layer=single_layer,
        pe_unroll=pe_unroll,
        search_options=dict(search_options or {}),
        effort=effort,
        bound_effort=bound_effort,
        time_limit_s=time_limit_s,
        objective=objective,
        hardware=hardware,
        oracle=oracle,
        query_budget=query_budget,
    )
    file: OptionSource | None = None
    if accelerator is not None:
        if not isinstance(accelerator, Accelerator):
            file = accelerator_passes(accelerator)
            if hardware is None:
                request = replace(request, hardware=load_hardware(accelerator))
            accelerator = load_accelerator(accelerator, buffer)
        elif buffer is not None:
            accelerator = replace(accelerator, buffer_bytes=parse_size(buffer))
        request = request.on(accelerator)
    request.check()  # reject bad settings before a possibly slow model export
    context = make_context(
        PASSES, prepass, file=file, given=("pass_options", pass_options),
        accelerator=request.accelerator(), plan_effort=request.effort,
    )  # fmt: skip
    records: tuple[PassRecord, ...] = ()
    if prepass:
        if isinstance(model, OpGraph):
            raise ConfigError("pre-passes run on the model IR: pass a model path or zoo name")
        prepared = run_prepasses(model, context)
        graph, records = prepared.graph, prepared.records
    else:
        graph = load(model)
    result = plan_graph(graph, request, progress)
    result.prepasses = records
    return result


def substitute(
    model: str | os.PathLike | onnx.ModelProto,
    *,
    search: str | None = None,
    cost: str = "sum",
    device: str = "h100",
    budget: int | None = None,
    depth: int = DEFAULT_DEPTH,
    rules: Sequence[str] | None = None,
    measure: str | None = None,
    guard: bool = False,
    seed: int = 0,
    target: Target = "onnx",
    progress: Callable[[int], None] | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    buffer: str | int | None = None,
    scheme: str = "lbdf",
    accelerator: Accelerator | str | os.PathLike | None = None,
    plan_effort: float | None = None,
) -> SubstitutionResult:
    """Rewrite ``model`` (ONNX path, zoo name or ModelProto) into a cheaper equivalent graph
    under an op-latency model; ``result.model`` is the ONNX, ``result.report`` what changed.
    ``target="onnxruntime"`` lets the result use onnxruntime's contrib ops (``FusedConv``);
    the default writes standard ONNX ops only.
    ``input_shapes`` makes symbolic graph inputs static (``{"x": (1, 3, 224, 224)}``).

    ``cost="dram"`` prices each candidate by the DRAM of the fusion planner's plan on the
    accelerator (``buffer``, ``scheme``, or a description file / :class:`Accelerator` as in
    :func:`plan`) at ``plan_effort``, and keeps the original unless a rewrite's plan takes
    less DRAM; ``"dram-exact"`` plans every candidate with the exact search (the joint mode).
    Search and budget default to metaflow and 5000 graphs, or taso and 40 plans for a DRAM
    cost (:meth:`SubstitutionRequest.resolved`); ``plan_effort`` to 1."""
    planned = cost in ACCELERATOR_COSTS.names()
    if search is not None:
        REWRITE_SEARCHES.check(search)
    LATENCY_MODELS.check(device)
    on = None
    if planned:
        on = PlanRequest(buffer="256KB" if buffer is None else buffer, scheme=scheme)
        on = on.check().accelerator()
        if accelerator is not None:
            on = _accelerator(accelerator, buffer)
    request = SubstitutionRequest(
        search=search,
        cost=cost,
        device=device,
        budget=budget,
        depth=depth,
        rules=list(rules) if rules is not None else None,
        measure=measure,
        guard=guard,
        seed=seed,
        target=target,
        accelerator=on,
        plan_effort=plan_effort,
    )
    return run_substitution(model, request, progress=progress, input_shapes=input_shapes)


def _accelerator(
    accelerator: Accelerator | str | os.PathLike, buffer: str | int | None
) -> Accelerator:
    """An accelerator or a description file's, with ``buffer`` (if given) as its buffer."""
    if not isinstance(accelerator, Accelerator):
        return load_accelerator(accelerator, buffer)
    return accelerator if buffer is None else replace(accelerator, buffer_bytes=parse_size(buffer))


def schedule_streams(
    model: str | os.PathLike | onnx.ModelProto,
    *,
    device: str = "h100",
    max_streams: int | None = None,
    execute: str | None = None,
    launch_s: float = 0.0,
    event_s: float = EVENT_S,
    repeats: int = 20,
    seed: int = 0,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> StreamsResult:
    """Assign ``model``'s ops (ONNX path, zoo name or ModelProto) to parallel streams as
    Nimble does; ``result.report`` has streams, events and the makespan simulated on
    ``device``'s op latencies, and with ``execute="cpu"|"cuda"`` the measured latency.
    ``input_shapes`` makes symbolic graph inputs static (``{"x": (1, 3, 224, 224)}``)."""
    LATENCY_MODELS.check(device)
    request = StreamsRequest(
        device=device,
        max_streams=max_streams,
        execute=execute,  # type: ignore[arg-type]  # checked by schedule_streams
        launch_s=launch_s,
        event_s=event_s,
        repeats=repeats,
        seed=seed,
    )
    return run_streams(model, request, input_shapes=input_shapes)


def accelerator_passes(path: str | os.PathLike) -> OptionSource:
    """The pre-pass options of an accelerator file (its ``passes:`` section), labelled."""
    return f"accelerator file {os.fspath(path)} passes:", read_description(path).get("passes")


@dataclass(frozen=True)
class Prepared:
    """A model after its pre-passes: the planner's graph, a record of each pass for the
    plan, and the rewritten model as ONNX where a pass rewrote it (None: the model's own
    file is the planned graph's)."""

    graph: OpGraph
    records: tuple[PassRecord, ...]
    rewritten: onnx.ModelProto | None


def run_prepasses(
    model: str | os.PathLike,
    context: PassContext,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
) -> Prepared:
    """Import ``model`` (an ONNX path or a zoo name) into the model IR once, run the
    context's passes on it in order (:class:`Sequential`) and lower the result to the
    planner's graph.

    ONNX is the boundary only: read here once; the passes' graph is lowered as it is (with
    onnxruntime's fused ops as the standard ops they fuse), and written back to ONNX only
    where a pass rewrote it, for ``--onnx-out``.
    """
    runner = Sequential(PASSES, context)  # names and order checked before the import
    source = model_source(model)
    if input_shapes:
        check_batch_one(input_shapes)
    original = load_onnx(source)
    graph = from_onnx(with_input_shapes(original, input_shapes), command="plan --prepass")
    graph.name = name = Path(os.fspath(model)).stem
    result = runner.run(graph)
    planned = standard_graph(result.graph)
    rewritten = to_onnx(planned) if result.modified else None  # for --onnx-out only
    return Prepared(
        lower(planned, name=name, strict_ops=strict_ops), pass_records(result), rewritten
    )


def pass_records(result: PipelineResult) -> tuple[PassRecord, ...]:
    """Each pass's result as the plan keeps it: JSON report, the artifacts still true of
    the planned graph, and which later rewrite made any other one stale."""
    records = []
    for name, r in zip(result.names, result.results, strict=True):
        live = {f: a.to_json() for f, a in r.artifacts.items() if result.artifacts.get(f) is a}
        stale = {f: result.stale[f] for f in r.artifacts if f not in live and f in result.stale}
        records.append(PassRecord(name, r.modified, r.headline, r.report.to_json(), live, stale))
    return tuple(records)


@dataclass(frozen=True)
class SweepPoint:
    buffer_bytes: int
    plan: Plan


def sweep(
    model: ModelSpec,
    buffers: Sequence[str | int],
    scheme: str = "lbdf",
    *,
    accelerator: Accelerator | str | os.PathLike | None = None,
    progress: Callable[[int], None] | None = None,
    **options: Any,
) -> list[SweepPoint]:
    """Plan ``model`` at each buffer size (same search settings); DRAM-vs-buffer curve.

    ``accelerator`` (an :class:`Accelerator` or a description file) gives the scheme and
    cost settings; ``buffers`` replace its buffer. Points come back smallest buffer first;
    each search is warm-started from the previous point's plan, so with the default
    ``tiled`` single-layer cost DRAM never rises with the buffer (:func:`sweep_graph`)."""
    if not buffers:
        raise ConfigError("sweep needs at least one buffer size")
    requests = [PlanRequest(buffer=b, scheme=scheme, **options) for b in buffers]
    if accelerator is not None:
        if not isinstance(accelerator, Accelerator):
            accelerator = load_accelerator(accelerator, buffers[0])
        requests = [
            r.on(replace(accelerator, buffer_bytes=parse_size(b)))
            for r, b in zip(requests, buffers, strict=True)
        ]
    requests = [r.check() for r in requests]
    plans = sweep_graph(load(model), requests, progress)
    return [SweepPoint(p.cost_model.accel.buffer_bytes, p) for p in plans]
