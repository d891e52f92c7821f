"""Fusion-group dataset generation: shard plans, parallel workers and the manifest.

Generation is deterministic by seed, independent of the number of processes, resumable
(finished shards are kept) and atomic (shards and manifest are renamed into place).
Everything here is numpy only: ``torch`` is imported only to export a zoo network that is
not cached yet.

Sampling and labelling are in :mod:`fusionplan.data.sampling`, the on-disk format in
:mod:`fusionplan.data.shards`, the numpy reader in :mod:`fusionplan.data.reader`.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from accel_model import COST_MODELS
from fusionplan.data.features import STORED_NAMES, STORED_VERSION
from fusionplan.data.reader import _read_manifest_raw
from fusionplan.data.sampling import (
    _CUT_RANGES,
    _MAX_PARTITIONS,
    _MAX_STALE,
    _POOL_FACTOR,
    SYNTHETIC_SOURCE,
    _load_graph,
    label_groups,
    model_context,
    sample_groups,
)
from fusionplan.data.shards import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    SHARD_DIR,
    DatasetError,
    ModelInfo,
    ShardSpec,
    file_sha256,
    graph_fingerprint,
    read_npz,
    read_shard_spec,
    shard_seed,
    write_npz,
)
from fusionplan.data.synthetic import SYNTHETIC
from fusionplan.data.zoo import (
    cache_dir,
    cache_file_name,
    model_source,
    zoo_entry,
)
from fusionplan.engines import Engine, Job, LocalEngine
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import write_atomic, write_text_atomic

BUFFERS_KB: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
TRAINING_FAMILIES: dict[str, tuple[str, ...]] = {
    "chain": ("resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "squeezenet"),
    "branchy": ("googlenet",),
    "dense": ("densenet121",),
    "transformer": ("bert_encoder",),
    "encoder-decoder (dilated)": ("deeplabv3_mobilenet_v3_large",),
    "random-wired": ("randwire-n32-s0", "randwire-n32-s1"),
    "NAS cells": ("nasnet-c3",),
}
"""The families the shipped GIN learns from (issue 28): a model family is what a GIN must
generalise across, so every kind of graph a user may bring has members here."""
TRAIN_MODELS: tuple[str, ...] = tuple(m for ms in TRAINING_FAMILIES.values() for m in ms)
UNSEEN_MODELS: tuple[str, ...] = ("inception_v3", "randwire-n64-s0", "nasnet-c6")
"""Unseen members of the training families (a deeper branchy network, a wider random
wiring, a taller cell stack); whole families are held out at training time instead
(``train gin --hold-out``)."""
SIZE_BINS: tuple[tuple[int, int], ...] = (
    (1, 1),
    (2, 3),
    (4, 7),
    (8, 15),
    (16, 31),
    (32, 63),
    (64, 256),
)
"""Inclusive node-count ranges; one shard per (model, bin). Groups over 256 ops are left out
(always invalid at every buffer here, and a search splits them long before)."""
BIN_SHARES: tuple[float, ...] = (0.05, 0.15, 0.20, 0.20, 0.18, 0.12, 0.10)
DEFAULT_GROUPS = 12_000
"""Target groups over the training models. Quotas are maxima (small networks saturate some
size bins), so the seed-0 dataset has 11,898 distinct groups: above the paper's ~10.8k."""
DEFAULT_UNSEEN_GROUPS = 2_000
DEFAULT_PROCESSES = 2


DATASET_ENV = "FUSIONPLAN_DATASET_DIR"


def default_dataset_dir() -> Path:
    """Where ``generate_dataset``/``train_gin`` look by default: ``$FUSIONPLAN_DATASET_DIR``,
    else ``<fusionplan cache>/datasets/groups-v<FORMAT_VERSION>`` (beside the zoo cache)."""
    override = os.environ.get(DATASET_ENV)
    if override:
        return Path(override).expanduser()

    return cache_dir().parent / "datasets" / f"groups-v{FORMAT_VERSION}"


