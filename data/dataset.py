"""Fusion-group datasets: sampling, labelling, the versioned on-disk format and its reader.

A *group* is a fusion group of one zoo model, sampled the way a search proposes it: a
random edge-cut partition of the model's fusable nodes, made structurally sound
(:func:`fusionplan.ir.partition.make_sound`: connected, acyclic quotient) but **not** split
when invalid, so the dataset holds both valid and invalid groups. Each group is labelled
with the cost model under every scheme (LBDF, BRR) at every buffer size (128 ... 2048 KB):
``F_beta`` (bytes), ``F_D`` (bytes) and validity. A *sample* is (group, buffer) for one
scheme: 5 samples per group per scheme.

The format is documented in ``docs/dataset.md``; in short, a directory with
``manifest.json`` and ``shards/<model>-b<bin>.npz`` files (plain ``.npy`` members, never
pickles). Generation is deterministic by seed, independent of the number of processes,
resumable (finished shards are kept) and atomic (shards and manifest are renamed into
place). Everything here is numpy only: ``torch`` is imported only to export a zoo network
that is not cached yet.

Sampling, per model and per *size bin* (the shard): draw partitions, each over the fusable
nodes of a random context (one of the 10 (scheme, buffer) cells, or every node fusable in at
least one cell) with a cut probability drawn log-uniformly for the bin; collect the distinct
groups whose node count lies in the bin until the pool holds twice the shard's quota or no
new group turned up for a while; then draw the quota uniformly from the pool. Size bins are
disjoint, so shards of one model never overlap and the whole dataset is free of duplicate
(model, group) pairs without any cross-shard step. Quotas are maxima: a small network
(VGG16 is a 37-op chain) has no 64-op groups and few distinct 32-op ones.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import random
import re
import time
import zipfile
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from accel_model import COST_MODELS, Accelerator, make_cost_model, unfusable_nodes
from data.features import (
    BUFFER_COLUMN,
    FEATURE_NAMES,
    FEATURE_VERSION,
    NUM_FEATURES,
    group_features,
    node_feature_table,
    with_buffer,
)
from data.zoo import (
    TRAIN_MODELS,
    UNSEEN_MODELS,
    cache_dir,
    cache_file_name,
    load_zoo_model,
    model_source,
    zoo_entry,
    zoo_variant_path,
)
from fusionplan.ir.errors import ConfigError, FusionPlanError
from fusionplan.ir.graph import bits
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.ir.onnx_import import load_model
from fusionplan.ir.partition import groups_from_cut_edges, make_sound

FORMAT_NAME = "fusionplan-groups"
FORMAT_VERSION = 1
"""Bump when the shard layout or the sampling procedure changes."""

BUFFERS_KB: tuple[int, ...] = (128, 256, 512, 1024, 2048)
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
MANIFEST = "manifest.json"
SHARD_DIR = "shards"

_POOL_FACTOR = 2  # candidate pool = quota * this, then a uniform draw of quota from it
_MAX_STALE = 60  # partitions in a row without a new group in the bin -> saturated
_MAX_PARTITIONS = 4000


DATASET_ENV = "FUSIONPLAN_DATASET_DIR"


def default_dataset_dir() -> Path:
    """Where ``generate_dataset``/``train_gin`` look by default: ``$FUSIONPLAN_DATASET_DIR``,
    else ``<fusionplan cache>/datasets/groups-v<FORMAT_VERSION>`` (beside the zoo cache)."""
    override = os.environ.get(DATASET_ENV)
    if override:
        return Path(override).expanduser()

    return cache_dir().parent / "datasets" / f"groups-v{FORMAT_VERSION}"


class DatasetError(FusionPlanError):
    """A dataset directory is missing, incomplete, corrupt or of another format version."""


def _regenerate_hint(path: Path) -> str:
    return f"run `fusionplan dataset generate --output {path}` to (re)build or finish it"


# ----------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class ModelInfo:
    """A network in the dataset: name, role, where it came from, and a fingerprint of its
    op graph. ``source`` is the zoo name, or the absolute path of an ONNX file;
    ``zoo_file`` is the zoo cache file name (empty for a file)."""

    name: str
    role: str  # "train" or "unseen"
    source: str
    zoo_file: str
    nodes: int
    edges: int
    graph_sha256: str


@dataclass(frozen=True)
class ShardSpec:
    """Everything that determines one shard's bytes. Stored inside the shard; a shard on
    disk whose stored spec equals the expected one is reused on resume."""

    model: str
    role: str
    source: str  # zoo name or absolute ONNX path
    graph_sha256: str
    bin_index: int
    lo: int
    hi: int
    quota: int
    seed: int  # the dataset seed
    shard_seed: int  # derived from (seed, model, bin)
    buffers: tuple[int, ...]  # bytes
    schemes: tuple[str, ...]
    bytes_per_element: int
    feature_version: int
    sampler: tuple[float | int, ...] = ()  # (p_lo, p_hi, pool factor, max stale, max partitions)
    format_version: int = FORMAT_VERSION

    @property
    def file(self) -> str:
        return f"{SHARD_DIR}/{self.model}-b{self.bin_index}.npz"

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["buffers"] = list(self.buffers)
        d["schemes"] = list(self.schemes)
        d["sampler"] = list(self.sampler)
        return d


def shard_seed(seed: int, model: str, bin_index: int) -> int:
    """A 63-bit seed for shard (model, bin) of a dataset with ``seed``; stable across runs
    and platforms (sha256, not Python's salted ``hash``)."""
    digest = hashlib.sha256(f"{FORMAT_NAME}:{seed}:{model}:{bin_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def graph_fingerprint(graph) -> str:
    """sha256 of the op graph's structure and attributes (node names included)."""
    text = repr((graph.nodes, graph.tensors, graph.inputs, graph.outputs))
    return hashlib.sha256(text.encode()).hexdigest()


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


# ----------------------------------------------------------------------------- sampling
class _ModelContext:
    """Per-process cache of what sampling one model needs (graph, features, cost models)."""

    def __init__(self, graph, buffers: Sequence[int], schemes: Sequence[str], b: int) -> None:
        self.graph = graph
        self.table = node_feature_table(graph)
        self.models = {
            (s, beta): make_cost_model(graph, Accelerator(beta, s, b))
            for s in schemes
            for beta in buffers
        }
        everything = graph.all_nodes
        fusable_sets = [everything & ~unfusable_nodes(cm) for cm in self.models.values()]
        union = 0
        for f in fusable_sets:
            union |= f
        self.contexts = [*fusable_sets, union]  # fusable node masks a partition is drawn over
        pairs = sorted({(e.src, e.dst) for e in graph.edges})
        self.context_edges = [
            [(u, v) for u, v in pairs if (f >> u) & (f >> v) & 1] for f in self.contexts
        ]
        self.fusable_anywhere = union


_CONTEXTS: dict[tuple, _ModelContext] = {}


def _model_ref(spec: str | os.PathLike) -> tuple[str, str, str]:
    """(name, source, zoo cache file) of a model argument.

    Three forms: a zoo name (``resnet18``), a zoo name at another input size
    (``resnet18@448``: the same torchvision network exported at 448x448, see
    :func:`data.zoo.zoo_variant_path`), or an ONNX file (its name is its stem made safe for shard
    file names, its source its absolute path). Raises ``ModelError`` for an unknown zoo
    name or a missing file, ``ConfigError`` for a bad size.
    """

    text = os.fspath(spec)
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


def _load_graph(source: str, name: str):
    if os.path.isabs(source):
        return load_model(source, name=name)
    base, sep, size = source.partition("@")
    if sep:
        return load_model(zoo_variant_path(base, int(size)), name=source)
    return load_zoo_model(source)


def _context(spec: ShardSpec) -> _ModelContext:
    key = (spec.model, spec.graph_sha256, spec.buffers, spec.schemes, spec.bytes_per_element)
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        graph = _load_graph(spec.source, spec.model)
        if graph_fingerprint(graph) != spec.graph_sha256:
            raise DatasetError(f"model {spec.model} changed while the dataset was generated")
        _CONTEXTS.clear()  # one model at a time per process keeps memory flat
        ctx = _CONTEXTS[key] = _ModelContext(
            graph, spec.buffers, spec.schemes, spec.bytes_per_element
        )
    return ctx


_CUT_RANGES: tuple[tuple[float, float], ...] = (
    (0.3, 1.0),
    (0.2, 0.9),
    (0.1, 0.5),
    (0.06, 0.35),
    (0.04, 0.25),
    (0.03, 0.2),
    (0.02, 0.15),
)
"""Per size bin, the range of the cut probability p (drawn log-uniformly per partition).
Measured on EfficientNet-B3 and ResNet-101: groups of 32-256 ops are most frequent at
p ~ 0.05-0.15, not at p -> 0, because coarse partitions are cut apart again by unfusable
ops and by :func:`make_sound` (quotient cycles) or merge into one giant group."""


def sample_groups(ctx: _ModelContext, spec: ShardSpec) -> tuple[list[int], dict[str, int]]:
    """The shard's groups (sorted bitmasks) and sampling statistics; deterministic in spec."""
    rng = random.Random(spec.shard_seed)
    graph = ctx.graph
    p_lo, p_hi = math.log(spec.sampler[0]), math.log(spec.sampler[1])
    pool_factor, max_stale, max_partitions = spec.sampler[2:]
    lo, hi = spec.lo, spec.hi
    pool: set[int] = set()
    target = spec.quota * pool_factor
    partitions = stale = 0
    # Singletons of ops that fit nowhere (unfusable in every cell) say nothing: left out.
    allowed_single = ctx.fusable_anywhere
    while len(pool) < target and partitions < max_partitions and stale < max_stale:
        partitions += 1
        k = rng.randrange(len(ctx.contexts))
        fus, edges = ctx.contexts[k], ctx.context_edges[k]
        p = math.exp(rng.uniform(p_lo, p_hi))
        cut = [rng.random() < p for _ in edges]
        fixed = [1 << v for v in bits(graph.all_nodes & ~fus)]
        parts = make_sound(graph, groups_from_cut_edges(graph, fus, cut, edges) + fixed)
        before = len(pool)
        for g in parts:
            n = g.bit_count()
            if lo <= n <= hi and (n > 1 or g & allowed_single):
                pool.add(g)
        stale = 0 if len(pool) > before else stale + 1
    ordered = sorted(pool)
    chosen = sorted(rng.sample(ordered, min(spec.quota, len(ordered))))
    stats = {"partitions": partitions, "pool": len(pool), "saturated": int(len(pool) < target)}
    return chosen, stats


def label_groups(ctx: _ModelContext, spec: ShardSpec, groups: Sequence[int]) -> dict[str, Any]:
    """The shard's arrays (see docs/dataset.md) for ``groups`` of the context's model."""
    nb = len(spec.buffers)
    xs, eis, ids = [], [], []
    node_ptr, edge_ptr = [0], [0]
    labels = {
        s: (np.zeros((len(groups), nb), np.int64), np.zeros((len(groups), nb), np.int64),
            np.zeros((len(groups), nb), np.bool_))
        for s in spec.schemes
    }  # fmt: skip
    for gi, g in enumerate(groups):
        x, ei = group_features(ctx.graph, ctx.table, g)
        xs.append(x[:, :-1])
        eis.append(ei)
        ids.extend(bits(g))
        node_ptr.append(node_ptr[-1] + x.shape[0])
        edge_ptr.append(edge_ptr[-1] + ei.shape[1])
        for s in spec.schemes:
            fb, fd, ok = labels[s]
            for bi, beta in enumerate(spec.buffers):
                c = ctx.models[(s, beta)].cost(g)
                fb[gi, bi], fd[gi, bi], ok[gi, bi] = c.buffer, c.dram, c.valid
    width = ctx.table.shape[1] - 1
    arrays: dict[str, Any] = {
        "mask": np.array([format(g, "x") for g in groups], dtype=np.str_)
        if groups
        else np.zeros(0, dtype="<U1"),
        "node_ptr": np.array(node_ptr, np.int64),
        "edge_ptr": np.array(edge_ptr, np.int64),
        "x": np.concatenate(xs).astype(np.float32) if xs else np.zeros((0, width), np.float32),
        "node_id": np.array(ids, np.int32),
        "edge_index": np.concatenate(eis, axis=1).astype(np.int32)
        if eis
        else np.zeros((2, 0), np.int32),
        "buffers": np.array(spec.buffers, np.int64),
    }
    for s in spec.schemes:
        fb, fd, ok = labels[s]
        arrays[f"{s}_buffer"], arrays[f"{s}_dram"], arrays[f"{s}_valid"] = fb, fd, ok
    return arrays


# ----------------------------------------------------------------------------- shard files
def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """A deflated ``.npz`` with fixed member timestamps, so equal arrays give equal bytes
    (``np.savez`` stamps the current time into the zip). Never pickles."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as f:
                a = np.asarray(arrays[name])  # ascontiguousarray would make 0-d arrays 1-d
                if not a.flags.c_contiguous:
                    a = a.copy(order="C")
                np.lib.format.write_array(f, a, allow_pickle=False)


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of a shard (``allow_pickle=False``: an object array is an error)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_shard_spec(path: Path) -> dict[str, Any] | None:
    """The spec stored in a shard, or None if the file is unreadable or not a shard."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["meta"][()]))["spec"]
    except Exception:  # a truncated/foreign file: regenerate it
        return None


def _shard_summary(spec: ShardSpec, path: Path, arrays: dict[str, Any], stats: dict) -> dict:
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
        "sha256": file_sha256(path),
        "spec": spec.to_json(),
        **{k: int(v) for k, v in stats.items()},
    }
    for s in spec.schemes:
        summary[f"{s}_valid"] = [int(c) for c in arrays[f"{s}_valid"].sum(axis=0)]
    return summary


def build_shard(spec: ShardSpec, root: Path) -> dict[str, Any]:
    """Sample, label and atomically write one shard; returns its manifest entry."""
    ctx = _context(spec)
    groups, stats = sample_groups(ctx, spec)
    arrays = label_groups(ctx, spec, groups)
    arrays["meta"] = np.array(json.dumps({"spec": spec.to_json(), "stats": stats}, sort_keys=True))
    path = root / spec.file
    write_atomic(path, lambda tmp: write_npz(tmp, arrays))
    return _shard_summary(spec, path, arrays, stats)


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
    return _shard_summary(spec, path, arrays, stats)


def _worker(spec: ShardSpec, root: str) -> dict[str, Any]:
    return build_shard(spec, Path(root))


def _run_parallel(
    todo: Sequence[ShardSpec], root: Path, processes: int, finished: Callable[[dict], None]
) -> None:
    """Build shards in ``processes`` spawned workers, calling ``finished`` as each ends.

    Spawned (not forked) workers: the parent may hold torch's thread pools. A process pool
    executor, not ``multiprocessing.Pool``: a worker that dies (or a caller script without
    an ``if __name__ == "__main__"`` guard) is an error here, never an endless respawn.
    Shards are submitted at most ``2 * processes`` at a time, largest models first.
    """

    pending = list(todo)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(processes, len(todo)), mp_context=ctx) as pool:
        running: set = set()
        try:
            while pending or running:
                while pending and len(running) < 2 * processes:
                    running.add(pool.submit(_worker, pending.pop(0), str(root)))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    finished(fut.result())
        except BaseException:
            for fut in running:
                fut.cancel()
            raise


