"""What a report shows, as JSON-ready data: the laid-out op graph, each plan's groups with
their cost breakdown, the diff of plans of one model, sweep rows and stream timelines.

The page's script (``static/report.js``) only draws this data, so every figure it shows is
computed here, in Python, where it is tested. Plans enter as plan-file dicts
(:meth:`Plan.to_dict` or a saved ``plan.json``): a report shows a plan file as written.
"""

from __future__ import annotations

import csv
import io
import json
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from accel_model.accelerator import format_size
from fusionplan.app.htmlreport.layout import layered_layout
from fusionplan.ir.errors import ConfigError, PlanError
from fusionplan.ir.graph import OpGraph
from fusionplan.planning.plan import PLAN_FORMAT, PLAN_FORMAT_VERSION

GROUP_COLOURS = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948",
    "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6", "#d37295", "#8cd17d",
)  # fmt: skip
"""Fusion groups cycle through these (Tableau 10 and two more): neighbours in execution
order never share a colour."""

OP_TYPE_COLOURS = {
    "Conv": "#4e79a7", "ConvTranspose": "#2f5d8a", "Gemm": "#e15759", "MatMul": "#c0392b",
    "Relu": "#59a14f", "Clip": "#8cd17d", "Sigmoid": "#b6992d", "HardSigmoid": "#d4b84a",
    "HardSwish": "#7fb069", "Mul": "#f28e2b", "Add": "#ffbe7d", "Sub": "#e9a55b",
    "Div": "#d37b2b", "Concat": "#b07aa1", "MaxPool": "#76b7b2", "AveragePool": "#499894",
    "GlobalAveragePool": "#86bcb6", "Softmax": "#d37295", "LayerNormalization": "#9d7660",
    "BatchNormalization": "#bab0ac", "Erf": "#fabfd2", "Gelu": "#f1ce63", "Tanh": "#a0cbe8",
    "Split": "#79706e", "Slice": "#9c9c9c", "Pad": "#d7b5a6", "Resize": "#8f6da6",
    "Transpose": "#c7c7c7", "Reshape": "#aaaaaa",
}  # fmt: skip
"""One colour per ONNX op type, the same in every chart of every report; other types get a
colour of :data:`OTHER_COLOURS` chosen by a hash of their name (stable across runs)."""
OTHER_COLOURS = ("#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#8c564b", "#9467bd")

SWEEP_NEEDS = ("scheme", "buffer_bytes", "dram_mb", "lower_bound_mb")
"""Columns a sweep table must have to be charted (``model``, ``gap``, ``error``, ... are
shown when present)."""


def op_type_colour(op_type: str) -> str:
    """The colour of ``op_type`` in every report (a hash for types not in the table)."""
    known = OP_TYPE_COLOURS.get(op_type)
    if known is not None:
        return known
    return OTHER_COLOURS[zlib.crc32(op_type.encode()) % len(OTHER_COLOURS)]


# -- the graph ---------------------------------------------------------------------------
def graph_payload(graph: OpGraph) -> dict[str, Any]:
    """Ops with their details and layout position, and edges as polylines."""
    layout = layered_layout(len(graph), graph.edge_pairs)
    ops = []
    for v, node in enumerate(graph.nodes):
        ops.append(
            {
                "name": node.name,
                "type": node.op_type,
                "kind": node.kind,
                "label": short_label(node.name, node.op_type),
                "out": list(graph.out_shape(v)),
                "in": [list(graph.tensors[t].shape) for t in node.inputs],
                "weights": node.weights,
                "macs": node.macs,
                "x": layout.x[v],
                "y": layout.y[v],
            }
        )
    edges = [[u, v, [c for point in pts for c in point]] for u, v, pts in layout.edges]
    types = sorted({n.op_type for n in graph.nodes})
    return {
        "name": graph.name,
        "ops": ops,
        "edges": edges,
        "width": layout.width,
        "height": layout.height,
        "crossings": layout.crossings,
        "colours": {t: op_type_colour(t) for t in types},
    }


