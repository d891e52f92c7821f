"""Trained weights: where they live, how they are saved, and how they are loaded safely.

Checkpoints are plain ``state_dict`` tensors saved with ``torch.save`` and loaded with
``weights_only=True`` (no pickled code). Each sits next to a JSON manifest entry that
records what produced it (kind, scheme, dataset, seed, metrics, versions), so a mismatch is
a clear error that names the command rebuilding it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from fusionplan.ir.errors import FusionPlanError
from fusionplan.ir.io import write_atomic, write_text_atomic

SHIPPED_DIR = Path(__file__).resolve().parent / "weights"
MANIFEST = "manifest.json"
CHECKPOINT_VERSION = 1
WEIGHTS_ENV = "FUSIONPLAN_WEIGHTS_DIR"


class CheckpointError(FusionPlanError):
    """A checkpoint is missing, corrupt or does not match what the code expects."""


def weights_dir() -> Path:
    """Shipped weights, unless ``FUSIONPLAN_WEIGHTS_DIR`` points at a directory of one's own."""
    override = os.environ.get(WEIGHTS_ENV)
    return Path(override) if override else SHIPPED_DIR


def checkpoint_name(kind: str, scheme: str) -> str:
    return f"{kind}-{scheme}.pt"


def weights_identity(scheme: str) -> str:
    """A short hash of the bytes of every checkpoint of ``scheme`` in :func:`weights_dir`:
    results that depend on the weights (a bench row of a GNN splitter) key on it, so a
    rerun after retraining recomputes them instead of resuming stale ones."""
    stats = [(p, p.stat()) for p in sorted(weights_dir().glob(f"*-{scheme}.pt"))]
    return _bytes_digest(tuple((str(p), st.st_mtime_ns, st.st_size) for p, st in stats))


@functools.lru_cache(maxsize=16)
def _bytes_digest(stamps: tuple[tuple[str, int, int], ...]) -> str:
    """The hash of the files ``stamps`` names, read once per (path, mtime, size) set."""
    h = hashlib.sha256()
    for path, _, _ in stamps:
        h.update(Path(path).name.encode())
        h.update(Path(path).read_bytes())
    return h.hexdigest()[:16]


def rebuild_command(kind: str, scheme: str) -> str:
    return f"fusionplan train {kind} --scheme {scheme}"


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not path.is_file():
        return {"version": CHECKPOINT_VERSION, "checkpoints": {}}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON ({exc.msg})") from None


def save_checkpoint(
    state: dict[str, Any],
    kind: str,
    scheme: str,
    meta: dict[str, Any],
    directory: Path | None = None,
) -> Path:
    """Write ``state`` (tensors, ints, floats, strings, nested dicts/lists) and its manifest
    entry atomically."""

    import torch  # heavy (seconds): loaded by what saves or loads, not by weights_dir's users

    directory = directory or weights_dir()
    name = checkpoint_name(kind, scheme)
    path = write_atomic(directory / name, lambda p: torch.save(state, p))
    manifest = _read_manifest(directory)
    entry = {"kind": kind, "scheme": scheme, "checkpoint_version": CHECKPOINT_VERSION, **meta}
    manifest.setdefault("checkpoints", {})[name] = entry
    write_text_atomic(directory / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def load_checkpoint(
    kind: str, scheme: str, directory: Path | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(state, manifest entry) of a checkpoint; a clear error if missing or mismatched."""
    directory = directory or weights_dir()
    name = checkpoint_name(kind, scheme)
    path = directory / name
    fix = f"rebuild it with `{rebuild_command(kind, scheme)}`"
    if not path.is_file():
        raise CheckpointError(f"no {kind.upper()} weights for scheme '{scheme}' at {path}; {fix}")
    entry = _read_manifest(directory).get("checkpoints", {}).get(name)
    if entry is None:
        raise CheckpointError(f"{path} has no entry in {directory / MANIFEST}; {fix}")
    if entry.get("checkpoint_version") != CHECKPOINT_VERSION or entry.get("kind") != kind:
        raise CheckpointError(f"{path} was written by an incompatible version; {fix}")
    import torch  # heavy (seconds): only once a checkpoint is really read

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for corrupt or unsafe files
        raise CheckpointError(f"cannot load {path} ({type(exc).__name__}); {fix}") from None
    return state, entry