# ----------------------------------------------------------------------------- generation
@dataclass
class GenerationPlan:
    """What :func:`generate_dataset` will do: models, shard specs, total quota."""

    root: Path
    params: dict[str, Any]
    models: list[ModelInfo]
    shards: list[ShardSpec]

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
) -> GenerationPlan:
    """Resolve models (exporting zoo models on first use) and derive every shard's spec.

    Groups are split over the models of a role in proportion to their op counts, then over
    the size bins by :data:`BIN_SHARES` (bins above a model's op count get nothing).
    """

    assert BUFFER_COLUMN == NUM_FEATURES - 1, "shards drop the buffer column, the last one"
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
    for role, refs in (("train", train), ("unseen", unseen)):
        for name, source, zoo_file in refs:
            g = _load_graph(source, name)
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
                              int(bytes_per_element), FEATURE_VERSION,
                              (*_CUT_RANGES[i], _POOL_FACTOR, _MAX_STALE, _MAX_PARTITIONS))
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
        "feature_version": FEATURE_VERSION,
        "format_version": FORMAT_VERSION,
    }
    return GenerationPlan(Path(out_dir), params, infos, shards)


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
        "feature_names": list(FEATURE_NAMES[:-1]),
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
    processes: int = DEFAULT_PROCESSES,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Generate (or finish) a dataset in ``out_dir``; returns its manifest.

    ``groups`` is the target over the training models (``models``, default the zoo's
    training networks), ``unseen_groups`` over the held-out ones (default ResNet-50,
    ResNet-152, DeepLabV3+MBv3). Shards already on disk with the expected spec are kept, so
    an interrupted run resumes where it stopped; a directory holding a dataset with other
    parameters is an error unless ``overwrite`` (which deletes its shards). ``processes``
    workers (spawned) build shards in parallel; the bytes do not depend on it.
    ``progress(done, total)`` is called with group quotas of finished shards (a shard that
    saturates below its quota still counts its whole quota, so the bar ends at ``total``).
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ConfigError(f"processes must be a whole number >= 1, got {processes!r}")
    started = time.perf_counter()
    plan = plan_generation(
        out_dir, seed=seed, groups=groups, unseen_groups=unseen_groups, models=models,
        unseen_models=unseen_models, buffers_kb=buffers_kb, schemes=schemes,
        bytes_per_element=bytes_per_element,
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

    def finished(entry: dict) -> None:
        nonlocal done
        entries[entry["file"]] = entry
        done += quota[entry["file"]]
        write_text_atomic(root / MANIFEST, _json(_manifest(plan, entries, complete=False)))
        if progress is not None:
            progress(done, total)

    # Largest models first and one model's shards together (each worker caches one model).
    order = {m.name: (-m.nodes, i) for i, m in enumerate(plan.models)}
    todo.sort(key=lambda s: (order[s.model], -s.quota))
    if processes == 1 or len(todo) <= 1:
        for spec in todo:
            finished(build_shard(spec, root))
    else:
        _run_parallel(todo, root, processes, finished)
    elapsed = time.perf_counter() - started
    manifest = _manifest(
        plan, entries, complete=True,
        generated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        generation_seconds=round(elapsed, 2),
        shards_built=len(todo),
        processes=processes,
    )  # fmt: skip
    write_text_atomic(root / MANIFEST, _json(manifest))
    return manifest


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=False) + "\n"


