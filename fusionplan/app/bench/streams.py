"""The stream-scheduling bench: every zoo model plus branchy graphs (GoogLeNet,
Inception-v3, RandWire, NASNet-A) (docs/design.md, "Stream scheduling").

Per model: streams, events and the reduction's cross-stream edges, the maximum antichain,
scheduling time, the makespan simulated on the H100 roofline against its bounds and one
stream, AutoGraph's mixed cost, and the measured latency on this machine: on the CPU a
thread per stream (at most one per core) against the same op sequence on one thread, on
every core, and onnxruntime; on a GPU also eager vs CUDA Graph vs multi-stream CUDA Graph.
Cells are appended to ``runs.jsonl`` as they finish, so a rerun resumes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import onnx

from fusionplan.app.bench.substitution import model_file
from fusionplan.data.synthetic import SYNTHETIC
from fusionplan.data.zoo import model_source, zoo_names
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import write_text_atomic
from fusionplan.passes.streams.assign import assign_streams
from fusionplan.passes.streams.measure import feeds_for, measure_cpu, measure_cuda
from fusionplan.passes.streams.pipeline import StreamsRequest, schedule_streams

BRANCHY = ("googlenet", "inception_v3", "randwire", "nasnet", "randwire_large", "nasnet_large")
MODELS = (*zoo_names(), *BRANCHY)


@dataclass(frozen=True)
class StreamsCell:
    model: str
    ops: int
    width: int
    streams: int
    events: int
    reduced_cross_edges: int
    schedule_ms: float
    simulated: dict[str, Any]  # Simulation.to_json() on the H100 roofline, unlimited streams
    cpu: dict[str, Any] | None  # Measurement.to_json(), a stream per core at most
    gpu: dict[str, Any] | None  # Measurement.to_json() where a GPU was present


def run_bench(
    models: Sequence[str],
    out: Path,
    *,
    repeats: int = 10,
    execute: bool = True,
    progress: Callable[[str], None] | None = None,
) -> list[StreamsCell]:
    """Run every missing cell into ``out/runs.jsonl``; all cells, in file order."""
    for name in models:
        if name not in SYNTHETIC:
            model_source(name)  # an unknown model fails before any work
    import torch  # heavy: 2 s; the GPU columns need to know whether there is one

    cuda = torch.cuda.is_available()
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs.jsonl"
    done = {c.model for c in read_cells(runs)}
    cores = os.cpu_count() or 1
    for name in models:
        if name in done:
            continue
        model = onnx.load(os.fspath(model_file(name, out)))
        result = schedule_streams(model, StreamsRequest(), name=name)
        cpu = gpu = None
        if execute:
            feeds = feeds_for(result.graph)
            limited = assign_streams(result.dag, result.latency, cores)
            cpu = measure_cpu(result.graph, limited, feeds, repeats=repeats).to_json()
            if cuda:
                gpu = measure_cuda(result.graph, result.assignment, feeds).to_json()
        r = result.report
        cell = StreamsCell(
            model=name,
            ops=r.ops,
            width=r.width,
            streams=r.streams,
            events=r.events,
            reduced_cross_edges=r.reduced_cross_edges,
            schedule_ms=r.schedule_seconds * 1e3,
            simulated=dict(r.simulation),
            cpu=cpu,
            gpu=gpu,
        )
        with runs.open("a") as f:
            f.write(json.dumps(asdict(cell)) + "\n")
        if progress is not None:
            progress(name)
    return read_cells(runs)


def read_cells(path: Path) -> list[StreamsCell]:
    if not path.exists():
        return []
    try:
        lines = path.read_text().splitlines()
        return [StreamsCell(**json.loads(line)) for line in lines if line.strip()]
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{path} is not a streams bench log ({err}); use another --out") from err


def markdown(cells: Sequence[StreamsCell]) -> str:
    """Schedule and simulation table, then the measured table(s)."""
    sim = (
        "| model | ops | width | streams | events | reduction cross edges | schedule ms "
        "| one stream ms | makespan ms | critical path ms | work/streams ms | above bound "
        "| speedup | mixed ms |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    for c in cells:
        s = c.simulated
        sim += (
            f"| {c.model} | {c.ops} | {c.width} | {c.streams} | {c.events} "
            f"| {c.reduced_cross_edges} | {c.schedule_ms:.1f} | {s['sequential_s'] * 1e3:.3f} "
            f"| {s['makespan_s'] * 1e3:.3f} | {s['critical_path_s'] * 1e3:.3f} "
            f"| {s['work_s'] / c.streams * 1e3:.3f} | {s['gap'] * 100:.1f} % "
            f"| {s['speedup']:.2f}x | {s['mixed_s'] * 1e3:.3f} |\n"
        )
    text = sim
    measured = [c for c in cells if c.cpu is not None]
    if measured:
        text += (
            "\n| model | streams | sequential 1 thread ms | sequential all cores ms "
            "| streams ms | onnxruntime ms | streams vs sequential | rel. err |\n"
            "|---|---|---|---|---|---|---|---|\n"
        )
        for c in measured:
            assert c.cpu is not None
            t = c.cpu["times_ms"]
            text += (
                f"| {c.model} | {c.cpu['streams']} | {t['sequential']:.2f} "
                f"| {t['sequential_all_cores']:.2f} | {t['streams']:.2f} "
                f"| {t['onnxruntime']:.2f} | {c.cpu['speedup']:.2f}x "
                f"| {c.cpu['errors']['streams']:.0e} |\n"
            )
    on_gpu = [c for c in cells if c.gpu is not None]
    if on_gpu:
        text += (
            f"\n{on_gpu[0].gpu['device']}:\n\n"  # type: ignore[index]
            "| model | streams | eager ms | CUDA Graph ms | streams eager ms "
            "| streams CUDA Graph ms | graph vs eager | streams graph vs graph |\n"
            "|---|---|---|---|---|---|---|---|\n"
        )
        for c in on_gpu:
            assert c.gpu is not None
            t = c.gpu["times_ms"]
            text += (
                f"| {c.model} | {c.gpu['streams']} | {t['eager']:.3f} | {t['cuda_graph']:.3f} "
                f"| {t['streams_eager']:.3f} | {t['streams_cuda_graph']:.3f} "
                f"| {t['eager'] / t['cuda_graph']:.2f}x | {c.gpu['speedup']:.2f}x |\n"
            )
    return text


def write_markdown(cells: Sequence[StreamsCell], path: Path) -> None:
    write_text_atomic(path, markdown(cells))
