"""``fusionplan bench scaling``: read a finished job's measured task times and project it onto
more cores (:mod:`fusionplan.engines.scaling` does the projection)."""

from __future__ import annotations

import json
from pathlib import Path

from fusionplan.app.bench.runner import RESULTS_FILE, TIMING_FILE, ResultStore
from fusionplan.data.shards import MANIFEST
from fusionplan.engines.scaling import JobTiming
from fusionplan.ir.errors import ConfigError


def job_timing(path: str | Path) -> JobTiming:
    """The timing of a dataset directory (its manifest) or a bench output directory
    (``runs.jsonl`` + ``timing.json``); a one-line ``ConfigError`` for anything else."""
    root = Path(path)
    manifest, runs, timing = root / MANIFEST, root / RESULTS_FILE, root / TIMING_FILE
    try:
        if manifest.is_file():
            data = json.loads(manifest.read_text(encoding="utf-8"))
            t = data["timing"]
            tasks = tuple(float(s) for s in t["task_seconds"].values())
            return JobTiming(f"dataset {root}", tasks, t["setup_seconds"], t["driver_seconds"])
        if runs.is_file() and timing.is_file():
            t = json.loads(timing.read_text(encoding="utf-8"))
            rows = ResultStore(root).rows.values()
            tasks = tuple(float(r["task_s"]) for r in rows if "task_s" in r)
            return JobTiming(f"bench {root}", tasks, t["setup_s"], t["driver_s"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{root} has no usable timing record ({exc!r}); rerun the job") from exc
    raise ConfigError(
        f"{root} is neither a dataset (manifest.json) nor a bench output directory "
        "(runs.jsonl + timing.json)"
    )
