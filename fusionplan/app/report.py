"""Tables and pictures of plans: sweep rows, CSV, DRAM, energy and latency against the
buffer (with the knee of each curve marked)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from accel_model.accelerator import format_size
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.planning.plan import MB, Plan


def sweep_rows(plans: list[Plan]) -> list[dict[str, Any]]:
    """One row per plan (buffer ascending) with the metrics a sweep reports."""
    rows = []
    for p in sorted(plans, key=lambda p: p.cost_model.beta):
        m, e = p.metrics, p.energy
        ms = 1e3 * p.hardware.clock_mhz  # cycles per millisecond
        rows.append(
            {
                "buffer": format_size(p.cost_model.beta),
                "buffer_bytes": p.cost_model.beta,
                "scheme": p.cost_model.accel.scheme,
                "dram_mb": m.dram_mb,
                "fusable_dram_mb": m.fusable_dram_mb,
                "unfusable_dram_mb": m.unfusable_dram_bytes / MB,
                "lower_bound_mb": m.lower_bound_bytes / MB,
                "gap": m.gap,
                "bound_method": m.bound_method,
                "mbu_kb": m.mbu_kb,
                "groups": m.groups,
                "unfusable_ops": m.unfusable_ops,
                # the optimus profile's fused groups have no schedule: no energy there
                "energy_uj": e.energy_uj if e else "",
                "energy_bound_uj": e.energy_bound_fj / 1e9 if e else "",
                "latency_ms": e.latency_ms if e else "",
                "latency_bound_ms": e.latency_bound_cycles / ms if e else "",
            }
        )
    return rows


def knee(xs: list[float], ys: list[float]) -> int | None:
    """Index of the knee of a falling curve: the point farthest below the chord from its
    first to its last point, both axes scaled to [0, 1] (the Kneedle rule); None for fewer
    than three points or a curve that never bends below its chord. A sweep's x is log2 of
    the buffer, so the knee is where doubling the buffer stops paying as it did."""
    if len(xs) < 3 or xs[-1] == xs[0] or max(ys) == min(ys):
        return None
    x0, x1, lo, hi = xs[0], xs[-1], min(ys), max(ys)
    best, where = 0.0, None
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        t = (x - x0) / (x1 - x0)
        chord = (ys[0] + t * (ys[-1] - ys[0]) - lo) / (hi - lo)
        below = chord - (y - lo) / (hi - lo)
        if below > best + 1e-12:
            best, where = below, i
    return where


def write_sweep_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomic(path, buf.getvalue())


def mark(xs: list[float], ys: list[float]) -> tuple[int | None, str]:
    """The point a sweep curve should show: its minimum where a larger buffer costs more
    again (energy: larger arrays cost more per access), else its :func:`knee`."""
    low = min(range(len(ys)), key=ys.__getitem__) if ys else None
    if low is not None and low < len(ys) - 1 and ys[-1] > ys[low]:
        return low, "minimum"
    return knee(xs, ys), "knee"


def write_sweep_plot(rows: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """DRAM (total and fusable) against buffer size on a log2 axis, with the proven lower
    bound at each buffer."""
    # matplotlib (1 s to import) loads only when a plot is asked for
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # only after choosing the headless backend

    kb = [r["buffer_bytes"] / 1024 for r in rows]
    panels = [("dram_mb", "lower_bound_mb", "DRAM traffic (MB)")]
    if all(r.get("energy_uj") != "" for r in rows):
        panels += [
            ("energy_uj", "energy_bound_uj", "energy per inference (uJ)"),
            ("latency_ms", "latency_bound_ms", "latency (ms)"),
        ]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    log_kb = [math.log2(k) for k in kb]
    for ax, (key, bound, label) in zip(axes[0], panels, strict=True):
        ys = [r[key] for r in rows]
        ax.plot(kb, ys, "o-", label=label.split(" (")[0])
        if key == "dram_mb":
            ax.plot(kb, [r["fusable_dram_mb"] for r in rows], "s--", label="DRAM (fusable ops)")
        ax.plot(kb, [r[bound] for r in rows], ":", color="grey", label="lower bound")
        at, what = mark(log_kb, ys)
        if at is not None:
            ax.plot([kb[at]], [ys[at]], "r*", markersize=14, label=f"{what}: {rows[at]['buffer']}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(kb, [r["buffer"] for r in rows])
        ax.set_xlabel("on-chip buffer")
        ax.set_ylabel(label)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    try:
        return write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=120))
    finally:
        plt.close(fig)
