"""A layered (Sugiyama-style) top-to-bottom layout of a DAG, in pure Python.

Why here and not Graphviz: a report must not need a system binary, and op graphs are easy
DAGs (hundreds of ops, mostly narrow), which four classic steps lay out well in well under a
second (docs/design.md, "Plan reports"):

1. **Layers** by longest path from the sources, so every edge points downward.
2. **Dummy nodes** split an edge that spans several layers into one-layer segments, so
   long edges (residuals, squeeze-excite skips) take part in ordering and get a route.
3. **Ordering** by barycentric sweeps (down, then up), keeping the order with the fewest
   crossings counted exactly (inversions between adjacent layers).
4. **Coordinates**: each layer's nodes move towards the mean x of their neighbours, the best
   such placement under minimum separations found exactly by isotonic regression (pool
   adjacent violators); sweeps alternate direction.

Everything is deterministic: ties keep the previous order, so a graph always gets the same
picture.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

NODE_W, NODE_H = 150.0, 30.0  # a real node's box
DUMMY_W = 14.0  # the room an edge passing through a layer takes
GAP = 18.0  # horizontal space between neighbouring boxes
LAYER_GAP = 56.0  # vertical distance between layer centres
MARGIN = 20.0
ORDER_SWEEPS = 12
PLACE_SWEEPS = 8


@dataclass(frozen=True)
class Layout:
    """Node centres (real nodes ``0..n-1``) and one polyline per input edge."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    layer: tuple[int, ...]
    edges: tuple[tuple[int, int, tuple[tuple[float, float], ...]], ...]
    width: float
    height: float
    crossings: int


def layered_layout(n: int, edges: Sequence[tuple[int, int]]) -> Layout:
    """Lay out nodes ``0..n-1`` (labels topological: every edge ``(u, v)`` has ``u < v``)."""
    pairs = sorted(set(edges))
    if any(u >= v for u, v in pairs):
        raise ValueError("layered_layout needs topological labels (u < v on every edge)")
    layer = longest_path_layers(n, pairs)
    up, down, chains = _split_long_edges(n, pairs, layer)
    rank = layer + [layer[u] + k for u, v in pairs for k in range(1, layer[v] - layer[u])]
    layers = _initial_order(len(rank), rank, down)
    layers, crossings = _order(layers, up, down)
    width = [NODE_W if v < n else DUMMY_W for v in range(len(rank))]
    x = _place(layers, up, down, width)
    left = min((x[v] - width[v] / 2 for v in range(len(rank))), default=0.0)
    x = [xv - left + MARGIN for xv in x]
    y = [MARGIN + NODE_H / 2 + r * LAYER_GAP for r in rank]
    routes = tuple(
        (u, v, tuple((round(x[w], 1), round(y[w], 1)) for w in (u, *chains[u, v], v)))
        for u, v in pairs
    )
    right = max((x[v] + width[v] / 2 for v in range(len(rank))), default=0.0)
    return Layout(
        x=tuple(round(x[v], 1) for v in range(n)),
        y=tuple(round(y[v], 1) for v in range(n)),
        layer=tuple(layer),
        edges=routes,
        width=round(right + MARGIN, 1),
        height=round(MARGIN * 2 + NODE_H + max(rank, default=0) * LAYER_GAP, 1),
        crossings=crossings,
    )


def longest_path_layers(n: int, edges: Sequence[tuple[int, int]]) -> list[int]:
    """Layer of each node: the length of the longest path reaching it from a source."""
    layer = [0] * n
    for u, v in sorted(edges, key=lambda e: e[1]):  # labels are topological
        layer[v] = max(layer[v], layer[u] + 1)
    return layer


def _split_long_edges(
    n: int, edges: Sequence[tuple[int, int]], layer: Sequence[int]
) -> tuple[list[list[int]], list[list[int]], dict[tuple[int, int], tuple[int, ...]]]:
    """Neighbour lists (up, down) over real and dummy nodes, and each edge's dummy chain."""
    span = sum(max(layer[v] - layer[u] - 1, 0) for u, v in edges)
    up: list[list[int]] = [[] for _ in range(n + span)]
    down: list[list[int]] = [[] for _ in range(n + span)]
    chains: dict[tuple[int, int], tuple[int, ...]] = {}
    fresh = n
    for u, v in edges:
        chain = tuple(range(fresh, fresh + layer[v] - layer[u] - 1))
        fresh += len(chain)
        chains[u, v] = chain
        path = (u, *chain, v)
        for a, b in itertools.pairwise(path):
            down[a].append(b)
            up[b].append(a)
    return up, down, chains


def _initial_order(count: int, rank: Sequence[int], down: Sequence[list[int]]) -> list[list[int]]:
    """Each layer ordered by a depth-first visit from the sources, so a branch's nodes start
    next to each other."""
    seen = [False] * count
    visit: list[int] = []
    has_parent = [False] * count
    for v in range(count):
        for w in down[v]:
            has_parent[w] = True
    for root in range(count):
        if seen[root] or has_parent[root]:
            continue
        stack = [root]
        while stack:
            v = stack.pop()
            if seen[v]:
                continue
            seen[v] = True
            visit.append(v)
            stack.extend(reversed(down[v]))
    layers: list[list[int]] = [[] for _ in range(max(rank, default=-1) + 1)]
    for v in visit:
        layers[rank[v]].append(v)
    return layers


