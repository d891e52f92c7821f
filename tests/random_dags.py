"""Random small op graphs built directly with the IR (no ONNX), for search property tests.

:func:`random_dag` makes a connected DAG of convolutions (1x1 / 3x3 / 5x5, some strided,
some depthwise), pools, activations, elementwise joins (residual-style skips), concats and
global pools, with consistent (C, H, W) shapes and weights. :func:`small_buffer` picks a
buffer at which some single ops fit and some do not, and most multi-op groups are too big,
so searches exercise soundness repair, splitting and unfusable ops together.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from fusionplan.ir.graph import Node, OpGraph, Tensor


def random_dag(seed: int, n_nodes: int | None = None, max_nodes: int = 14) -> OpGraph:
    """A seeded random connected DAG of ``n_nodes`` compute ops (default 3..max_nodes)."""
    rng = random.Random(seed)
    n = n_nodes if n_nodes is not None else rng.randint(3, max_nodes)
    c0, h0 = rng.choice((2, 3, 4, 8)), rng.choice((8, 16))
    tensors: list[Tensor] = [Tensor("x", (c0, h0, h0), -1)]
    nodes: list[Node] = []
    consumed: set[int] = set()

    def new_tensor(shape: tuple[int, int, int], producer: int) -> int:
        tensors.append(Tensor(f"t{len(tensors)}", shape, producer))
        return len(tensors) - 1

    for i in range(n):
        # mostly the latest tensor (chains), sometimes an older one (branches / skips)
        recent = len(tensors) - 1
        a = recent if rng.random() < 0.5 else rng.randrange(max(0, len(tensors) - 4), len(tensors))
        c, h, w = tensors[a].shape
        same_hw = [t for t in range(len(tensors)) if t != a and tensors[t].shape[1:] == (h, w)]
        kind = rng.choices(
            ("conv", "dwconv", "pool", "act", "eltwise", "concat", "global_pool"),
            weights=(5, 1, 1, 2, 4 if same_hw else 0, 2 if same_hw else 0, 0.3 if h > 1 else 0),
        )[0]
        name = f"n{i}"
        if kind in ("conv", "dwconv"):
            k = rng.choice((1, 3, 3, 5))
            s = 2 if h >= 4 and rng.random() < 0.2 else 1
            cout = c if kind == "dwconv" else rng.choice((2, 4, 8, 16))
            groups = c if kind == "dwconv" else 1
            out = new_tensor((cout, -(-h // s), -(-w // s)), i)
            nodes.append(Node(name, "Conv", "conv", (a,), (out,), kernel=(k, k), stride=(s, s),
                              pads=(k // 2,) * 4, groups=groups,
                              weights=cout * (c // groups) * k * k + cout,
                              macs=cout * (c // groups) * k * k * h * w))  # fmt: skip
        elif kind == "pool":
            k, s = rng.choice(((2, 2), (3, 1), (3, 2))) if h >= 4 else (1, 1)
            out = new_tensor((c, max(1, h // s), max(1, w // s)), i)
            nodes.append(Node(name, "MaxPool", "pool", (a,), (out,), kernel=(k, k),
                              stride=(s, s)))  # fmt: skip
        elif kind == "act":
            out = new_tensor((c, h, w), i)
            nodes.append(Node(name, rng.choice(("Relu", "Sigmoid")), "act", (a,), (out,)))
        elif kind == "global_pool":
            out = new_tensor((c, 1, 1), i)
            nodes.append(Node(name, "GlobalAveragePool", "global_pool", (a,), (out,),
                              whole_input=True))  # fmt: skip
        else:
            b = rng.choice(same_hw)
            if kind == "eltwise":
                cb = tensors[b].shape[0]
                shape = (max(c, cb), h, w)
                op = "Add"
            else:
                shape = (c + tensors[b].shape[0], h, w)
                op = "Concat"
            out = new_tensor(shape, i)
            nodes.append(Node(name, op, kind, (a, b), (out,)))
        consumed.update(nodes[-1].inputs)

    produced = [t for t in range(1, len(tensors))]
    outputs = [t for t in produced if t not in consumed] or [produced[-1]]
    return OpGraph.build(f"random{seed}", nodes, tensors, [0], outputs)


def small_buffer(cost_model_class, graph: OpGraph, seed: int = 0,
                 quantile: float | None = None) -> int:  # fmt: skip
    """A buffer (bytes) between the smallest and the largest single-op requirement, so some
    ops are unfusable, most fit alone, and big groups do not fit."""
    from accel_model import Accelerator

    rng = random.Random(seed)
    probe = cost_model_class(graph, Accelerator(1 << 40, cost_model_class.name))
    needs = sorted(probe.cost(1 << v).buffer for v in range(len(graph)))
    q = quantile if quantile is not None else rng.uniform(0.75, 1.0)
    pick = needs[min(len(needs) - 1, int(q * len(needs)))]
    return max(1, int(pick * rng.uniform(1.0, 1.6)))


def _connected(graph: OpGraph, group: int) -> bool:
    nodes = [v for v in range(len(graph)) if group >> v & 1]
    adj = {v: set() for v in nodes}
    for e in graph.edges:
        if e.src in adj and e.dst in adj:
            adj[e.src].add(e.dst)
            adj[e.dst].add(e.src)
    seen, todo = {nodes[0]}, [nodes[0]]
    while todo:
        for w in adj[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return len(seen) == len(nodes)


def _acyclic(graph: OpGraph, groups: list[int]) -> bool:
    owner = {v: i for i, g in enumerate(groups) for v in range(len(graph)) if g >> v & 1}
    succ = {i: set() for i in range(len(groups))}
    for e in graph.edges:
        a, b = owner[e.src], owner[e.dst]
        if a != b:
            succ[a].add(b)
    state = dict.fromkeys(succ, 0)  # 0 new, 1 on the DFS path, 2 done

    def visit(a: int) -> bool:
        state[a] = 1
        for b in succ[a]:
            if state[b] == 1 or (state[b] == 0 and not visit(b)):
                return False
        state[a] = 2
        return True

    return all(state[a] or visit(a) for a in succ)


def valid_plans(cm) -> Iterator[tuple[int, ...]]:
    """Every valid plan of ``cm``'s graph (sorted groups, unfusable singletons included), by
    enumerating every set partition of the fusable ops: the block of the lowest unassigned
    op is any subset of the unassigned ops containing it; blocks that are not connected or
    do not fit are dropped (a valid plan has neither), the quotient is checked for cycles
    at the end. For graphs of a dozen ops (the brute-force references of the tests)."""
    graph = cm.graph
    n = len(graph)
    unfusable = [1 << v for v in range(n) if not cm.compute_uncached(1 << v).valid]
    fusable = [v for v in range(n) if not any(u >> v & 1 for u in unfusable)]
    block_ok: dict[int, bool] = {}

    def ok(block: int) -> bool:
        if block not in block_ok:
            block_ok[block] = _connected(graph, block) and cm.compute_uncached(block).valid
        return block_ok[block]

    def assign(rest: list[int], groups: list[int]) -> Iterator[tuple[int, ...]]:
        if not rest:
            plan = groups + unfusable
            if _acyclic(graph, plan):
                yield tuple(sorted(plan))
            return
        first, others = rest[0], rest[1:]
        for r in range(len(others) + 1):
            for extra in itertools.combinations(others, r):
                block = (1 << first) | sum(1 << v for v in extra)
                if ok(block):
                    yield from assign([v for v in others if v not in extra], [*groups, block])

    yield from assign(fusable, [])
