"""Synthetic ONNX models the torchvision zoo lacks, for the graph-substitution bench.

* :func:`resnet_block_stack`: OCGGS's synthetic benchmark, ``n`` ResNet basic blocks
  (3x3 conv, Relu, 3x3 conv, residual Add, Relu) in a chain.
* :func:`bert_encoder`: a BERT-like Transformer encoder written with the primitive ops an
  exporter emits (MatMul + bias Add per projection, heads by Reshape/Transpose, Softmax,
  LayerNormalization, Erf-based GELU), so the three Q/K/V projections that read the same
  input are visible to the substitution rules, as in TASO's BERT experiment.
* :func:`randwire`: one RandWire stage (Xie et al. 2019) on a seeded Watts-Strogatz graph,
  each node a Relu / depthwise 3x3 / pointwise 1x1 unit summing its inputs; a branchy
  graph with many independent operators for the stream-scheduling bench (Nimble / IOS
  style), which the chain-like zoo models lack.
* :func:`nasnet_cells`: a stack of NASNet-A normal cells (Zoph et al. 2018), five parallel
  two-branch blocks per cell; the multi-branch cell structure IOS schedules, also for the
  stream-scheduling bench, which the zoo lacks.

``randwire_large`` and ``nasnet_large`` are the same graphs at 128 channels and 56x56 (8-16x
the work per op). Weights are seeded random (no download); shapes are static, batch 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def weight(self, *shape: int, scale: float | None = None) -> str:
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else 1 / math.sqrt(fan_in)
        name = self.name("w")
        array = (self.rng.standard_normal(shape) * std).astype(np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, array: np.ndarray) -> str:
        name = self.name("c")
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, *inputs: str, **attrs) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def model(
        self, name: str, inputs: dict[str, tuple[int, ...]], output: str, shape
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            name,
            [
                helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                for n, s in inputs.items()
            ],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(shape))],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def resnet_block_stack(
    blocks: int, channels: int = 64, size: int = 56, seed: int = 0
) -> onnx.ModelProto:
    """``blocks`` ResNet basic blocks on a (1, channels, size, size) input."""
    b = _Builder(seed)
    x = "x"
    for _ in range(blocks):
        h = b.op(
            "Conv",
            x,
            b.weight(channels, channels, 3, 3),
            b.weight(channels, scale=0.1),
            pads=[1, 1, 1, 1],
        )
        h = b.op("Relu", h)
        h = b.op(
            "Conv",
            h,
            b.weight(channels, channels, 3, 3),
            b.weight(channels, scale=0.1),
            pads=[1, 1, 1, 1],
        )
        x = b.op("Relu", b.op("Add", h, x))
    return b.model(
        f"resnet_stack_{blocks}", {"x": (1, channels, size, size)}, x, (1, channels, size, size)
    )


def bert_encoder(
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    seq: int = 128,
    ffn: int = 1024,
    seed: int = 0,
) -> onnx.ModelProto:
    """A BERT-like encoder on a (seq, hidden) input (batch 1, so tokens are rows)."""
    b = _Builder(seed)
    d = hidden // heads
    x = "x"

    def linear(t: str, n_in: int, n_out: int) -> str:
        return b.op("Add", b.op("MatMul", t, b.weight(n_in, n_out)), b.weight(n_out, scale=0.02))

    def layer_norm(t: str) -> str:
        scale = b.const(np.ones(hidden, dtype=np.float32))
        bias = b.const(np.zeros(hidden, dtype=np.float32))
        return b.op("LayerNormalization", t, scale, bias, axis=-1, epsilon=1e-5)

    heads_shape = b.const(np.array([seq, heads, d], dtype=np.int64))
    flat_shape = b.const(np.array([seq, hidden], dtype=np.int64))
    inv_sqrt = b.const(np.array(1 / math.sqrt(d), dtype=np.float32))
    half = b.const(np.array(0.5, dtype=np.float32))
    one = b.const(np.array(1.0, dtype=np.float32))
    root2 = b.const(np.array(math.sqrt(2.0), dtype=np.float32))
    for _ in range(layers):
        q, k, v = (linear(x, hidden, hidden) for _ in range(3))
        q = b.op("Transpose", b.op("Reshape", q, heads_shape), perm=[1, 0, 2])
        k = b.op("Transpose", b.op("Reshape", k, heads_shape), perm=[1, 2, 0])
        v = b.op("Transpose", b.op("Reshape", v, heads_shape), perm=[1, 0, 2])
        scores = b.op("Softmax", b.op("Mul", b.op("MatMul", q, k), inv_sqrt), axis=-1)
        context = b.op("Transpose", b.op("MatMul", scores, v), perm=[1, 0, 2])
        attended = linear(b.op("Reshape", context, flat_shape), hidden, hidden)
        x = layer_norm(b.op("Add", attended, x))
        h = linear(x, hidden, ffn)
        gelu = b.op(
            "Mul", b.op("Mul", h, half), b.op("Add", b.op("Erf", b.op("Div", h, root2)), one)
        )
        x = layer_norm(b.op("Add", linear(gelu, ffn, hidden), x))
    return b.model(f"bert_{layers}x{hidden}", {"x": (seq, hidden)}, x, (seq, hidden))


def watts_strogatz_dag(
    nodes: int, k: int, p: float, seed: int | np.random.Generator = 0
) -> list[tuple[int, int]]:
    """The edges of a Watts-Strogatz graph WS(nodes, k, p), each oriented low -> high.

    A ring lattice joins every node to its ``k // 2`` nearest neighbours on each side; then,
    one lattice offset at a time, each edge ``(u, u + j)`` is rewired with probability ``p``
    to ``(u, w)`` for a uniformly random ``w`` that is neither ``u`` nor already joined to it.
    Orienting every edge from the lower to the higher index makes the graph a DAG. Returns
    the sorted edge list.
    """
    if k % 2 or not 0 < k < nodes:
        raise ValueError(f"watts_strogatz_dag: need an even k with 0 < k < nodes, got {k}")
    rng = np.random.default_rng(seed)
    adj: list[set[int]] = [set() for _ in range(nodes)]
    for u in range(nodes):
        for j in range(1, k // 2 + 1):
            v = (u + j) % nodes
            adj[u].add(v)
            adj[v].add(u)
    for j in range(1, k // 2 + 1):
        for u in range(nodes):
            if rng.random() >= p:
                continue
            v = (u + j) % nodes
            free = [w for w in range(nodes) if w != u and w not in adj[u]]
            if not free:
                continue
            w = free[int(rng.integers(len(free)))]
            adj[u].discard(v)
            adj[v].discard(u)
            adj[u].add(w)
            adj[w].add(u)
    return sorted((u, v) for u in range(nodes) for v in adj[u] if u < v)


def randwire(
    nodes: int = 32,
    k: int = 4,
    p: float = 0.75,
    channels: int = 64,
    size: int = 28,
    seed: int = 0,
) -> onnx.ModelProto:
    """One RandWire stage on a WS(nodes, k, p) DAG, (1, channels, size, size) in and out.

    A node sums its inputs (the stage input when it has none), then applies Relu, a
    depthwise 3x3 conv and a pointwise 1x1 conv; the stage output is the mean of the nodes
    without successors.
    """
    b = _Builder(seed)
    edges = watts_strogatz_dag(nodes, k, p, b.rng)
    preds: list[list[int]] = [[] for _ in range(nodes)]
    has_succ = [False] * nodes
    for u, v in edges:
        preds[v].append(u)
        has_succ[u] = True
    outs: list[str] = []
    for i in range(nodes):
        ins = [outs[u] for u in preds[i]] or ["x"]
        h = ins[0]
        for t in ins[1:]:
            h = b.op("Add", h, t)
        h = b.op("Relu", h)
        h = b.op("Conv", h, b.weight(channels, 1, 3, 3), group=channels, pads=[1, 1, 1, 1])
        h = b.op("Conv", h, b.weight(channels, channels, 1, 1), b.weight(channels, scale=0.1))
        outs.append(h)
    sinks = [outs[i] for i in range(nodes) if not has_succ[i]]
    y = sinks[0]
    for t in sinks[1:]:
        y = b.op("Add", y, t)
    y = b.op("Mul", y, b.const(np.array(1 / len(sinks), dtype=np.float32)))
    shape = (1, channels, size, size)
    return b.model(f"randwire_{nodes}_k{k}_p{p}", {"x": shape}, y, shape)


def nasnet_cells(
    cells: int = 4, channels: int = 64, size: int = 28, seed: int = 0
) -> onnx.ModelProto:
    """``cells`` NASNet-A normal cells on a (1, channels, size, size) input.

    Each cell reads the two previous cell outputs ``h_prev`` and ``h`` (the input for both
    in the first cell), sums two ops per block over five blocks, concatenates the blocks
    and reduces them back to ``channels`` with a 1x1 conv.
    """
    b = _Builder(seed)

    def sep(t: str, kernel: int) -> str:
        pad = kernel // 2
        t = b.op("Relu", t)
        t = b.op(
            "Conv",
            t,
            b.weight(channels, 1, kernel, kernel),
            group=channels,
            pads=[pad, pad, pad, pad],
        )
        return b.op("Conv", t, b.weight(channels, channels, 1, 1), b.weight(channels, scale=0.1))

    def avg(t: str) -> str:
        return b.op(
            "AveragePool",
            t,
            kernel_shape=[3, 3],
            strides=[1, 1],
            pads=[1, 1, 1, 1],
            count_include_pad=0,
        )

    h_prev = h = "x"
    for _ in range(cells):
        blocks = [
            b.op("Add", sep(h, 3), h),
            b.op("Add", sep(h_prev, 3), sep(h, 5)),
            b.op("Add", avg(h), h_prev),
            b.op("Add", avg(h_prev), avg(h_prev)),
            b.op("Add", sep(h_prev, 5), sep(h_prev, 3)),
        ]
        cat = b.op("Concat", *blocks, axis=1)
        out = b.op(
            "Conv", cat, b.weight(channels, 5 * channels, 1, 1), b.weight(channels, scale=0.1)
        )
        h_prev, h = h, out
    shape = (1, channels, size, size)
    return b.model(f"nasnet_{cells}cells", {"x": shape}, h, shape)


RANDWIRE_BENCHMARK = ((32, (0, 1, 2)), (64, (0, 1, 2)), (128, (0, 1)))
"""(nodes, seeds) of the RandWire stages ``bench certified`` plans: WS(n, 4, 0.75), the
paper's setting, each seed a different wiring (and weights)."""
NASNET_BENCHMARK = (3, 6)
"""Cell counts of the NASNet-A stacks ``bench certified`` plans (the cell's wiring is fixed;
a seed would only change the weights, which the planner does not read)."""


def certified_graphs() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Name -> builder of the branchy graphs ``bench certified`` proves plans on beside the
    zoo: random-wired stages and cell stacks, whose down-sets multiply with their width."""
    out: dict[str, Callable[[], onnx.ModelProto]] = {}
    for nodes, seeds in RANDWIRE_BENCHMARK:
        for seed in seeds:
            out[f"randwire-n{nodes}-s{seed}"] = lambda n=nodes, s=seed: randwire(n, seed=s)
    for cells in NASNET_BENCHMARK:
        out[f"nasnet-c{cells}"] = lambda c=cells: nasnet_cells(c)
    return out


SYNTHETIC: dict[str, Callable[[], onnx.ModelProto]] = {
    "bert_encoder": bert_encoder,
    "randwire": randwire,
    "nasnet": nasnet_cells,
    # the same graphs with 8-16x the work per op: where CPU threads per stream start to pay
    "randwire_large": lambda: randwire(channels=128, size=56),
    "nasnet_large": lambda: nasnet_cells(channels=128, size=56),
    **{f"resnet_stack{n}": (lambda n=n: resnet_block_stack(n)) for n in (2, 4, 6, 8)},
    **certified_graphs(),
}
"""Name -> builder of the synthetic models the bench uses."""
