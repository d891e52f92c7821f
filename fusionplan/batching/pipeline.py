"""One batching run end to end: workload -> graph -> policy -> layout -> timed execution.

What ``fusionplan batch`` and ``fp.batch`` call, and what the batching bench repeats. The FSM
policy's table is trained once per (workload, encoding, episodes, seed) on mini-batches drawn
from seeds the evaluation never uses, and cached as JSON, so a rerun trains nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fusionplan.batching.bounds import lower_bound
from fusionplan.batching.cells import build_cells
from fusionplan.batching.executor import (
    compile_program,
    node_outputs,
    run_program,
    run_unbatched,
)
from fusionplan.batching.fsm import (
    DEFAULT_ENCODING,
    FSMPolicy,
    QLearningConfig,
    QTable,
    train_fsm,
)
from fusionplan.batching.graph import check_schedule
from fusionplan.batching.layout import LAYOUTS, copy_stats
from fusionplan.batching.policies import POLICIES, BatchingPolicy
from fusionplan.batching.workloads import Workload, get_workload
from fusionplan.data.zoo import cache_root
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.timing import time_interleaved

TRAIN_BATCH = 32  # inputs per training mini-batch
TRAIN_GRAPHS = 4  # mini-batches the FSM trains on
TRAIN_SEED_BASE = 1_000_003  # training inputs come from seeds far from evaluation seeds


@dataclass(frozen=True)
class BatchingRequest:
    """What to run; ``check`` rejects bad settings before any work."""

    workload: str
    policy: str = "fsm"
    layout: str = "pq"
    batch_size: int = 64
    hidden: int = 256
    seed: int = 0
    train_episodes: int = 400
    encoding: str = DEFAULT_ENCODING
    table: str | None = None  # a saved FSM table to use instead of the cached/trained one
    repeats: int = 5
    verify: bool = True

    def check(self) -> BatchingRequest:
        get_workload(self.workload)
        POLICIES.get(self.policy)
        if self.layout not in LAYOUTS:
            raise ConfigError(f"unknown layout {self.layout!r}; choose from naive, pq")
        if self.batch_size < 1 or self.hidden < 1 or self.repeats < 1:
            raise ConfigError("batch size, hidden size and repeats must be >= 1")
        if self.train_episodes < 1:
            raise ConfigError("--train-episodes must be >= 1")
        QLearningConfig(encoding=self.encoding, episodes=self.train_episodes)  # checks encoding
        return self


@dataclass(frozen=True)
class BatchingResult:
    """Everything one run measured; ``to_json`` is what ``--json`` prints."""

    request: BatchingRequest
    nodes: int
    batches: int
    lower_bound: int
    kernels: int  # cell calls + gathers per run
    slots: int
    views: int
    bytes_copied: int
    seconds: float  # median execution time of one run
    schedule_ms: float  # policy + layout + compile: the per-graph overhead
    train_seconds: float | None  # None when the FSM table came from a file or the cache
    max_abs_error: float | None  # batched vs unbatched outputs; None when not verified

    @property
    def throughput(self) -> float:
        """Inputs per second."""
        return self.request.batch_size / self.seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput}

    def summary(self) -> str:
        r = self.request
        lines = [
            f"{r.workload}: {r.batch_size} inputs, hidden {r.hidden}, policy {r.policy}, "
            f"layout {r.layout}",
            f"  nodes {self.nodes}, batches {self.batches} (lower bound {self.lower_bound}), "
            f"kernels {self.kernels}",
            f"  operands read in place {self.views}/{self.slots}, "
            f"copied {self.bytes_copied / 1e6:.3f} MB",
            f"  {self.seconds * 1e3:.2f} ms per run, {self.throughput:,.0f} inputs/s, "
            f"scheduling {self.schedule_ms:.1f} ms",
        ]
        if self.train_seconds is not None:
            lines.append(f"  FSM trained in {self.train_seconds:.2f} s")
        if self.max_abs_error is not None:
            lines.append(f"  max |batched - unbatched| = {self.max_abs_error:.2e}")
        return "\n".join(lines)


def fsm_table_path(workload: str, encoding: str, episodes: int, seed: int) -> Path:
    return cache_root() / "batching" / f"fsm-{workload}-{encoding}-e{episodes}-s{seed}.json"


def fsm_table(
    workload: Workload, encoding: str, episodes: int, seed: int
) -> tuple[QTable, float | None]:
    """The cached FSM table for this workload, trained (and cached) if there is none.

    Returns the table and the training seconds (None when it came from the cache).
    """
    path = fsm_table_path(workload.name, encoding, episodes, seed)
    if path.exists():
        return QTable.load(path), None
    graphs = [
        workload.graph(TRAIN_BATCH, TRAIN_SEED_BASE + seed * 97 + i) for i in range(TRAIN_GRAPHS)
    ]
    config = QLearningConfig(encoding=encoding, episodes=episodes, seed=seed)
    table, report = train_fsm(graphs, config, workload.name)
    table.save(path)
    return table, report.seconds


def make_policy(
    request: BatchingRequest, workload: Workload
) -> tuple[BatchingPolicy, float | None]:
    if request.policy != "fsm":
        return POLICIES.get(request.policy)(), None
    if request.table:
        return FSMPolicy(QTable.load(Path(request.table))), None
    table, seconds = fsm_table(workload, request.encoding, request.train_episodes, request.seed)
    return FSMPolicy(table), seconds


@dataclass(frozen=True)
class PreparedBatching:
    """A scheduled, laid-out, compiled and verified run, ready to be timed."""

    result: BatchingResult  # everything but ``seconds`` (NaN until timed)
    run: Callable[[], object]  # one batched execution of the mini-batch

    def timed(self, seconds: float) -> BatchingResult:
        return replace(self.result, seconds=seconds)


def prepare_batching(request: BatchingRequest) -> PreparedBatching:
    """Schedule, lay out, compile and (if asked) verify one mini-batch; time nothing."""
    request.check()
    workload = get_workload(request.workload)
    policy, train_seconds = make_policy(request, workload)
    graph = workload.graph(request.batch_size, request.seed)
    widths = {t: spec.output_width(request.hidden) for t, spec in workload.cell_types().items()}
    began = time.perf_counter()
    batches = policy.schedule(graph)
    layout = LAYOUTS[request.layout](graph, batches, widths)
    program = compile_program(graph, batches, layout)
    schedule_ms = (time.perf_counter() - began) * 1e3
    check_schedule(graph, batches)
    cells = build_cells(workload, request.hidden, request.seed)
    error = None
    if request.verify:
        batched = node_outputs(program, run_program(program, cells))
        reference = run_unbatched(graph, cells)
        error = max(float((a - b).abs().max()) for a, b in zip(batched, reference, strict=True))
    copies = copy_stats(graph, batches, layout)
    result = BatchingResult(
        request=request,
        nodes=len(graph),
        batches=len(batches),
        lower_bound=lower_bound(graph),
        kernels=program.kernels,
        slots=copies.slots,
        views=copies.views,
        bytes_copied=copies.bytes_copied,
        seconds=math.nan,
        schedule_ms=schedule_ms,
        train_seconds=train_seconds,
        max_abs_error=error,
    )
    return PreparedBatching(result, lambda: run_program(program, cells))


def run_batching(request: BatchingRequest) -> BatchingResult:
    """Schedule, lay out, execute and time one mini-batch of ``request.workload``."""
    prepared = prepare_batching(request)
    return prepared.timed(time_interleaved([prepared.run], request.repeats)[0])


def batch(
    workload: str,
    policy: str = "fsm",
    *,
    layout: str = "pq",
    batch_size: int = 64,
    hidden: int = 256,
    **options: Any,
) -> BatchingResult:
    """``fp.batch``: batch one mini-batch of a dynamic workload and run it in PyTorch.

    Lives here, not in ``fusionplan.app.api``, so that ``fp.plan`` never imports torch.
    """
    return run_batching(
        BatchingRequest(workload, policy, layout, batch_size, hidden, **options).check()
    )