def _read_manifest_raw(root: Path) -> dict | None:
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path} is not valid JSON ({exc.msg}); {_regenerate_hint(root)}"
        ) from None


# ----------------------------------------------------------------------------- reading
def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a complete dataset of this format version; DatasetError otherwise."""
    root = Path(path)
    m = _read_manifest_raw(root)
    if m is None:
        raise DatasetError(f"no dataset at {root} (no {MANIFEST}); {_regenerate_hint(root)}")
    if m.get("format") != FORMAT_NAME:
        raise DatasetError(f"{root} is not a fusionplan group dataset")
    if m.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"{root} has format version {m.get('format_version')}, this fusionplan reads "
            f"{FORMAT_VERSION}; {_regenerate_hint(root)}"
        )
    if not m.get("complete"):
        raise DatasetError(f"dataset at {root} is incomplete; {_regenerate_hint(root)}")
    return m


@dataclass
class GroupDataset:
    """A loaded dataset: every group of every shard, concatenated in manifest order.

    Group ``i`` has nodes ``x[node_ptr[i]:node_ptr[i+1]]`` (features without the buffer
    column), local edges ``edge_index[:, edge_ptr[i]:edge_ptr[i+1]]``, model
    ``models[model_index[i]]`` and bitmask ``int(mask[i], 16)``. ``labels[scheme]`` holds
    ``buffer`` (F_beta bytes), ``dram`` (F_D bytes) and ``valid`` arrays of shape
    (groups, len(buffers)).
    """

    root: Path
    manifest: dict[str, Any]
    models: list[str]
    roles: list[str]
    model_index: np.ndarray  # (G,) int32
    mask: np.ndarray  # (G,) str hex
    node_ptr: np.ndarray  # (G+1,) int64
    edge_ptr: np.ndarray  # (G+1,) int64
    x: np.ndarray  # (N, F-1) float32
    node_id: np.ndarray  # (N,) int32
    edge_index: np.ndarray  # (2, E) int64, local to each group
    buffers: np.ndarray  # (B,) int64 bytes
    labels: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.mask)

    @property
    def schemes(self) -> list[str]:
        return list(self.labels)

    @property
    def content_sha256(self) -> str:
        return self.manifest["content_sha256"]

    @cached_property
    def role_of_group(self) -> np.ndarray:
        return np.array(self.roles, dtype=np.str_)[self.model_index]

    def group_mask(self, i: int) -> int:
        return int(self.mask[i], 16)

    def group_arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(x without buffer column, local edge_index) of group ``i``."""
        a, b = self.node_ptr[i], self.node_ptr[i + 1]
        c, d = self.edge_ptr[i], self.edge_ptr[i + 1]
        return self.x[a:b], self.edge_index[:, c:d]

    def features(self, i: int, buffer_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, edge_index) of group ``i`` exactly as
        ``with_buffer(group_features(...)[0], buffer_bytes)`` would give them."""

        x, ei = self.group_arrays(i)
        full = np.concatenate([x, np.zeros((x.shape[0], 1), np.float32)], axis=1)
        return with_buffer(full, int(buffer_bytes)), ei

    def indices(self, role: str) -> np.ndarray:
        """Group indices of models with ``role`` ("train" or "unseen")."""
        return np.flatnonzero(self.role_of_group == role)

    def split(self, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
              ) -> dict[str, np.ndarray]:  # fmt: skip
        """Deterministic train/val/test split **by group** of the training models' groups
        (all buffer sizes of a group land in the same part), plus ``unseen``: every group
        of the held-out models. Sizes are floor(0.8 G), floor(0.1 G), the rest."""
        idx = self.indices("train")
        perm = idx[np.random.default_rng(seed).permutation(len(idx))]
        n_train = math.floor(fractions[0] * len(idx))
        n_val = math.floor(fractions[1] * len(idx))
        return {
            "train": np.sort(perm[:n_train]),
            "val": np.sort(perm[n_train : n_train + n_val]),
            "test": np.sort(perm[n_train + n_val :]),
            "unseen": self.indices("unseen"),
        }


def load_dataset(path: str | os.PathLike, *, verify: bool = True) -> GroupDataset:
    """Read a complete dataset; with ``verify``, check every shard's sha256 first."""
    root = Path(path)
    m = read_manifest(root)
    models = [mi["name"] for mi in m["models"]]
    roles = [mi["role"] for mi in m["models"]]
    schemes = m["schemes"]
    parts: dict[str, list[np.ndarray]] = {}
    model_index: list[np.ndarray] = []
    node_off = edge_off = 0
    for s in m["shards"]:
        path_s = root / s["file"]
        if not path_s.is_file():
            raise DatasetError(f"shard {path_s} is missing; {_regenerate_hint(root)}")
        if verify and file_sha256(path_s) != s["sha256"]:
            raise DatasetError(
                f"shard {path_s} does not match its sha256; {_regenerate_hint(root)}"
            )
        try:
            a = read_npz(path_s)
        except Exception as exc:
            raise DatasetError(
                f"cannot read shard {path_s} ({exc}); {_regenerate_hint(root)}"
            ) from None
        g = len(a["mask"])
        model_index.append(np.full(g, models.index(s["model"]), np.int32))
        parts.setdefault("mask", []).append(a["mask"])
        parts.setdefault("node_ptr", []).append(a["node_ptr"][:-1] + node_off)
        parts.setdefault("edge_ptr", []).append(a["edge_ptr"][:-1] + edge_off)
        node_off += int(a["node_ptr"][-1])
        edge_off += int(a["edge_ptr"][-1])
        for k in ("x", "node_id"):
            parts.setdefault(k, []).append(a[k])
        parts.setdefault("edge_index", []).append(a["edge_index"].astype(np.int64))
        for sc in schemes:
            for k in ("buffer", "dram", "valid"):
                parts.setdefault(f"{sc}_{k}", []).append(a[f"{sc}_{k}"])
    nb = len(m["buffers_kb"])
    width = len(m["feature_names"])

    def cat(k: str, empty: np.ndarray, axis: int = 0) -> np.ndarray:
        return np.concatenate(parts[k], axis=axis) if parts.get(k) else empty

    return GroupDataset(
        root=root,
        manifest=m,
        models=models,
        roles=roles,
        model_index=np.concatenate(model_index) if model_index else np.zeros(0, np.int32),
        mask=cat("mask", np.zeros(0, "<U1")),
        node_ptr=np.append(cat("node_ptr", np.zeros(0, np.int64)), node_off).astype(np.int64),
        edge_ptr=np.append(cat("edge_ptr", np.zeros(0, np.int64)), edge_off).astype(np.int64),
        x=cat("x", np.zeros((0, width), np.float32)),
        node_id=cat("node_id", np.zeros(0, np.int32)),
        edge_index=cat("edge_index", np.zeros((2, 0), np.int64), axis=1),
        buffers=np.array([kb * 1024 for kb in m["buffers_kb"]], np.int64),
        labels={
            sc: {k: cat(f"{sc}_{k}", np.zeros((0, nb))) for k in ("buffer", "dram", "valid")}
            for sc in schemes
        },
    )  # fmt: skip
