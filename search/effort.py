"""Effort: how much work the exact, LNS and auto searches and the certificate may do, counted
so that the same command gives the same plan on any machine, under any load, on any engine
(docs/design.md, "Effort").

One **work unit** is one candidate group the exact solver visits (A* and its greedy dives
alike), or one op of a group the cost model costs from scratch, times the scheme's
``work_per_op`` (LBDF 1, BRR 3: a cached cost is nearly free, a new one takes time in
proportion to its ops); bounding a new state costs ops / 8 units (the traffic bound reads
every op and tensor). A run stops after a fixed number of
units, never after a number of seconds, so how far it gets depends only on the model, the
accelerator and the settings.
``effort`` scales every default: effort 1 is sized so that ``auto`` takes about 10 s on the
slowest catalogue model on 2 idle cores of the reference machine (docs/results.md,
"Determinism"); effort 2 does twice the work wherever the search has not finished earlier.

A wall-clock limit (``time_limit_s``) remains as a **safety cap** only. When the cap, not
the effort, is what stopped a run, the result depends on the machine, and the stop reason
(:data:`STOP_CLOCK`) says so in the JSON and the summary.
"""

from __future__ import annotations

import math
import time

from fusionplan.ir.errors import ConfigError

UNITS_PER_SECOND = 300_000
"""Work units per CPU second on the reference machine (docs/results.md, "Determinism"):
280k-560k on the cells auto cannot prove (GoogLeNet, Inception-v3), so that effort 1 keeps
auto at or under about 10 s there. Used only to size the defaults below, never to stop a
run."""

AUTO_UNITS = 10 * UNITS_PER_SECOND  # auto's whole run at effort 1
EXACT_UNITS = 60 * UNITS_PER_SECOND  # the exact search at effort 1
LNS_UNITS = 10 * UNITS_PER_SECOND  # LNS on its own at effort 1
WINDOW_UNITS = UNITS_PER_SECOND  # at most this much on one LNS window
CERTIFY_UNITS = UNITS_PER_SECOND  # the A* certificate of a heuristic's plan at effort 1
SCOUT_EDGE_PLANS = 500_000
"""auto's local-search scout proposes ``SCOUT_EDGE_PLANS / max(ops, edges)`` plans at effort 1
(at most its ``ls_budget``): a local-search plan costs time in proportion to the graph's
edges (realising a plan checks its quotient graph for cycles), 0.65 ms on GoogLeNet's 164
and 11.5 ms on DenseNet-201's 2,413 (docs/results.md, "Certified on branchy graphs"), so
this keeps the scout near 1-2 s on the largest graphs; counting ops instead gave DenseNet-201
703 plans, 8 s."""

WORK_SEARCHES = ("exact", "lns", "auto")
"""The searches an effort and a wall-clock safety cap apply to (the others count plans)."""

STOP_OPTIMAL = "optimal"
STOP_WORK = "effort spent"
STOP_CLOCK = "time limit hit"
STOP_BUDGET = "plan budget spent"
"""Why a run stopped: it finished (proved its answer), it spent its work units, its plan
budget ran out, or the wall-clock safety cap stopped it first (the only machine-dependent
outcome)."""


def check_effort(owner: str, effort: object, *, allow_zero: bool = False) -> float:
    """``effort`` as a float; a one-line ConfigError unless it is a finite number > 0
    (or >= 0 with ``allow_zero``)."""
    ok = (
        not isinstance(effort, bool)
        and isinstance(effort, int | float)
        and math.isfinite(effort)
        and (effort >= 0 if allow_zero else effort > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{owner} effort must be a number {bound}, got {effort!r}")
    return float(effort)


def check_time_cap(owner: str, seconds: object) -> float | None:
    """A wall-clock safety cap in seconds (None: no cap); a one-line ConfigError unless
    it is None or a number > 0."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ConfigError(f"{owner} time limit must be a number of seconds > 0, got {seconds!r}")
    return float(seconds)


def units(effort: float, per_effort: int) -> int:
    """Work units at ``effort`` (at least one)."""
    return max(1, round(effort * per_effort))


def check_units(owner: str, name: str, value: object, *, optional: bool = False) -> None:
    """A one-line ConfigError unless ``value`` is a whole number of units >= 1 (or None
    with ``optional``: the run's units then follow its effort)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{owner} {name} must be an integer >= 1, got {value!r}")


def run_units(effort: float, work: int | None, per_effort: int) -> int:
    """A run's units: ``work`` when set (auto sizes its stages so), else ``effort`` x
    ``per_effort``."""
    return work if work is not None else units(effort, per_effort)


def clock_end(seconds: float | None, start: float | None = None) -> float:
    """The ``time.perf_counter()`` reading past which a capped run stops (inf: no cap)."""
    if seconds is None:
        return math.inf
    return (time.perf_counter() if start is None else start) + seconds


def effort_for_seconds(seconds: float, per_effort: int) -> float:
    """The effort that buys ``seconds`` of work on the reference machine for a search whose
    effort 1 is ``per_effort`` units: how the benches turn their "N seconds" settings into
    reproducible work."""
    return seconds * UNITS_PER_SECOND / per_effort
