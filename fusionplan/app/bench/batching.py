"""The dynamic-batching bench (ED-Batch's CPU experiment): batches and throughput of every
workload across batch sizes and hidden sizes, FSM + PQ layout against agenda and depth with
allocation-order layout (docs/design.md, "Batching").

Per cell it prepares each (policy, layout) through ``prepare_batching`` and times the four
round-robin (``time_interleaved``: one run of each per round, medians over the rounds), so a
slow spell of the shared machine hits every configuration alike; it reports batches, lower
bound, copied bytes and inputs/s. Each (workload, batch size, configuration) is checked
against node-by-node execution once, at the first hidden size: schedule and layout do not
depend on the width, and the node-by-node reference is what makes the big lattice cells slow.
The speedup is FSM + PQ over the *best* of agenda and depth with the naive layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fusionplan.batching.pipeline import BatchingRequest, BatchingResult, prepare_batching
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.ir.timing import time_interleaved

CONFIGS = (("depth", "naive"), ("agenda", "naive"), ("fsm", "naive"), ("fsm", "pq"))
MAX_ERROR = 1e-4  # batched vs node-by-node outputs, float32 cells


@dataclass(frozen=True)
class BenchCell:
    workload: str
    batch_size: int
    hidden: int
    results: dict[str, BatchingResult]  # "policy+layout" -> result

    def get(self, policy: str, layout: str) -> BatchingResult:
        return self.results[f"{policy}+{layout}"]

    @property
    def baseline(self) -> BatchingResult:
        """The faster of agenda and depth, both with allocation-order layout."""
        pair = (self.get("agenda", "naive"), self.get("depth", "naive"))
        return min(pair, key=lambda r: r.seconds)

    @property
    def speedup(self) -> float:
        return self.baseline.seconds / self.get("fsm", "pq").seconds


def run_bench(
    workloads: Sequence[str],
    batch_sizes: Sequence[int],
    hiddens: Sequence[int],
    *,
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
) -> list[BenchCell]:
    cells = []
    for workload in workloads:
        for batch_size in batch_sizes:
            for hidden in hiddens:
                prepared = {
                    f"{policy}+{layout}": prepare_batching(
                        BatchingRequest(
                            workload,
                            policy,
                            layout,
                            batch_size,
                            hidden,
                            repeats=repeats,
                            verify=hidden == hiddens[0],
                        )
                    )
                    for policy, layout in CONFIGS
                }
                for key, p in prepared.items():
                    error = p.result.max_abs_error
                    if error is not None and error > MAX_ERROR:
                        raise AssertionError(
                            f"{workload} b={batch_size} {key}: batched run differs from the "
                            f"node-by-node run by {error:.2e} (> {MAX_ERROR})"
                        )
                seconds = time_interleaved([p.run for p in prepared.values()], repeats)
                results = {
                    key: p.timed(t) for (key, p), t in zip(prepared.items(), seconds, strict=True)
                }
                cells.append(BenchCell(workload, batch_size, hidden, results))
                if progress:
                    progress(f"{workload} b={batch_size} h={hidden}")
    return cells


def markdown(cells: Sequence[BenchCell]) -> str:
    """One row per cell: batches, copies and throughput of each configuration."""
    lines = [
        "| workload | batch | hidden | batches depth / agenda / FSM (bound) "
        "| MB copied naive / PQ | inputs/s depth / agenda / FSM / FSM+PQ | speedup "
        "| FSM+PQ plan ms/input |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in cells:
        fsm, pq = c.get("fsm", "naive"), c.get("fsm", "pq")
        depth, agenda = c.get("depth", "naive"), c.get("agenda", "naive")
        lines.append(
            f"| {c.workload} | {c.batch_size} | {c.hidden} | {depth.batches} / {agenda.batches} "
            f"/ {fsm.batches} ({fsm.lower_bound}) | {fsm.bytes_copied / 1e6:.2f} / "
            f"{pq.bytes_copied / 1e6:.2f} | {depth.throughput:,.0f} / {agenda.throughput:,.0f} "
            f"/ {fsm.throughput:,.0f} / {pq.throughput:,.0f} | {c.speedup:.2f}x "
            f"| {pq.schedule_ms / c.batch_size:.2f} |"
        )
    return "\n".join(lines)


def plot(cells: Sequence[BenchCell], path: Path) -> None:
    """Throughput against batch size, one panel per workload, one line per configuration
    (at the largest hidden size benched)."""
    import matplotlib  # heavy (1.1 s), needed only for the picture

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy, see above

    workloads = list(dict.fromkeys(c.workload for c in cells))
    hidden = max(c.hidden for c in cells)
    fig, axes = plt.subplots(1, len(workloads), figsize=(4 * len(workloads), 3.2), squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        mine = sorted(
            (c for c in cells if c.workload == workload and c.hidden == hidden),
            key=lambda c: c.batch_size,
        )
        for policy, layout in CONFIGS:
            ax.plot(
                [c.batch_size for c in mine],
                [c.get(policy, layout).throughput for c in mine],
                marker="o",
                label=f"{policy} + {layout}",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{workload} (hidden {hidden})")
        ax.set_xlabel("batch size")
    axes[0][0].set_ylabel("inputs / s")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    try:
        write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=110))
    finally:
        plt.close(fig)


def write_markdown(cells: Sequence[BenchCell], path: Path) -> None:
    write_text_atomic(path, markdown(cells) + "\n")