def _order(
    layers: list[list[int]], up: Sequence[list[int]], down: Sequence[list[int]]
) -> tuple[list[list[int]], int]:
    """Barycentric sweeps; the order with the fewest crossings seen wins."""
    best = [list(lay) for lay in layers]
    best_count = count_crossings(best, down)
    current = [list(lay) for lay in layers]
    for _ in range(ORDER_SWEEPS):
        before = [list(lay) for lay in current]
        for i in range(1, len(current)):
            current[i] = _by_barycentre(current[i], current[i - 1], up)
        for i in range(len(current) - 2, -1, -1):
            current[i] = _by_barycentre(current[i], current[i + 1], down)
        count = count_crossings(current, down)
        if count < best_count:
            best, best_count = [list(lay) for lay in current], count
        if current == before:
            break  # a fixed point: further sweeps repeat it
    return best, best_count


def _by_barycentre(row: list[int], fixed: list[int], nbrs: Sequence[list[int]]) -> list[int]:
    """``row`` sorted by the mean position of each node's neighbours in ``fixed``; a node
    without neighbours there keeps its place (ties keep the current order)."""
    pos = {v: i for i, v in enumerate(fixed)}
    keys = []
    for i, v in enumerate(row):
        ps = [pos[w] for w in nbrs[v]]
        scale = (len(fixed) / max(len(row), 1)) if not ps else 1.0
        keys.append((sum(ps) / len(ps) if ps else i * scale, i))
    return [row[i] for _, i in sorted(keys)]


def count_crossings(layers: Sequence[Sequence[int]], down: Sequence[list[int]]) -> int:
    """Edge crossings between adjacent layers: inversions of the lower ends, counted with a
    Fenwick tree (edges sharing an end do not cross)."""
    total = 0
    for upper, lower in itertools.pairwise(layers):
        pos = {v: i for i, v in enumerate(lower)}
        ends = sorted((i, pos[w]) for i, v in enumerate(upper) for w in down[v] if w in pos)
        tree = [0] * (len(lower) + 1)
        seen = 0
        start = 0
        while start < len(ends):  # edges from one upper node do not cross each other
            stop = start
            while stop < len(ends) and ends[stop][0] == ends[start][0]:
                stop += 1
            for _, p in ends[start:stop]:
                total += seen - _prefix(tree, p + 1)  # earlier edges ending right of p
            for _, p in ends[start:stop]:
                _add(tree, p + 1)
                seen += 1
            start = stop
    return total


def _prefix(tree: list[int], i: int) -> int:
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & -i
    return s


def _add(tree: list[int], i: int) -> None:
    while i < len(tree):
        tree[i] += 1
        i += i & -i


def _place(
    layers: Sequence[list[int]],
    up: Sequence[list[int]],
    down: Sequence[list[int]],
    width: Sequence[float],
) -> list[float]:
    """x of every node: packed first, then pulled towards its neighbours, layer by layer."""
    x = [0.0] * len(width)
    offsets = [separations([width[v] for v in row]) for row in layers]
    for row, offset in zip(layers, offsets, strict=True):
        for v, o in zip(row, offset, strict=True):
            x[v] = o + width[row[0]] / 2
    for sweep in range(PLACE_SWEEPS):
        order = range(1, len(layers)) if sweep % 2 == 0 else range(len(layers) - 2, -1, -1)
        nbrs = up if sweep % 2 == 0 else down
        for i in order:
            row = layers[i]
            want = [sum(x[w] for w in nbrs[v]) / len(nbrs[v]) if nbrs[v] else x[v] for v in row]
            for v, xv in zip(row, _fit(want, offsets[i]), strict=True):
                x[v] = xv
    return x


def separations(width: Sequence[float]) -> list[float]:
    """The least distance of each box's centre from the first's: half widths and a GAP."""
    offset, acc = [], 0.0
    for i, w in enumerate(width):
        if i:
            acc += (width[i - 1] + w) / 2 + GAP
        offset.append(acc)
    return offset


def _fit(want: Sequence[float], offset: Sequence[float]) -> list[float]:
    """The positions closest to ``want`` (least squares) that keep the boxes in order and at
    least ``offset`` apart (:func:`separations`): isotonic regression on ``want - offset``
    (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for target in (w - o for w, o in zip(want, offset, strict=True)):
        blocks.append([target, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, count = blocks.pop()
            prev = blocks[-1]
            prev[0] = (prev[0] * prev[1] + mean * count) / (prev[1] + count)
            prev[1] += count
    out: list[float] = []
    for mean, count in blocks:
        out.extend([mean] * int(count))
    return [y + o for y, o in zip(out, offset, strict=True)]