def short_label(name: str, op_type: str) -> str:
    """A box's second line: the tail of an ONNX node name (``/layer1/layer1.0/conv1/Conv``
    reads ``layer1.0/conv1``), without the op type the first line already shows."""
    parts = [p for p in name.split("/") if p]
    if len(parts) > 1 and parts[-1].split("_")[0] == op_type:
        parts = parts[:-1]
    tail = "/".join(parts[-2:]) if parts else name
    return tail if len(tail) <= 24 else "…" + tail[-23:]


# -- plans -------------------------------------------------------------------------------
def read_plan_file(path: str | Path) -> dict[str, Any]:
    """A plan file's dict; a one-line :class:`PlanError` for anything that is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read plan file {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(
            f"{path} is not a plan file: not JSON ({exc.msg}, line {exc.lineno})"
        ) from None
    check_plan_dict(data, str(path))
    return data


def check_plan_dict(data: Any, where: str) -> None:
    """Refuse a dict that is not a plan file of the version this report reads."""
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise PlanError(f"{where} is not a plan file (no 'format': '{PLAN_FORMAT}')")
    if data.get("version") != PLAN_FORMAT_VERSION:
        raise PlanError(f"{where}: plan format version {data.get('version')} is not supported")
    groups = data.get("groups")
    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str):
        raise PlanError(f"{where}: the plan file names no model")
    if not isinstance(groups, list) or not all(_is_group(g) for g in groups):
        raise PlanError(
            f"{where}: 'groups' must be a list of groups with 'nodes', 'buffer_bytes' and "
            "'dram_bytes'"
        )
    for key in ("accelerator", "metrics"):
        if not isinstance(data.get(key), dict):
            raise PlanError(f"{where}: the plan file has no '{key}' block")


def _is_group(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("nodes"), list)
        and all(isinstance(n, str) for n in entry["nodes"])
        and isinstance(entry.get("buffer_bytes"), int)
        and isinstance(entry.get("dram_bytes"), int)
    )


def plan_payload(graph: OpGraph, plan: Mapping[str, Any], label: str) -> dict[str, Any]:
    """One plan's groups as op indices, with each group's breakdown: DRAM per tensor (read
    from outside or written out), per op's weights, and its compact schedule."""
    index = graph.node_index
    owner: dict[int, int] = {}
    producer = {t.name: t.producer for t in graph.tensors}
    groups = []
    for gi, entry in enumerate(plan["groups"]):
        ops = []
        for name in entry["nodes"]:
            v = index.get(name)
            if v is None:
                raise PlanError(f"{label}: the plan names op '{name}', which {graph.name} lacks")
            if v in owner:
                raise PlanError(f"{label}: op '{name}' is in two groups")
            owner[v] = gi
            ops.append(v)
        groups.append(_group_payload(entry, gi, sorted(ops), producer))
    missing = [graph.nodes[v].name for v in range(len(graph)) if v not in owner]
    if missing:
        example = missing[0]
        raise PlanError(f"{label}: {len(missing)} op(s) of {graph.name} in no group: {example}")
    accel = plan["accelerator"]
    return {
        "label": label,
        "model": plan["model"]["name"],
        "accelerator": accel,
        "buffer": _accel_text(accel),
        "metrics": plan["metrics"],
        "search": {k: v for k, v in (plan.get("search") or {}).items() if k != "timing"},
        "prepasses": [_prepass_payload(r) for r in plan.get("prepasses") or ()],
        "groups": groups,
    }