def split_quota(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders; sums to total)."""
    if total <= 0 or not weights:
        return [0] * len(weights)
    s = float(sum(weights))
    raw = [total * w / s for w in weights]
    out = [math.floor(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def _model_ref(spec: str | os.PathLike) -> tuple[str, str, str]:
    """(name, source, zoo cache file) of a model argument.

    Four forms: a zoo name (``resnet18``), a zoo name at another input size
    (``resnet18@448``: the same torchvision network exported at 448x448, see
    :func:`fusionplan.data.zoo.zoo_variant_path`), a synthetic graph of
    :mod:`fusionplan.data.synthetic` (``randwire-n32-s0``, ``nasnet-c3``: built where it is
    sampled) or an ONNX file (its name is its stem made safe for shard file names, its source
    its absolute path). Raises ``ModelError`` for an unknown zoo name or a missing file,
    ``ConfigError`` for a bad size.
    """

    text = os.fspath(spec)
    if text in SYNTHETIC:
        return text, SYNTHETIC_SOURCE + text, ""
    if Path(text).is_file() or text.lower().endswith(".onnx"):
        path = model_source(text)  # a clear error for a missing file
        name = re.sub(r"[^A-Za-z0-9_.@-]", "_", path.stem)
        return name, str(path.resolve()), ""
    base, sep, size = text.partition("@")
    entry = zoo_entry(base)
    if not sep:
        return entry.name, entry.name, cache_file_name(entry.name)
    if not size.isdigit() or not 32 <= int(size) <= 4096:
        raise ConfigError(f"model {text!r}: the input size after '@' must be 32..4096 pixels")
    name = f"{entry.name}@{int(size)}"
    return name, name, cache_file_name(entry.name, int(size))


# ----------------------------------------------------------------------------- shard building
def _shard_summary(spec: ShardSpec, sha256: str, arrays: dict[str, Any], stats: dict) -> dict:
    summary = {
        "file": spec.file,
        "model": spec.model,
        "role": spec.role,
        "bin": spec.bin_index,
        "size_range": [spec.lo, spec.hi],
        "quota": spec.quota,
        "groups": len(arrays["mask"]),
        "nodes": int(arrays["x"].shape[0]),
        "edges": int(arrays["edge_index"].shape[1]),
        "sha256": sha256,
        "spec": spec.to_json(),
        **{k: int(v) for k, v in stats.items()},
    }
    for s in spec.schemes:
        summary[f"{s}_valid"] = [int(c) for c in arrays[f"{s}_valid"].sum(axis=0)]
    return summary


def build_shard(spec: ShardSpec, graph: OpGraph | None = None) -> tuple[dict[str, Any], bytes]:
    """Sample and label one shard in memory: (its manifest entry, the shard file's bytes).

    ``graph`` is the spec's model when the caller has it (an engine's shared input), else it
    is loaded from ``spec.source``. Nothing is written: the driver saves the bytes, so a
    worker on another machine needs no shared file system and a killed one leaves no file.
    """
    ctx = model_context(spec, graph)
    groups, stats = sample_groups(ctx, spec)
    arrays = label_groups(ctx, spec, groups)
    arrays["meta"] = np.array(json.dumps({"spec": spec.to_json(), "stats": stats}, sort_keys=True))
    buffer = io.BytesIO()
    write_npz(buffer, arrays)
    data = buffer.getvalue()
    return _shard_summary(spec, hashlib.sha256(data).hexdigest(), arrays, stats), data


def save_shard(path: Path, data: bytes) -> None:
    """Write a shard's bytes atomically (a temporary file renamed into place)."""
    write_atomic(path, lambda tmp: tmp.write_bytes(data))


def _existing_shard(spec: ShardSpec, root: Path, known: dict[str, Any] | None) -> dict | None:
    """The manifest entry of a finished shard on disk matching ``spec``, else None."""
    path = root / spec.file
    if not path.is_file():
        return None
    if known is not None and known.get("spec") == spec.to_json():
        return known if file_sha256(path) == known.get("sha256") else None
    if read_shard_spec(path) != spec.to_json():
        return None
    try:  # finished but not yet recorded (interrupted between shard and manifest)
        arrays = read_npz(path)
        stats = json.loads(str(arrays["meta"][()]))["stats"]
    except Exception:
        return None
    return _shard_summary(spec, file_sha256(path), arrays, stats)


