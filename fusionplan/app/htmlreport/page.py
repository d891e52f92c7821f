"""The report page: one self-contained HTML file (styles, script and data inline).

The script and the styles ship as package data (``static/``) and are pasted into the page,
so the file opens offline and fetches nothing. The data is one JSON block the script draws;
it holds no timestamp and every list has a fixed order, so the same inputs give the same
bytes.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from accel_model.accelerator import format_size
from fusionplan.app.htmlreport.layout import NODE_H, NODE_W
from fusionplan.app.htmlreport.payload import (
    GROUP_COLOURS,
    diffs_payload,
    graph_payload,
    plan_payload,
    streams_payload,
    sweep_payload,
)
from fusionplan.ir.errors import PlanError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import write_text_atomic
from fusionplan.ir.version import VERSION
from fusionplan.planning.plan import Plan

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="fusionplan {version}">
<title>{title}</title>
<style>
{css}</style>
</head>
<body>
<header><h1>{title}</h1><span class="sub">{subtitle}</span></header>
<nav id="tabs"></nav>
<main id="views"></main>
<script type="application/json" id="fp-data">{data}</script>
<script>
{js}</script>
</body>
</html>
"""


@cache
def _static(name: str) -> str:
    """A file of ``static/`` (package data, so it is in the wheel and the editable install)."""
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def render(data: Mapping[str, Any], title: str, subtitle: str) -> str:
    """The page around ``data``. ``<`` is escaped in the JSON, so no string in it can close
    the script element."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=True).replace("<", "\\u003c")
    return TEMPLATE.format(
        version=VERSION,
        title=html.escape(title),
        subtitle=html.escape(subtitle),
        css=_static("report.css"),
        js=_static("report.js"),
        data=text,
    )


def report_data(
    graph: OpGraph | None,
    plans: Sequence[tuple[str, Mapping[str, Any]]] = (),
    sweep_rows: Sequence[Mapping[str, Any]] | None = None,
    streams: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything a page draws: ``plans`` are (label, plan-file dict) of ``graph``'s model,
    ``sweep_rows`` a sweep table's rows, ``streams`` a :func:`streams_payload`."""
    if plans and graph is None:
        raise PlanError("a report of plans needs the model's graph")
    payloads = [plan_payload(graph, plan, label) for label, plan in plans] if graph else []
    return {
        "box": [NODE_W, NODE_H],
        "palette": list(GROUP_COLOURS),
        "graph": graph_payload(graph) if graph is not None and plans else None,
        "plans": payloads,
        "diffs": diffs_payload(payloads) if len(payloads) > 1 else [],
        "sweep": sweep_payload(sweep_rows, payloads) if sweep_rows else None,
        "streams": streams,
    }


def plan_report(
    graph: OpGraph | None,
    plans: Sequence[tuple[str, Mapping[str, Any]]] = (),
    sweep_rows: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The page of plans of one model (graph, numbers, diff) and of sweep tables."""
    data = report_data(graph, plans, sweep_rows)
    if plans:
        first = data["plans"][0]
        title = f"{first['model']}: fusion plan" + ("s" if len(plans) > 1 else "")
        subtitle = " · ".join(p["buffer"] for p in data["plans"][:4])
        if len(plans) > 4:
            subtitle += f" · {len(plans) - 4} more"
    else:
        title, subtitle = "fusionplan sweep", f"{len(sweep_rows or [])} points"
    if sweep_rows:
        data["start"] = "sweep"
    return render(data, title, subtitle)


def write_plan_html(plan: Plan, path: str | Path, data: Mapping[str, Any] | None = None) -> Path:
    """``fusionplan plan --html``: the report of one plan, written atomically. ``data`` is
    its plan file's dict where one was just written (:meth:`Plan.to_dict` builds every
    group's schedule, seconds on a 400-op model: not twice)."""
    data = plan.to_dict() if data is None else data
    return write_text_atomic(path, plan_report(plan.graph, [(plan_label(data), data)]))


def write_sweep_html(
    plans: Sequence[Plan], rows: Sequence[Mapping[str, Any]], path: str | Path
) -> Path:
    """``fusionplan sweep --html``: the sweep chart with every point's plan behind it."""
    dicts = [p.to_dict() for p in plans]
    graph = plans[0].graph if plans else None
    page = plan_report(graph, [(plan_label(d), d) for d in dicts], rows)
    return write_text_atomic(path, page)


def write_streams_html(trace: Mapping[str, Any], title: str, path: str | Path) -> Path:
    """``fusionplan streams --html``: the Gantt charts of a stream schedule's trace."""
    data = report_data(None, streams=streams_payload(trace, title))
    return write_text_atomic(path, render(data, title, ""))


def plan_label(plan: Mapping[str, Any]) -> str:
    """How a plan is named in a report: its buffer and scheme (``256KB LBDF``)."""
    accel = plan.get("accelerator", {})
    size = accel.get("buffer_bytes")
    buffer = format_size(size) if isinstance(size, int) else "?"
    return f"{buffer} {str(accel.get('scheme', '?')).upper()}"
