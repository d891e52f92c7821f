"""Tables and pictures of plans: sweep rows, CSV, DRAM-vs-buffer plot."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from accel_model.accelerator import format_size
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.planning.plan import MB, Plan


def sweep_rows(plans: list[Plan]) -> list[dict[str, Any]]:
    """One row per plan (buffer ascending) with the metrics a sweep reports."""
    rows = []
    for p in sorted(plans, key=lambda p: p.cost_model.beta):
        m = p.metrics
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
            }
        )
    return rows


def write_sweep_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return write_text_atomic(path, buf.getvalue())


def write_sweep_plot(rows: list[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """DRAM (total and fusable) against buffer size on a log2 axis, with the proven lower
    bound at each buffer."""
    # matplotlib (1 s to import) loads only when a plot is asked for
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # only after choosing the headless backend

    kb = [r["buffer_bytes"] / 1024 for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(kb, [r["dram_mb"] for r in rows], "o-", label="DRAM (all ops)")
    ax.plot(kb, [r["fusable_dram_mb"] for r in rows], "s--", label="DRAM (fusable ops)")
    ax.plot(kb, [r["lower_bound_mb"] for r in rows], ":", color="grey", label="lower bound")
    ax.set_xscale("log", base=2)
    ax.set_xticks(kb, [r["buffer"] for r in rows])
    ax.set_xlabel("on-chip buffer")
    ax.set_ylabel("DRAM traffic (MB)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        return write_atomic(path, lambda p: fig.savefig(p, format="png", dpi=120))
    finally:
        plt.close(fig)