def _shard_task(spec: ShardSpec, graphs: dict[str, OpGraph]) -> tuple[dict[str, Any], bytes]:
    """One engine task: a shard from the graphs every worker received once."""
    return build_shard(spec, graphs[spec.model])


# ----------------------------------------------------------------------------- generation
@dataclass
class GenerationPlan:
    """What :func:`generate_dataset` will do: models, shard specs, total quota."""

    root: Path
    params: dict[str, Any]
    models: list[ModelInfo]
    shards: list[ShardSpec]
    graphs: dict[str, OpGraph] = field(default_factory=dict, repr=False)  # model -> op graph

    @property
    def total_quota(self) -> int:
        return sum(s.quota for s in self.shards)


def plan_generation(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    groups: int = DEFAULT_GROUPS,
    unseen_groups: int = DEFAULT_UNSEEN_GROUPS,
    models: Sequence[str] | None = None,
    unseen_models: Sequence[str] | None = None,
    buffers_kb: Sequence[int] = BUFFERS_KB,
    schemes: Sequence[str] | None = None,
    bytes_per_element: int = 1,
    profile: str = "fusionplan",
) -> GenerationPlan:
    """Resolve models (exporting zoo models on first use) and derive every shard's spec.

    Groups are split over the models of a role in proportion to their op counts, then over
    the size bins by :data:`BIN_SHARES` (bins above a model's op count get nothing).
    """

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"dataset seed must be a whole number >= 0, got {seed!r}")
    for what, n in (("groups", groups), ("unseen groups", unseen_groups)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ConfigError(f"number of {what} must be a whole number >= 0, got {n!r}")
    buffers_kb = tuple(int(b) for b in buffers_kb)
    if not buffers_kb or min(buffers_kb) <= 0 or len(set(buffers_kb)) != len(buffers_kb):
        raise ConfigError(f"buffer sizes must be distinct positive KB values, got {buffers_kb}")
    # every registered scheme by default, in registration order (lbdf, brr)
    schemes = tuple(COST_MODELS.check(s.lower()) for s in (schemes or COST_MODELS.names()))
    train = [_model_ref(m) for m in (TRAIN_MODELS if models is None else models)]
    unseen = [_model_ref(m) for m in (UNSEEN_MODELS if unseen_models is None else unseen_models)]
    both = sorted(
        {n.partition("@")[0] for n, *_ in train} & {n.partition("@")[0] for n, *_ in unseen}
    )
    if both:
        raise ConfigError(f"models cannot be both trained on and unseen: {', '.join(both)}")
    names = [n for n, *_ in (*train, *unseen)]
    if len(set(names)) != len(names):
        raise ConfigError(f"model names must be distinct, got {', '.join(names)}")
    infos: list[ModelInfo] = []
    graphs: dict[str, OpGraph] = {}
    for role, refs in (("train", train), ("unseen", unseen)):
        for name, source, zoo_file in refs:
            g = graphs[name] = _load_graph(source, name)
            infos.append(
                ModelInfo(name, role, source, zoo_file, len(g), len(g.edges), graph_fingerprint(g))
            )
    buffers = tuple(b * 1024 for b in buffers_kb)
    shards: list[ShardSpec] = []
    for role, total in (("train", groups), ("unseen", unseen_groups)):
        members = [m for m in infos if m.role == role]
        per_model = split_quota(total, [m.nodes for m in members])
        for m, quota_m in zip(members, per_model, strict=True):
            live = [i for i, (lo, _) in enumerate(SIZE_BINS) if lo <= m.nodes]
            per_bin = split_quota(quota_m, [BIN_SHARES[i] for i in live])
            for i, q in zip(live, per_bin, strict=True):
                if q <= 0:
                    continue
                lo, hi = SIZE_BINS[i]
                shards.append(
                    ShardSpec(m.name, role, m.source, m.graph_sha256, i, lo, hi, q, seed,
                              shard_seed(seed, m.name, i), buffers, schemes,
                              int(bytes_per_element), STORED_VERSION,
                              (*_CUT_RANGES[i], _POOL_FACTOR, _MAX_STALE, _MAX_PARTITIONS),
                              FORMAT_VERSION, profile)
                )  # fmt: skip
    params = {
        "seed": seed,
        "groups": groups,
        "unseen_groups": unseen_groups,
        "train_models": [n for n, *_ in train],
        "unseen_models": [n for n, *_ in unseen],
        "buffers_kb": list(buffers_kb),
        "schemes": list(schemes),
        "bytes_per_element": int(bytes_per_element),
        "feature_version": STORED_VERSION,
        "format_version": FORMAT_VERSION,
    }
    if profile != "fusionplan":  # the default is left out: older manifests still match
        params["profile"] = profile
    return GenerationPlan(Path(out_dir), params, infos, shards, graphs)


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("fusionplan", "numpy", "onnx", "torch", "torch_geometric"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _manifest(plan: GenerationPlan, entries: dict[str, dict], complete: bool, **extra) -> dict:
    shards = [entries[s.file] for s in plan.shards if s.file in entries]
    m: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "complete": complete,
        **plan.params,
        "feature_names": list(STORED_NAMES),
        "size_bins": [list(b) for b in SIZE_BINS],
        "bin_shares": list(BIN_SHARES),
        "models": [m.__dict__ for m in plan.models],
        "shards": shards,
        "versions": _versions(),
        **extra,
    }
    if complete:
        m["counts"] = _counts(plan, shards)
        m["content_sha256"] = content_hash(shards, plan.params)
    return m


def content_hash(shards: Sequence[dict], params: dict) -> str:
    """Identity of a dataset's content: its parameters and its shards' hashes."""
    text = json.dumps(
        {"params": params, "shards": sorted((s["file"], s["sha256"]) for s in shards)},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _counts(plan: GenerationPlan, shards: Sequence[dict]) -> dict[str, Any]:
    nb = len(plan.params["buffers_kb"])
    out: dict[str, Any] = {}
    for role in ("train", "unseen"):
        mine = [s for s in shards if s["role"] == role]
        groups = sum(s["groups"] for s in mine)
        balance = {}
        for scheme in plan.params["schemes"]:
            valid = [sum(s[f"{scheme}_valid"][b] for s in mine) for b in range(nb)]
            balance[scheme] = {
                str(kb): round(v / groups, 4) if groups else None
                for kb, v in zip(plan.params["buffers_kb"], valid, strict=True)
            }
        out[role] = {
            "groups": groups,
            "samples_per_scheme": groups * nb,
            "nodes": sum(s["nodes"] for s in mine),
            "per_model": {
                m.name: sum(s["groups"] for s in mine if s["model"] == m.name)
                for m in plan.models
                if m.role == role
            },
            "valid_fraction": balance,
        }
    return out


def generate_dataset(
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    groups: int = DEFAULT_GROUPS,
    unseen_groups: int = DEFAULT_UNSEEN_GROUPS,
    models: Sequence[str] | None = None,
    unseen_models: Sequence[str] | None = None,
    buffers_kb: Sequence[int] = BUFFERS_KB,
    schemes: Sequence[str] | None = None,
    bytes_per_element: int = 1,
    profile: str = "fusionplan",
    processes: int = DEFAULT_PROCESSES,
    engine: Engine | None = None,
    retries: int = 2,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Generate (or finish) a dataset in ``out_dir``; returns its manifest.

    ``groups`` is the target over the training models (``models``, default the zoo's
    training networks), ``unseen_groups`` over the held-out ones (default ResNet-50,
    ResNet-152, DeepLabV3+MBv3). Shards already on disk with the expected spec are kept, so
    an interrupted run resumes where it stopped; a directory holding a dataset with other
    parameters is an error unless ``overwrite`` (which deletes its shards). Shards are built
    on ``engine`` (default: ``processes`` local worker processes; or Ray); the bytes depend
    on neither. A shard that still fails after ``retries`` retries is listed in the manifest
    (``failed``) and raises :class:`DatasetError` after every other shard is saved.
    ``profile`` names the cost conventions of the labels (the paper figure uses ``paper``).
    ``progress(done, total)`` is called with group quotas of finished shards (a shard that
    saturates below its quota still counts its whole quota, so the bar ends at ``total``).
    """
    engine = engine or LocalEngine(processes)
    started = time.perf_counter()
    plan = plan_generation(
        out_dir, seed=seed, groups=groups, unseen_groups=unseen_groups, models=models,
        unseen_models=unseen_models, buffers_kb=buffers_kb, schemes=schemes,
        bytes_per_element=bytes_per_element, profile=profile,
    )  # fmt: skip
    root = plan.root
    root.mkdir(parents=True, exist_ok=True)
    old = _read_manifest_raw(root)
    known: dict[str, dict] = {}
    if old is not None:
        same = old.get("format") == FORMAT_NAME and all(
            old.get(k) == v for k, v in plan.params.items()
        )
        if not same:
            if not overwrite:
                raise ConfigError(
                    f"{root} holds a dataset with other parameters; pass overwrite "
                    "(--overwrite) to replace it or choose another directory"
                )
            for s in old.get("shards", []):
                (root / s["file"]).unlink(missing_ok=True)
        else:
            known = {s["file"]: s for s in old.get("shards", [])}
    for stale in (root / SHARD_DIR).glob(".*.tmp") if (root / SHARD_DIR).is_dir() else ():
        stale.unlink(missing_ok=True)  # left by a killed worker; never a finished shard

    total = plan.total_quota
    done = 0
    entries: dict[str, dict] = {}
    todo: list[ShardSpec] = []
    for spec in plan.shards:
        entry = _existing_shard(spec, root, known.get(spec.file))
        if entry is None:
            todo.append(spec)
        else:
            entries[spec.file] = entry
            done += spec.quota
    if progress is not None:
        progress(done, total)
    write_text_atomic(root / MANIFEST, _json(_manifest(plan, entries, complete=False)))

    quota = {s.file: s.quota for s in plan.shards}
    # Largest models first and one model's shards together (each worker caches one model).
    order = {m.name: (-m.nodes, i) for i, m in enumerate(plan.models)}
    todo.sort(key=lambda s: (order[s.model], -s.quota))
    graphs = {m: plan.graphs[m] for m in {s.model for s in todo}}
    failed: dict[str, str] = {}
    setup_s = time.perf_counter() - started  # serial work, for scaling estimates
    with Job(engine, _shard_task, todo, shared=graphs, retries=retries) as job:
        for outcome in job:
            spec = todo[outcome.index]
            if not outcome.ok:
                failed[spec.file] = str(outcome.error)
                continue
            entry, data = outcome.value
            save_shard(root / spec.file, data)
            entries[spec.file] = entry
            done += quota[spec.file]
            write_text_atomic(root / MANIFEST, _json(_manifest(plan, entries, complete=False)))
            if progress is not None:
                progress(done, total)
    if failed:
        write_text_atomic(
            root / MANIFEST, _json(_manifest(plan, entries, complete=False, failed=failed))
        )
        first = next(iter(failed.items()))
        raise DatasetError(
            f"{len(failed)} shard(s) failed after {retries} retries (first: {first[0]}: "
            f"{first[1]}); rerun the same command to retry them"
        )
    elapsed = time.perf_counter() - started
    task_s = {todo[o.index].file: o.seconds for o in job.outcomes}
    manifest = _manifest(
        plan, entries, complete=True,
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        generation_seconds=round(elapsed, 2),
        shards_built=len(todo),
        engine=engine.describe(),
        tasks_per_node=job.tasks_per_node(),
        timing=_timing(old, setup_s, setup_s + job.driver_s, task_s),
    )  # fmt: skip
    write_text_atomic(root / MANIFEST, _json(manifest))
    return manifest


def _timing(
    old: dict[str, Any] | None, setup_s: float, driver_s: float, tasks: dict[str, float]
) -> dict[str, Any]:
    """What ``fusionplan bench scaling`` reads: the last invocation that built shards (a
    rerun with nothing to build keeps the earlier record)."""
    if not tasks and old is not None and "timing" in old:
        return old["timing"]
    return {
        "setup_seconds": round(setup_s, 3),
        "driver_seconds": round(driver_s, 3),
        "task_seconds": {f: round(t, 3) for f, t in tasks.items()},
    }


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=False) + "\n"