def _prepass_payload(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the report shows of a pre-pass: its summary and, for a stream schedule, the
    ops of each stream (names, as the pass scheduled them)."""
    schedule = (record.get("artifacts") or {}).get("stream schedule")
    stale = [f"its {fact} is stale: {later} rewrote the graph after it"
             for fact, later in (record.get("invalidated") or {}).items()]  # fmt: skip
    return {
        "pass": record["pass"],
        "summary": record["summary"],
        "notes": stale,
        "streams": schedule["streams"] if schedule else [],
    }


def _accel_text(accel: Mapping[str, Any]) -> str:
    size = accel.get("buffer_bytes")
    scheme = str(accel.get("scheme", "?")).upper()
    text = f"{format_size(size) if isinstance(size, int) else '?'} buffer, {scheme}"
    profile = accel.get("profile")
    return text if profile in (None, "fusionplan") else f"{text}, {profile} profile"


def _group_payload(
    entry: Mapping[str, Any], gi: int, ops: list[int], producer: Mapping[str, int]
) -> dict[str, Any]:
    """One group's figures; ``producer`` maps a tensor's name to the op that makes it."""
    schedule = entry.get("schedule") if isinstance(entry.get("schedule"), dict) else None
    inside = set(ops)
    tensors, weights = [], []
    if schedule is not None and isinstance(schedule.get("dram_bytes"), dict):
        for name, nbytes in sorted(schedule["dram_bytes"].get("tensors", {}).items()):
            way = "write" if producer.get(name, -1) in inside else "read"
            tensors.append({"tensor": name, "dir": way, "bytes": nbytes})
        for name, nbytes in sorted(schedule["dram_bytes"].get("weights", {}).items()):
            weights.append({"op": name, "bytes": nbytes})
    compact = None
    if schedule is not None:
        compact = {k: v for k, v in schedule.items() if k != "dram_bytes"}
    return {
        "id": entry.get("id", gi),
        "ops": ops,
        "buffer": entry["buffer_bytes"],
        "dram": entry["dram_bytes"],
        "unfusable": bool(entry.get("unfusable", False)),
        "colour": "#9e9e9e" if entry.get("unfusable") else GROUP_COLOURS[gi % len(GROUP_COLOURS)],
        "tensors": tensors,
        "weights": weights,
        "schedule": compact,
        "weights_mode": schedule.get("weights") if schedule else None,
    }


# -- diffs -------------------------------------------------------------------------------
def plan_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Where plan ``b`` differs from plan ``a`` (payloads of one graph): the smallest sets of
    ops that both plans group among themselves, with each side's groups and DRAM. Regions
    partition the ops, so the ``saved`` column adds up to a's DRAM minus b's; regions where
    nothing changed (same group, same DRAM) are left out."""
    parent = list(range(len(a["groups"]) + len(b["groups"])))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner_a = {v: gi for gi, g in enumerate(a["groups"]) for v in g["ops"]}
    offset = len(a["groups"])
    for gj, g in enumerate(b["groups"]):
        for v in g["ops"]:
            ra, rb = find(owner_a[v]), find(offset + gj)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    regions: dict[int, dict[str, Any]] = {}
    for side, groups, base in (("a", a["groups"], 0), ("b", b["groups"], offset)):
        for gi, g in enumerate(groups):
            region = regions.setdefault(
                find(base + gi), {"ops": [], "a": [], "b": [], "a_dram": 0, "b_dram": 0}
            )
            region[side].append(gi)
            region[f"{side}_dram"] += g["dram"]
            if side == "a":
                region["ops"].extend(g["ops"])
    changed = []
    for region in regions.values():
        same = len(region["a"]) == len(region["b"]) == 1 and region["a_dram"] == region["b_dram"]
        if not same:
            region["ops"].sort()
            region["saved"] = region["a_dram"] - region["b_dram"]
            changed.append(region)
    return sorted(changed, key=lambda r: (-abs(r["saved"]), r["ops"][0]))


def diffs_payload(plans: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The first plan against each other one."""
    return [
        {"a": 0, "b": j, "regions": plan_diff(plans[0], plans[j])} for j in range(1, len(plans))
    ]


# -- sweeps ------------------------------------------------------------------------------
def read_sweep_csv(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a sweep table (``fusionplan sweep -o``), numbers parsed; a one-line
    :class:`ConfigError` for a file that is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read sweep table {path}: {exc}") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in SWEEP_NEEDS if c not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(f"{path} is not a sweep table (CSV): no column '{missing[0]}'")
    rows = []
    for line, raw in enumerate(reader, start=2):
        rows.append(_sweep_row(raw, f"{path}, line {line}"))
    if not rows:
        raise ConfigError(f"{path} is a sweep table with no rows")
    return rows


def _sweep_row(raw: Mapping[str, str | None], where: str) -> dict[str, Any]:
    row: dict[str, Any] = {k: v or "" for k, v in raw.items() if k is not None}
    row.setdefault("model", "")
    if row.get("error"):
        return row
    try:
        row["buffer_bytes"] = int(row["buffer_bytes"])
        for key in ("dram_mb", "lower_bound_mb"):
            row[key] = float(row[key])
    except ValueError:
        raise ConfigError(
            f"{where}: buffer_bytes, dram_mb and lower_bound_mb must be numbers"
        ) from None
    return row


def sweep_payload(
    rows: Sequence[Mapping[str, Any]], plans: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Rows for the chart, each with the index of the report's plan of that model, scheme
    and buffer (-1: the report holds no such plan)."""
    key_of: dict[tuple[Any, ...], int] = {}
    for i, p in enumerate(plans):
        accel = p["accelerator"]
        key_of.setdefault((p["model"], accel.get("scheme"), accel.get("buffer_bytes")), i)
    only = plans[0]["model"] if len({p["model"] for p in plans}) == 1 else ""
    out = []
    for row in rows:
        item = {k: row[k] for k in row if row[k] != ""}
        item["model"] = model_label(str(row.get("model", ""))) or only  # a table without models
        key = (item["model"], row.get("scheme"), row.get("buffer_bytes"))
        item["plan"] = key_of.get(key, -1)
        out.append(item)
    return {"rows": out}


def model_label(model: str) -> str:
    """A sweep row's model as a plan file names it: an ONNX file's stem, a zoo name as is."""
    return Path(model).stem if model.lower().endswith(".onnx") else model


# -- stream schedules --------------------------------------------------------------------
def streams_payload(trace: Mapping[str, Any], title: str) -> dict[str, Any]:
    """Gantt charts from a Chrome trace (:meth:`StreamsResult.trace`): per timeline, each
    op's stream, start and end (µs) and the event arrows (producer's end -> waiter's start)."""
    labels: dict[int, str] = {}
    charts: dict[int, dict[str, Any]] = {}
    flows: dict[tuple[int, int], dict[str, Any]] = {}
    for ev in trace.get("traceEvents", []):
        pid = ev.get("pid", 0)
        chart = charts.setdefault(pid, {"ops": [], "events": [], "streams": 0})
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            labels[pid] = ev["args"]["name"]
        elif ev.get("ph") == "X":
            args = ev.get("args", {})
            op = {"name": args.get("node", ev["name"]), "type": ev["name"], "stream": ev["tid"]}
            chart["ops"].append({**op, "start": ev["ts"], "end": round(ev["ts"] + ev["dur"], 3)})
            chart["streams"] = max(chart["streams"], ev["tid"] + 1)
        elif ev.get("ph") in ("s", "f"):
            end = flows.setdefault((pid, ev["id"]), {})
            end[ev["ph"]] = [ev["tid"], ev["ts"]]
    for (pid, _), flow in sorted(flows.items()):
        if "s" in flow and "f" in flow:
            charts[pid]["events"].append(flow["s"] + flow["f"])
    types = sorted({op["type"] for c in charts.values() for op in c["ops"]})
    drawn = [pid for pid in sorted(charts) if charts[pid]["ops"]]
    return {
        "title": title,
        "charts": [{"label": labels.get(pid, f"timeline {pid}"), **charts[pid]} for pid in drawn],
        "colours": {t: op_type_colour(t) for t in types},
    }
