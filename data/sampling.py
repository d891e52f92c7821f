"""Sampling and labelling of fusion groups: one shard's groups and their arrays.

A *group* is a fusion group of one zoo model, sampled the way a search proposes it: a
random edge-cut partition of the model's fusable nodes, made structurally sound
(:func:`fusionplan.ir.partition.make_sound`: connected, acyclic quotient) but **not** split
when invalid, so the dataset holds both valid and invalid groups. Each group is labelled
with the cost model under every scheme (LBDF, BRR) at every buffer size (128 ... 2048 KB):
``F_beta`` (bytes), ``F_D`` (bytes) and validity. A *sample* is (group, buffer) for one
scheme: 5 samples per group per scheme.

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

import math
import os
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from accel_model import Accelerator, make_cost_model, unfusable_nodes
from fusionplan.data.features import batch_features, node_feature_table
from fusionplan.data.shards import DatasetError, ShardSpec, graph_fingerprint
from fusionplan.data.synthetic import SYNTHETIC
from fusionplan.data.zoo import load_zoo_model, zoo_variant_path
from fusionplan.ir.graph import OpGraph, bits
from fusionplan.ir.onnx_import import graph_from_proto, load_model
from fusionplan.ir.partition import groups_from_cut_edges, make_sound

_POOL_FACTOR = 2  # candidate pool = quota * this, then a uniform draw of quota from it
_MAX_STALE = 60  # partitions in a row without a new group in the bin -> saturated
_MAX_PARTITIONS = 4000


class ModelContext:
    """Per-process cache of what sampling one model needs (graph, features, cost models)."""

    def __init__(
        self, graph, buffers: Sequence[int], schemes: Sequence[str], b: int, profile: str
    ) -> None:
        self.graph = graph
        self.table = node_feature_table(graph)
        self.models = {
            (s, beta): make_cost_model(graph, Accelerator.of(beta, s, b, profile=profile))
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


_CONTEXTS: dict[tuple, ModelContext] = {}


SYNTHETIC_SOURCE = "synthetic:"  # a source naming a graph built in place (data/synthetic.py)


def _load_graph(source: str, name: str):
    if source.startswith(SYNTHETIC_SOURCE):
        return graph_from_proto(SYNTHETIC[source.removeprefix(SYNTHETIC_SOURCE)](), name=name)
    if os.path.isabs(source):
        return load_model(source, name=name)
    base, sep, size = source.partition("@")
    if sep:
        return load_model(zoo_variant_path(base, int(size)), name=source)
    return load_zoo_model(source)


def model_context(spec: ShardSpec, graph: OpGraph | None = None) -> ModelContext:
    """The spec's model, ready to sample (cached per process); ``graph`` if the caller has it,
    else loaded from ``spec.source``."""
    key = (
        spec.model,
        spec.graph_sha256,
        spec.buffers,
        spec.schemes,
        spec.bytes_per_element,
        spec.profile,
    )
    ctx = _CONTEXTS.get(key)
    if ctx is None:
        graph = graph if graph is not None else _load_graph(spec.source, spec.model)
        if graph_fingerprint(graph) != spec.graph_sha256:
            raise DatasetError(f"model {spec.model} changed while the dataset was generated")
        _CONTEXTS.clear()  # one model at a time per process keeps memory flat
        ctx = _CONTEXTS[key] = ModelContext(
            graph, spec.buffers, spec.schemes, spec.bytes_per_element, spec.profile
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


def sample_groups(ctx: ModelContext, spec: ShardSpec) -> tuple[list[int], dict[str, int]]:
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


def label_groups(ctx: ModelContext, spec: ShardSpec, groups: Sequence[int]) -> dict[str, Any]:
    """The shard's arrays (see docs/dataset.md) for ``groups`` of the context's model."""
    nb = len(spec.buffers)
    labels = {
        s: (np.zeros((len(groups), nb), np.int64), np.zeros((len(groups), nb), np.int64),
            np.zeros((len(groups), nb), np.bool_))
        for s in spec.schemes
    }  # fmt: skip
    # one batch for the shard's features: the groups one after the other, as stored
    x, edge_index, owner = batch_features(ctx.graph, ctx.table, list(groups))
    node_ptr = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=len(groups)))])
    edge_owner = owner[edge_index[1]]
    edge_ptr = np.concatenate([[0], np.cumsum(np.bincount(edge_owner, minlength=len(groups)))])
    ids = [v for g in groups for v in bits(g)]
    for gi, g in enumerate(groups):
        for s in spec.schemes:
            fb, fd, ok = labels[s]
            for bi, beta in enumerate(spec.buffers):
                c = ctx.models[(s, beta)].cost(g)
                fb[gi, bi], fd[gi, bi], ok[gi, bi] = c.buffer, c.dram, c.valid
    arrays: dict[str, Any] = {
        "mask": np.array([format(g, "x") for g in groups], dtype=np.str_)
        if groups
        else np.zeros(0, dtype="<U1"),
        "node_ptr": np.array(node_ptr, np.int64),
        "edge_ptr": np.array(edge_ptr, np.int64),
        "x": x.astype(np.float32),
        "node_id": np.array(ids, np.int32),
        "edge_index": (edge_index - node_ptr[edge_owner]).astype(np.int32),
        "buffers": np.array(spec.buffers, np.int64),
    }
    for s in spec.schemes:
        fb, fd, ok = labels[s]
        arrays[f"{s}_buffer"], arrays[f"{s}_dram"], arrays[f"{s}_valid"] = fb, fd, ok
    return arrays
