"""Interactive HTML reports of plans, sweeps and stream schedules (docs/design.md, "Plan
reports"): one self-contained file, drawn by a small bundled script from data computed
here."""

from fusionplan.app.htmlreport.page import (
    plan_label,
    plan_report,
    write_plan_html,
    write_streams_html,
    write_sweep_html,
)
from fusionplan.app.htmlreport.payload import read_plan_file, read_sweep_csv

__all__ = [
    "plan_label",
    "plan_report",
    "read_plan_file",
    "read_sweep_csv",
    "write_plan_html",
    "write_streams_html",
    "write_sweep_html",
]
