"""Optimus's price of a group, formula for formula (docs/cost-model.md, "The optimus profile").

The ``optimus`` profile's groups cost what Optimus (Cai et al., LCTES'21) reports for them,
its rounding and its slips included, so that its optima can be compared with Optimus's own.
The formulas are Optimus's; the code is fusionplan's. Three parts:

* :class:`OptimusView`: the graph as Optimus sees it: layers (dense convs and linear layers;
  every other op a *local* layer: pool, add, concat, depthwise conv), no activations (an
  activation belongs to the layer before it), inputs read without halo.
* :func:`fused_price`: a group of several layers, Optimus's inter-layer reuse: alternating
  full / sliced output channels chosen by its ratio, its rows per tile, its continuous
  refinement of rows and slices (the *tile solver*), and the DRAM its reporting counts.
* :func:`single_price`: a layer alone, Optimus's five loop blockings (solved continuously, or
  by its closed forms without the tile solver) and the DRAM of the cheapest by its energy.
* :meth:`OptimusPricing.energy`: the energy Optimus's cost model reports for a group: its
  accesses to each memory level (register files, global buffer, DRAM) times their energies,
  the PE array's network and the MACs, over the register-file blocking Optimus maps each
  conv's tile to.

The solvers are scipy's (SLSQP, COBYLA), as in Optimus; each problem is posed with the same
terms in the same order, so that the rounded results are Optimus's.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from accel_model.base import GroupCost
from accel_model.channels import ChannelRole, channel_role, is_activation
from fusionplan.ir.graph import Group, OpGraph, bits

DRAM_ENERGY = 200.0
"""Energy of one DRAM access in Optimus's arch files (pJ per element)."""
MAC_ENERGY = 1.0
"""Energy of one MAC: Optimus's cost model adds a group's MAC count to its energy as it is."""
HOP_ENERGY = 0.25
"""Energy of one access to a neighbouring PE's register file (its arch files' parallel cost)."""
PES = 1024
"""Processing elements: the arch files' parallelism at the register-file level (32 x 32)."""


def register_file(buffer_bytes: int) -> tuple[int, float]:
    """Bytes and pJ per access of one PE's register file: Optimus's arch files give 64 B at
    0.1 pJ with the 128 and 256 KB buffers, 32 B at 0.05 pJ with the 512 KB one (sizes below
    512 KB take the former, larger ones the latter)."""
    return (64, 0.1) if buffer_bytes < 512 * 1024 else (32, 0.05)


def glb_energy(buffer_bytes: int) -> float:
    """Energy of one global-buffer access: Optimus's arch files give 6, 9 and 12 at 128, 256
    and 512 KB, i.e. 3 log2(buffer / 32 KB); never below 3 (its value at 64 KB)."""
    return 3.0 * max(math.log2(buffer_bytes / 32768), 1.0)


@dataclass(frozen=True)
class Layer:
    """One Optimus layer: ``conv`` (weights, mixes channels) or local; sizes in elements."""

    conv: bool
    nofm: int
    hofm: int
    wofm: int
    hstd: int
    wstd: int
    hfil: int  # kernel (conv) or pooling region (local) height
    wfil: int
    nifm: int
    prevs: tuple[int, ...]  # layer ids; a graph input is -1 - tensor index
    nimg: int = 1  # images (a tile's blocking may hold several; a network layer has one)

    @property
    def size(self) -> int:
        return self.nofm * self.hofm * self.wofm * self.nimg

    @property
    def wifm(self) -> int:
        """Input width as Optimus sizes it: the window's span, no padding."""
        return self.wfil + (self.wofm - 1) * self.wstd

    @property
    def weights(self) -> int:
        return self.nifm * self.nofm * self.hfil * self.wfil if self.conv else 0

    @property
    def ifmap(self) -> int:
        """Optimus's input size: ``C_in (H_out S)(W_out S)``, no halo."""
        return self.nifm * (self.hofm * self.wofm * self.nimg * self.wstd * self.hstd)

    @property
    def ops(self) -> int:
        return self.size * (self.hfil * self.wfil * self.nifm)


@dataclass(frozen=True)
class Source:
    """A graph input as Optimus's input layer: channels, height, width."""

    nofm: int
    hofm: int
    wofm: int

    @property
    def size(self) -> int:
        return self.nofm * self.hofm * self.wofm


@dataclass(frozen=True)
class Price:
    """What Optimus reports for a fused group: ``dram`` elements ([ifmap, ofmap, filter] in
    ``split``), whether it fuses (``valid``: its minimum footprint fits), whether its
    weights are resident, its minimum footprint, ``need``: the elements its final,
    rounded tiles hold by its own buffer constraint (above the capacity: an overflow), and
    ``loops``: each conv's tile as Optimus's loop blocking, ``(layer, (d, r, c, w, h, k, b))``
    (filter width and height, input channels, columns, rows, output channels, images)."""

    valid: bool
    dram: int
    split: tuple[int, int, int]
    footprint: float
    need: float
    resident: bool
    tiles: int
    loops: tuple[tuple[int, tuple[int, ...]], ...] = ()


class OptimusView:
    """``graph`` as Optimus's network: a layer per op that is not an activation."""

    def __init__(self, graph: OpGraph, pe_unroll: int, buffer_bytes: int, b: int) -> None:
        self.graph = graph
        tensors = graph.tensors
        self.capacity = buffer_bytes / b  # Optimus's capacity in elements (a float)
        self.unroll = pe_unroll
        self.glb = glb_energy(buffer_bytes)
        # (layer, solver) -> single_blocking's answer: its solves take 0.1-0.4 s a layer
        self.blockings: dict[tuple[int, bool], tuple[list, list] | None] = {}
        owner: list[int] = []  # op -> the layer it belongs to
        self.layers: dict[int, Layer] = {}
        self.sources: dict[int, Source] = {}
        for v, node in enumerate(graph.nodes):
            ins = [self._producer(ti, owner) for ti in node.inputs]
            if is_activation(graph, v) and len(ins) == 1:
                owner.append(ins[0])
                continue
            owner.append(v)
            c_out, h_out, w_out = graph.out_shape(v)
            conv = channel_role(graph, v) == ChannelRole.MIXING and node.weights > 0
            kh, kw = node.kernel if node.kind in ("conv", "pool") else (1, 1)
            sh, sw = node.stride if node.kind in ("conv", "pool") else (1, 1)
            c_in = tensors[node.inputs[0]].shape[0] if node.inputs else c_out
            if node.kind == "matmul":  # a linear layer: a 1x1 conv on a 1x1 map
                kh = kw = sh = sw = 1
            self.layers[v] = Layer(
                conv, max(c_out, 1), max(h_out, 1), max(w_out, 1), sh, sw, kh, kw,
                c_in if conv else max(c_out, 1), tuple(dict.fromkeys(ins)),
            )  # fmt: skip
        self.owner = tuple(owner)
        nexts: dict[int, list[int]] = {v: [] for v in self.layers}
        for v, layer in self.layers.items():
            for p in layer.prevs:
                if p >= 0:
                    nexts[p].append(v)
        self.nexts = {v: tuple(n) for v, n in nexts.items()}
        heights = [tensors[t].shape[1] for t in graph.inputs] or [1]
        self.input_height = heights[0]

    def _producer(self, ti: int, owner: list[int]) -> int:
        producer = self.graph.tensors[ti].producer
        if producer < 0:
            c, h, w = self.graph.tensors[ti].shape
            self.sources.setdefault(-1 - ti, Source(max(c, 1), max(h, 1), max(w, 1)))
            return -1 - ti
        return owner[producer]

    def node(self, key: int) -> Layer | Source:
        return self.layers[key] if key >= 0 else self.sources[key]

    def layers_of(self, group: Group) -> list[int]:
        """The layers of ``group`` in graph order: those whose own op it holds (an
        activation whose layer lies outside belongs to that layer's group)."""
        return [v for v in bits(group) if v in self.layers]

    def lower_k(self, nofm: int) -> int:
        """Optimus's unroll lower bound on output channels (``pe_unroll``; 0: all)."""
        return _unrolled(nofm, self.unroll)


def _unrolled(n: int, unroll: int) -> int:
    """What Optimus's dataflow unrolls of a loop of ``n``: ``pe_unroll`` at most (0: all)."""
    return min(n, unroll) if unroll else n


class _Unpriceable(Exception):
    """A group Optimus's code cannot price (it raises, or its search never builds it)."""


def fused_price(
    view: OptimusView, members: list[int], solver: bool, round_up: bool = True, once: bool = True
) -> Price | None:
    """Optimus's price of the layers ``members`` (two or more, in graph order) fused, or None
    where Optimus's code cannot price them (a group led by a local layer, strides whose tiles
    do not line up)."""
    try:
        return FusedGroup(view, members).price(solver, round_up, once)
    except _Unpriceable:
        return None


class FusedGroup:
    """Optimus's inter-layer reuse of one group (its ``InterLayerReuse``), step by step."""

    def __init__(self, view: OptimusView, members: list[int]) -> None:
        self.view = view
        inside = set(members)
        layers = view.layers
        self.firsts, self.lasts = [], []
        self.ext_inputs: dict[int, None] = {}  # insertion-ordered set
        self.ext_outputs: set[int] = set()
        self.weights = 0
        for v in members:
            nexts = view.nexts[v]
            if any(n not in inside for n in nexts):
                self.ext_outputs.add(v)
            if not nexts:
                self.ext_outputs.add(v)
            if all(n not in inside for n in nexts):
                self.lasts.append(v)
            prevs = layers[v].prevs
            for p in prevs:
                if p not in inside:
                    self.ext_inputs.setdefault(p)
            if all(p not in inside for p in prevs):
                if not layers[v].conv:
                    raise _Unpriceable  # Optimus: a fused group may not start with a local layer
                self.firsts.append(v)
            self.weights += layers[v].weights
        self.order = self._topological(inside)
        self.index = {v: i for i, v in enumerate(self.order)}
        self.prev_in = [[p for p in layers[v].prevs if p in inside] for v in self.order]
        self.next_in = [[n for n in view.nexts[v] if n in inside] for v in self.order]
        self._scale()

    def _topological(self, inside: set[int]) -> list[int]:
        """Optimus's order: depth-first from the first layers, successors in reverse."""
        visited: list[int] = []
        unseen = set(inside)

        def visit(v: int) -> None:
            if v in visited:
                return
            unseen.discard(v)
            pending = []
            for n in reversed(self.view.nexts[v]):
                if n not in pending and n in unseen:
                    pending.append(n)
            for n in pending:
                visit(n)
            visited.append(v)

        for v in self.firsts:
            visit(v)
        return visited[::-1]

    def _scale(self) -> None:
        """Row scales (``s_h``: rows of each layer per row of the tile) and minimum rows."""
        layers, order = self.view.layers, self.order
        tmp: list[int] = []
        for i, v in enumerate(order):
            layer = layers[v]
            if v in self.firsts:
                tmp.append(layer.hstd)
                continue
            tmp.append(max(tmp[self.index[p]] for p in self.prev_in[i]) * layer.hstd)
        lasts_h = [tmp[self.index[v]] for v in self.lasts]
        if any(not isinstance(x, int) or x <= 0 for x in lasts_h):
            raise _Unpriceable  # Optimus's lcm takes whole strides only
        top = math.lcm(*lasts_h)
        scale: list[float] = [0.0] * len(order)
        low: list[float] = [0.0] * len(order)
        for i in reversed(range(len(order))):
            v = order[i]
            if v in self.lasts:
                scale[i] = top / tmp[i]
                low[i] = scale[i]
                continue
            found = {layers[n].hstd * scale[self.index[n]] for n in self.next_in[i]}
            if len(found) != 1:
                raise _Unpriceable  # Optimus asserts one scale per layer
            scale[i] = found.pop()
            h_out = layers[v].hofm
            need = None
            for n in self.next_in[i]:
                dst = layers[n]
                rows = min((low[self.index[n]] - 1) * dst.hstd + dst.hfil, h_out)
                need = rows if need is None or rows > need else need
            low[i] = need
        self.scale, self.low = scale, low

    def parities(self) -> tuple[float, list[bool], float]:
        """Optimus's alternation: first layers keep all channels (or a slice), each conv
        the other of its producer, a local layer any of its producers'; the parity with the
        smaller ``row step / (capacity - footprint)`` wins. (footprint, full, row step)."""
        view, layers, order = self.view, self.view.layers, self.order
        s = view.capacity
        best_fp, best_step, best_full = s - 0.0000001, float("inf"), None
        for start in (True, False):
            full: list[bool | None] = [None] * len(order)
            fp, step = 0, 0
            remaining = dict(self.ext_inputs)
            for i, v in enumerate(order):
                layer = layers[v]
                sc, low = self.scale[i], self.low[i]
                if v in self.firsts:
                    full[i] = start
                    if not start:
                        for src in layer.prevs:
                            if src in remaining:
                                node = view.node(src)
                                rows = min((low - 1) * layer.hstd + layer.hfil, node.hofm)
                                fp += node.nofm * rows * layer.wifm
                                step += node.nofm * sc * layer.hstd * layer.wifm
                                del remaining[src]
                for p in self.prev_in[i]:
                    src_full = full[self.index[p]]
                    if not layer.conv:
                        full[i] = src_full if full[i] is None else (full[i] or src_full)
                    else:
                        full[i] = not src_full
                if layer.conv:
                    kept = layer.nofm if full[i] else view.lower_k(layer.nofm)
                    fp += kept * low * layer.wofm
                    step += kept * sc * layer.wofm
            if (s - fp) > 0 and (step / (s - fp)) < (best_step / (s - best_fp)):
                best_fp, best_step, best_full = fp, step, full
        return best_fp, best_full, best_step

    def _heights(self, h: int) -> list[int]:
        """Rows per tile of each layer for ``h`` rows of the last layers (Optimus's rounding:
        the last layers' rows are not capped at their height)."""
        layers, order = self.view.layers, self.order
        rows: list[int] = [0] * len(order)
        for i in reversed(range(len(order))):
            v = order[i]
            if v in self.lasts:
                rows[i] = int(self.scale[i] * h)
                continue
            need = None
            for n in self.next_in[i]:
                dst = layers[n]
                r = min((rows[self.index[n]] - 1) * dst.hstd + dst.hfil, layers[v].hofm)
                need = r if need is None or r > need else need
            rows[i] = math.floor(need)
        return rows

    def price(self, solver: bool, round_up: bool, once: bool) -> Price:
        """Optimus's report for the group. ``round_up``: its solver's tile rounded up, as it
        does (else down: tiles that fit); ``once``: a conv that keeps all its input and
        output channels reads its weights once, as its loop order says."""
        view, layers, order = self.view, self.view.layers, self.order
        s = view.capacity
        fp, full, step = self.parities()
        io = [sum(view.node(p).size for p in self.ext_inputs), 0, 0]
        io[1] = sum(layers[v].size for v in self.ext_outputs)
        if full is None or s <= fp:
            return Price(False, io[0] + io[1] + self.weights, (io[0], io[1], self.weights),
                         fp, fp, False, 1)  # fmt: skip
        h_m = min([view.input_height] + [layers[v].hofm for v in self.lasts])
        resident = s >= self.weights + fp
        room = s - self.weights if resident else s
        lines = math.floor((room - fp) / step) + 1
        if lines > h_m:
            h = h_m
            fit = room // ((h_m - 1) * step + fp)
            b = int(max(fit, 1)) if resident else int(min(fit, 1))
        else:
            h, b = lines, 1
        rows = self._heights(h)
        blocks = self._blocks(full, rows, b)
        need = b * ((h - 1) * step + fp) if b == 1 else b * ((h_m - 1) * step + fp)
        if solver:
            solved = _Solver(self, full, b, h, h_m).solve(round_up)
            if solved is not None:
                b, h, x, idx = solved
                rows = self._heights(h)
                blocks = {}
                for i, v in enumerate(order):
                    layer = layers[v]
                    if not layer.conv:
                        continue
                    k = x[idx[i]] if i in idx else layer.nofm
                    prev = self.prev_in[i]
                    c = (
                        idx[self.index[prev[0]]]
                        if prev and self.index[prev[0]] in idx
                        else layer.nifm
                    )
                    blocks[i] = (math.ceil(c), _round(k, round_up))
                need = _Solver(self, full, b, h, h_m).buffer([_round(v, round_up) for v in x], idx)
        if resident:
            need += self.weights
        filt: float = 0
        for i, v in enumerate(order):
            layer = layers[v]
            if not layer.conv:
                continue
            if resident:
                filt += layer.weights * 1
                continue
            c, k = blocks[i]
            height = rows[i]
            sliced = k < layer.nofm or c < layer.nifm
            whole_rows = once and not sliced and height < layer.hofm  # exclusive height loop
            denominator = layer.wofm * (layer.hofm if whole_rows else height) * b
            filt += layer.weights * ((layer.wofm * layer.hofm * 1) / denominator)
        split = (int(io[0]), int(io[1]), int(np.ceil(filt)))
        tiles = math.ceil(h_m / (b * h)) if not resident else 1
        loops = []  # each conv's tile, as the energy maps it onto the PE array
        for i, (c, k) in blocks.items():
            layer = layers[order[i]]
            loops.append((order[i], (layer.wfil, layer.hfil, c, layer.wofm, rows[i], k, b)))
        return Price(True, math.ceil(sum(split)), split, fp, need, resident, tiles, tuple(loops))

    def _blocks(self, full: list[bool], rows: list[int], b: int) -> dict[int, tuple[int, int]]:
        """(input channels, output channels) per conv of Optimus's tile before its solver."""
        layers, blocks = self.view.layers, {}
        for i, v in enumerate(self.order):
            layer = layers[v]
            if not layer.conv:
                continue
            lower = self.view.lower_k(layer.nofm)
            k = layer.nofm if full[i] else lower
            c = min(lower, layer.nifm)
            if any(full[self.index[p]] for p in self.prev_in[i]):
                c = layer.nifm
            if k < layer.nofm and c < layer.nifm:
                c = layer.nifm
            blocks[i] = (c, k)
        return blocks


class _Solver:
    """Optimus's continuous refinement of a fused group's tile (its COBYLA problem): the
    last layers' rows ``x[0]`` and the sliced convs' channels ``x[i]``, minimising its
    energy estimate under its buffer constraint; the answer is then rounded up."""

    def __init__(self, fused: FusedGroup, full: list[bool], b: int, h: int, h_m: int) -> None:
        self.fused, self.full, self.b, self.h, self.h_m = fused, full, b, h, h_m

    def _objective(self) -> tuple[list[tuple[float, int]], dict[int, int]]:
        """Terms ``(coefficient, variable)`` of the energy, and each layer's variable."""
        fused, view = self.fused, self.fused.view
        layers, order, index = view.layers, fused.order, fused.index
        glb = view.glb
        q0, q1, q2 = glb, glb, DRAM_ENERGY + glb
        weight = q2 * fused.weights * 1 if self.b > 1 else q2 * fused.weights * 1 * self.h_m
        terms: list[tuple[float, int]] = [(weight, 0)]
        idx: dict[int, int] = {}
        count = 1
        for i, v in enumerate(order):
            layer = layers[v]
            if not layer.conv:
                continue
            p0 = q0 * layer.ifmap * layer.nofm
            p1 = q1 * layer.size * layer.nifm
            prevs = [index[p] for p in fused.prev_in[i]]
            keep_k = bool(self.full[i])
            keep_c = any(self.full[p] for p in prevs)
            if not keep_k and not keep_c:
                keep_c = True
            if not keep_k:
                if i not in idx:
                    idx[i], count = count, count + 1
                terms.append((p0, idx[i]))
            if keep_c:
                continue
            if len(prevs) != 1:
                continue
            pidx = prevs[0]
            if pidx in idx:
                cur = idx[pidx]
            else:
                cy = pidx
                while len(fused.prev_in[cy]) == 1:
                    if layers[order[cy]].conv:
                        break
                    cy = index[fused.prev_in[cy][0]]
                if len(fused.prev_in[cy]) == 1:
                    if cy in idx:
                        cur = idx[pidx] = idx[cy]
                    else:
                        cur = idx[cy] = idx[pidx] = count
                        count += 1
                elif not fused.prev_in[cy]:
                    continue
                else:
                    cur = idx[pidx] = count
                    count += 1
            terms.append((p1, cur))
        return terms, idx

    def _buffer_terms(self, idx: dict[int, int]):
        """The buffer constraint's terms, as functions of x, and the channel bounds."""
        fused, view = self.fused, self.fused.view
        layers, b = view.layers, self.b
        bounds: list[tuple[int, int, int]] = []  # (variable, low, high)
        parts = []
        remaining = dict(fused.ext_inputs)
        for i, v in enumerate(fused.order):
            layer = layers[v]
            sc, low = fused.scale[i], fused.low[i]
            if v in fused.firsts and not self.full[i]:
                for src in layer.prevs:
                    if src in remaining:
                        node = view.node(src)
                        if b > 1:
                            hifm = layer.hfil + (layer.hofm - 1) * layer.hstd
                            parts.append((1, hifm, layer.wifm, node.nofm, None))
                        else:
                            m_h = min((low - 1) * layer.hstd + layer.hfil, node.hofm)
                            parts.append((0, (m_h, sc * layer.hstd), layer.wifm, node.nofm, None))
                        del remaining[src]
            if layer.conv:
                kept = None if self.full[i] else idx[i]
                if b > 1:
                    parts.append((1, layer.hofm, layer.wofm, layer.nofm, kept))
                else:
                    parts.append((0, (low, sc), layer.wofm, layer.nofm, kept))
                if kept is not None:
                    bounds.append((kept, view.lower_k(layer.nofm), layer.nofm))
        return parts, bounds

    @staticmethod
    def _held(parts, x) -> float:
        """The constraint's sum, evaluated term by term as Optimus's expression is."""
        total = None
        for linear, rows, width, channels, var in parts:
            if linear:
                value = x[0] * rows * width
            else:
                m_h, s_h = rows
                value = (m_h - s_h + s_h * x[0]) * width
            value = value * (channels if var is None else x[var])
            total = value if total is None else total + value
        return total

    def buffer(self, x: list[int], idx: dict[int, int]) -> float:
        """Elements the tile holds at ``x`` (features only), by Optimus's constraint."""
        parts, _ = self._buffer_terms(idx)
        return self._held(parts, x)

    def solve(self, round_up: bool = True):
        """(images, rows, x, variables) after a successful solve, else None."""
        terms, idx = self._objective()
        parts, bounds = self._buffer_terms(idx)
        capacity, top = self.fused.view.capacity, (1 if self.b > 1 else self.h_m)

        def energy(x):
            total = None
            for coefficient, var in terms:
                value = coefficient / x[var]
                total = value if total is None else total + value
            return total

        cons = [lambda x: x[0] - 1, lambda x, top=top: -x[0] + top]
        for var, low, high in bounds:
            cons.append(lambda x, var=var, low=low: x[var] - low)
            cons.append(lambda x, var=var, high=high: -x[var] + high)
        cons.append(lambda x: -(self._held(parts, x)) + capacity)
        start = [1] * (len(set(idx.values())) + 1)
        start[0] = self.b if self.b > 1 else self.h
        layers, order = self.fused.view.layers, self.fused.order
        for i, var in idx.items():
            if i < len(order) and layers[order[i]].conv:
                start[var] = self.fused.view.lower_k(layers[order[i]].nofm)
        result = minimize(
            energy,
            np.asarray(start),
            method="COBYLA",
            constraints=tuple({"type": "ineq", "fun": f} for f in cons),
        )
        if not result.success:
            return None
        x = [float(v) for v in result.x]
        if self.b > 1:
            return _round(x[0], round_up), self.h_m, x, idx
        return 1, _round(x[0], round_up), x, idx


def _round(x: float, up: bool) -> int:
    """Optimus rounds its solver's answer up; the other way keeps the tile inside the buffer."""
    return math.ceil(x) if up else max(math.floor(x), 1)


# loops of Optimus's blockings: filter width, filter height, input and output channels,
# output width and height, images
_D, _R, _C, _W, _H, _K, _B = range(7)


def single_price(view: OptimusView, v: int, solver: bool) -> tuple[int, int] | None:
    """Optimus's DRAM elements for conv layer ``v`` run alone, and the elements its blocking
    holds (:func:`single_blocking`), counted as its reporting counts DRAM; None if no
    blocking fits."""
    found = single_blocking(view, v, solver)
    if found is None:
        return None
    layer = view.layers[v]
    block, order = found
    d, r, c, w, h, k, b = block
    held = r * d * k * c + k * (w * h * b) + layer.hstd * layer.wstd * c * (w * h * b)
    return sum(_accesses(layer, block, _dimension(layer), order)), held


def single_blocking(view: OptimusView, v: int, solver: bool) -> tuple[list, list] | None:
    """Optimus's loop blocking and order of conv layer ``v`` run alone: the least energy
    estimate among its five blockings (solved continuously with the tile solver, else by
    its closed forms); None if none fits. Solved once per layer (``view.blockings``)."""
    key = (v, solver)
    if key not in view.blockings:
        view.blockings[key] = _single_blocking(view, v, solver)
    found = view.blockings[key]
    return None if found is None else (list(found[0]), list(found[1]))


def _single_blocking(view: OptimusView, v: int, solver: bool) -> tuple[list, list] | None:
    layer = view.layers[v]
    if solver:
        found = [schedule(layer, view) for schedule in _CONTINUOUS]
    else:
        found = [schedule(layer, view.capacity, view.unroll) for schedule in _CLOSED]
    best = None
    for candidate in found:
        if candidate is not None and (best is None or candidate[0] < best[0]):
            best = candidate
    return None if best is None else (best[1], best[2])


def _dimension(layer: Layer) -> list[int]:
    return [layer.wfil, layer.hfil, layer.nifm, layer.wofm, layer.hofm, layer.nofm, layer.nimg]


def _loop_order(layer: Layer, block: list[int], irrelevant: tuple[int, ...]) -> list[int]:
    """Optimus's loop order: the blocked loops a blocking does not reuse across, innermost
    first, then the other blocked loops; unblocked loops outermost (6)."""
    dim = _dimension(layer)
    order, rank = [6] * 7, 0
    for i in irrelevant:
        if block[i] < dim[i]:
            order[i], rank = rank, rank + 1
    for i, e in enumerate(block):
        if e < dim[i] and i not in irrelevant:
            order[i], rank = rank, rank + 1
    return order


def _reuse(
    layer: Layer, inner: list[int], outer: list[int], order: list[int]
) -> tuple[float, float, float]:
    """Reads of each input, output and weight element from one memory level, as Optimus's
    cost model counts them: the loops of the level's ``order`` that an operand does not
    depend on re-read it, each by the blocking below (``inner``), or by the level's own
    (``outer``) where the loop sits inside every loop the operand depends on."""

    def sel(loop: int, exclusive: bool) -> int:
        return outer[loop] if exclusive else inner[loop]

    ex = min(order[_W], order[_H], order[_C], order[_B])
    d, r, k = sel(_D, order[_D] < ex), sel(_R, order[_R] < ex), sel(_K, order[_K] < ex)
    rdk = (layer.wfil * layer.hfil * layer.nofm) / (d * r * k)
    if d < layer.wfil:
        rdk /= layer.wstd
    if r < layer.hfil:
        rdk /= layer.hstd
    ex = min(order[_W], order[_H], order[_K], order[_B])
    d, r, c = sel(_D, order[_D] < ex), sel(_R, order[_R] < ex), sel(_C, order[_C] < ex)
    rdc = (layer.wfil * layer.hfil * layer.nifm) / (d * r * c)
    ex = min(order[_D], order[_R], order[_C], order[_K])
    w, h, b = sel(_W, order[_W] < ex), sel(_H, order[_H] < ex), sel(_B, order[_B] < ex)
    whb = (layer.wofm * layer.hofm * layer.nimg) / (w * h * b)
    return rdk, rdc, whb


def _accesses(layer: Layer, inner: list[int], outer: list[int], order: list[int]) -> list[int]:
    """Accesses to one memory level: input, output (each partial sum written and read back,
    less the first read) and weights, Optimus's :func:`_reuse` times the operand's size."""
    rdk, rdc, whb = _reuse(layer, inner, outer, order)
    access = [rdk * layer.ifmap, (2 * rdc - 1) * layer.size, whb * layer.weights]
    return [int(x) for x in np.ceil(access)]


@functools.lru_cache(maxsize=1 << 16)
def _factors(n: float, start: int, end: int) -> set[int]:
    """Optimus's divisors of ``n`` within [start, end] (a set, iterated as Optimus's is;
    cached: the register mappings of an exact search ask for the same ones again and again,
    and no caller changes the set)."""
    found: list[int] = []
    for i in range(1, min(int(n**0.5) + 1, end + 1)):
        if n % i == 0 and n // i <= end and i >= start and (n // i) >= start:
            found += [i, int(n // i)]
        elif n % i == 0 and n // i <= end and (n // i) >= start:
            found += [int(n // i)]
        elif n % i == 0 and i >= start:
            found += [i]
    return set(found)


def _pixels(layer: Layer, n: int, lower_w: int) -> tuple[int, int, int, int]:
    """Optimus's split of ``n`` output pixels into images x rows x columns: the largest
    count <= n that factors with columns >= ``lower_w`` and rows <= the height."""
    b = h = w = 0
    while n > 0 and b * h * w == 0:
        for bb in _factors(n, 1, layer.nimg):
            for ww in _factors(n / bb, lower_w, layer.wofm):
                if n / (bb * ww) <= layer.hofm:
                    b, w, h = bb, ww, n / (bb * ww)
                    break
                if b * h * w > 0:
                    break
            if b * h * w > 0:
                break
        n -= 1
    n += 1
    return int(n), int(b), int(h), int(w)


def _continuous(kind: str):
    """One of Optimus's blockings solved continuously (SLSQP over output channels k, input
    channels c and pixels p under ``r d k c + k p + s² c p <= capacity``), then floored."""
    irrelevant = {
        "psum": (_C,), "filter": (_W, _H, _B), "ifmap": (_K,), "cwr_c": (_D, _R, _K),
        "cwr_k": (_D, _R, _C),
    }[kind]  # fmt: skip

    def schedule(layer: Layer, view: OptimusView):
        p1, p2 = view.glb, DRAM_ENERGY
        r, d = layer.hfil, layer.wfil
        if kind == "psum":
            q0 = (p2 + p1) * layer.hstd * layer.wstd / (r * d)
            q1, q2 = 2 * p1 / (r * d), (p2 + p1)
        elif kind == "filter":
            q0 = (p2 + p1) * layer.hstd * layer.wstd / (r * d)
            q1, q2 = 2 * (p2 + p1) / (r * d), p1
        elif kind == "ifmap":
            q0 = p1 * layer.hstd * layer.wstd / (r * d)
            q1, q2 = 2 * (p2 + p1) / (r * d), p2 + p1
        else:
            q0 = p1 * layer.hstd * layer.wstd / (r * d)
            q1, q2 = 2 * p1 / (r * d), p1 + p2
        lower_k, lower_w = view.lower_k(layer.nofm), min(layer.wofm, view.unroll or layer.wofm)
        k_low, k_high = (layer.nofm, layer.nofm) if kind == "cwr_k" else (lower_k, layer.nofm)
        c_low, c_high = (layer.nifm, layer.nifm) if kind == "cwr_c" else (1, layer.nifm)
        p_low, p_high = lower_w, layer.hofm * layer.wofm
        a, bb, cc, s = r * d, 1, layer.hstd * layer.wstd, view.capacity
        cons = (
            {"type": "ineq", "fun": lambda x: x[0] - k_low},
            {"type": "ineq", "fun": lambda x: -x[0] + k_high},
            {"type": "ineq", "fun": lambda x: x[1] - c_low},
            {"type": "ineq", "fun": lambda x: -x[1] + c_high},
            {"type": "ineq", "fun": lambda x: x[2] - p_low},
            {"type": "ineq", "fun": lambda x: -x[2] + p_high},
            {
                "type": "ineq",
                "fun": lambda x: -(a * x[0] * x[1] + bb * x[0] * x[2] + cc * x[1] * x[2]) + s,
            },
        )
        q = min([q0, q1, q2]) / 2
        start = np.asarray((q0 / q, q1 / q, q2 / q))
        res = minimize(lambda x: q0 / x[0] + q1 / x[1] + q2 / x[2], start, method="SLSQP",
                       constraints=cons)  # fmt: skip
        if not np.all(np.isfinite(res.x)):
            return None
        k, c, pix = (math.floor(v) for v in res.x)
        pix, b, h, w = _pixels(layer, pix, lower_w)
        block = [d, r, c, w, h, k, b]
        if not res.success or any(i <= 0 for i in block):
            return None
        order = _loop_order(layer, block, irrelevant)
        ops = layer.ops
        base = (q0 / k + q1 / c + q2 / pix) * ops
        if kind == "psum":
            energy = base + (p2 - p1) * layer.size
        elif kind == "filter":
            energy = base + p2 * layer.weights - (p2 + p1) * layer.size
        elif kind == "ifmap":
            energy = base + p2 * layer.ifmap - (p2 + p1) * layer.size
        else:
            energy = base + p2 * layer.ifmap + (p2 - p1) * layer.size
        return energy, block, order

    return schedule


def _closed(kind: str):
    """One of Optimus's blockings by its closed forms (its path without the tile solver)."""

    def schedule(layer: Layer, capacity: float, unroll: int):
        s, r, d = capacity, layer.hfil, layer.wfil
        hs, ws, nhw = layer.hstd, layer.wstd, layer.nimg * layer.hofm * layer.wofm
        low_k, low_c = _unrolled(layer.nofm, unroll), 1
        low_w = _unrolled(layer.wofm, unroll)
        ceil, floor = math.ceil, math.floor
        if kind in ("cwr_c", "cwr_k"):
            if kind == "cwr_c":
                c, k, irrelevant = layer.nifm, low_k, (_D, _R, _K)
            else:
                k, c, irrelevant = layer.nofm, low_c, (_D, _R, _C)
            room = s - k * c * r * d
            rho = min(ceil(room / (c * hs * ws + k)), nhw)
            rho, b, h, w = _pixels(layer, rho, low_w)
            if kind == "cwr_c":
                k = min(ceil((s - b * h * w * c * hs * ws) / (b * h * w + r * d * c)), layer.nofm)
            else:
                c = min(ceil((s - b * h * w * k) / (b * h * w * hs * ws + r * d * k)), layer.nifm)
            block = [d, r, c, w, h, k, b]
            if room < 0 or any(i <= 0 for i in block):
                return None
            energy = layer.ifmap + ceil(layer.ops / rho) + layer.size
        elif kind == "filter":
            irrelevant = (_W, _H, _B)
            b, h, w = 1, 1, low_w
            f = r * d / (hs * ws)
            a = b * h * w * 3 / (4 * f)
            k = max(math.sqrt(s / (2 * f) + a**2) - a, 1)
            c = ceil(2 * k / (hs * ws))

            def c_for(k):
                c = ceil((s - b * h * w * k) / (r * d * k + b * h * w * hs * ws))
                return min(c, layer.nifm)

            def k_for(c):
                k = ceil((s - b * h * w * c * hs * ws) / (r * d * c + b * h * w))
                return min(k, layer.nofm)

            if k > layer.nofm and c > layer.nifm:
                k, c = layer.nofm, layer.nifm
            elif k > layer.nofm:
                k = layer.nofm
                c = c_for(k)
            elif c > layer.nifm:
                c = layer.nifm
                k = k_for(c)
            if k * c > low_k * low_c:
                if k < low_k and c > low_c:
                    k = low_k
                    c = c_for(k)
                elif k > low_k and c < low_c:
                    c = low_c
                    k = k_for(c)
            k = floor(k)
            block = [d, r, c, w, h, k, b]
            if any(i <= 0 for i in block):
                return None
            rho = c * k * r * d / (c * hs * ws + (2 * k - 1))
            energy = layer.weights + ceil(layer.ops / rho)
        elif kind == "ifmap":
            irrelevant = (_K,)
            k = low_k
            f = r * d / (hs * ws)
            a = k * 3 * f / 4
            pix = max(ceil(math.sqrt(s * f / 2 + a**2) - a), 1)
            c = ceil(2 * pix / (r * d))

            def c_for(pix):
                return min(ceil((s - pix * k) / (r * d * k + pix * hs * ws)), layer.nifm)

            def pix_for(c):
                return min(ceil((s - r * d * c * k) / (k + c * hs * ws)), nhw)

            if pix > nhw and c > layer.nifm:
                pix, c = nhw, layer.nifm
            if pix > nhw:
                pix = nhw
                c = c_for(pix)
            elif c > layer.nifm:
                c = layer.nifm
                pix = pix_for(c)
            if pix * c > low_w * low_c:
                if pix < low_w and c > low_c:
                    pix = low_w
                    c = c_for(pix)
                elif pix > low_w and c < low_c:
                    c = low_c
                    pix = pix_for(c)
            pix, b, h, w = _pixels(layer, pix, low_w)
            k = min(ceil((s - b * h * w * c * hs * ws) / (b * h * w + r * d * c)), layer.nofm)
            block = [d, r, c, w, h, k, b]
            if any(i <= 0 for i in block):
                return None
            rho = pix * c * r * d / (c * r * d + (2 * pix - 1))
            energy = ceil(layer.ops / rho) + layer.ifmap
        else:  # psum
            irrelevant = (_C,)
            c = low_c
            f = r * d / (hs * ws)
            a = hs * ws * (c + 1) / 2
            k = max(math.sqrt(s / f + a**2) - a, 1)
            pix = floor(k * r * d / a)
            k = floor(k)

            def pix_for(k):
                return min(floor((s - r * d * c * k) / (k + c * hs * ws)), nhw)

            def k_for(pix):
                return min(floor((s - pix * c * hs * ws) / (pix + r * d * c)), layer.nofm)

            if k > layer.nofm and pix > nhw:
                k, pix = layer.nofm, nhw
            elif k > layer.nofm:
                k = layer.nofm
                pix = pix_for(k)
            elif pix > nhw:
                pix = nhw
                k = k_for(pix)
            if k * pix > low_k * low_w:
                if k < low_k and pix > low_w:
                    k = low_k
                    pix = pix_for(k)
                elif k > low_k and pix < low_w:
                    pix = low_w
                    k = k_for(pix)
            pix, b, h, w = _pixels(layer, pix, low_w)
            c = min(floor((s - pix * k) / (pix * hs * ws + r * d * k)), layer.nifm)
            block = [d, r, c, w, h, k, b]
            if any(i <= 0 for i in block):
                return None
            rho = pix * k * r * d / (pix * hs * ws + k * r * d)
            energy = ceil(layer.ops / rho) + layer.size
        return energy, block, _loop_order(layer, block, irrelevant)

    return schedule


_CONTINUOUS = tuple(_continuous(k) for k in ("psum", "filter", "ifmap", "cwr_c", "cwr_k"))
_CLOSED = tuple(_closed(k) for k in ("cwr_c", "cwr_k", "filter", "ifmap", "psum"))
"""Optimus's five single-layer blockings, in the order it tries them (ties: the first)."""


@dataclass(frozen=True)
class Energy:
    """A group's energy as Optimus's cost model reports it, in pJ: accesses to the register
    files, the global buffer and DRAM times their energies, the PE array's network (reads
    from a neighbouring PE) and the MACs."""

    rf: float
    glb: float
    dram: float
    noc: float
    mac: float

    @property
    def total(self) -> float:
        return self.rf + self.glb + self.dram + self.noc + self.mac  # Optimus's order of sums


def _rf_accesses(layer: Layer) -> list[int]:
    """Register-file accesses of a conv, as Optimus counts them without a MAC-level buffer:
    every MAC reads an input and a weight and reads and writes a partial sum (less each
    output's first read), whatever the mapping."""
    per_input = layer.wfil * layer.hfil * layer.nofm / (layer.wstd * layer.hstd)
    per_output = 2 * (layer.wfil * layer.hfil * layer.nifm) - 1
    per_weight = layer.wofm * layer.hofm * layer.nimg
    access = [per_input * layer.ifmap, per_output * layer.size, per_weight * layer.weights]
    return [int(x) for x in np.ceil(access)]


def _register_blocking(
    layer: Layer, tile: list[int], capacity: float, unroll: int
) -> tuple[list[int], list[int], list[int]] | None:
    """:func:`_mapped_blocking` of the tile, cached (the same conv tiles recur in many of an
    exact search's groups); fresh lists for the caller."""
    found = _mapped_blocking(layer, tuple(tile), capacity, unroll)
    return None if found is None else tuple(list(x) for x in found)


@functools.lru_cache(maxsize=1 << 16)
def _mapped_blocking(
    layer: Layer, tile: tuple[int, ...], capacity: float, unroll: int
) -> tuple[list[int], list[int], list[int]] | None:
    """Optimus's mapping of a conv's tile (its global-buffer blocking) onto the PE array: its
    five closed-form blockings of the tile, all register files together as one buffer of
    ``capacity`` elements; the one with the fewest global-buffer accesses wins (the first on
    a tie). (global-buffer accesses, register blocking, its order), or None if none fits."""
    d, r, c, w, h, k, b = tile
    sub = Layer(True, k, h, w, layer.hstd, layer.wstd, r, d, c, (), b)
    best = None
    for schedule in _CLOSED:
        found = schedule(sub, capacity, unroll)
        if found is None:
            continue
        _, block, order = found
        glb = _accesses(layer, block, tile, order)
        if best is None or sum(glb) < sum(best[0]):
            best = (glb, block, order)
    return best


def _array_terms(
    layer: Layer, block: list[int], tile: list[int], order: list[int], unroll: int
) -> list[tuple[int, float]]:
    """(accesses, pJ each) of the PE array's network for one conv, as Optimus counts them:
    its dataflow unrolls output columns and output channels (``unroll`` each); a blocking
    narrower than that replicates rows, resp. input channels, into the idle PEs. Each
    global-buffer read is shared along the unrolled loops its operand does not depend on
    (a hop each), and a replicated loop passes data across blocks at ``unroll``-fold cost."""
    rdk, rdc, whb = _reuse(layer, block, tile, order)
    part = [1] * 7
    pairs = []
    for loop, spare in ((_W, _H), (_K, _C)):
        part[loop] = _unrolled(block[loop], unroll)
        if unroll and block[loop] < unroll:
            para = unroll // block[loop]
            if para > 1 and block[spare] > 1:
                part[spare] = min(para, block[spare])
                pairs.append((loop, spare))
    sizes = (layer.ifmap, layer.size, layer.weights)
    near = [rdk * part[_K], rdc, whb * part[_W]]
    near_reads = [a * n for a, n in zip(near, sizes, strict=True)]
    terms = [(sum(int(x) for x in np.ceil(near_reads)), HOP_ENERGY)]
    for loop, spare in pairs:
        far = [1] * 7
        far[spare] = part[spare]
        spread = [
            far[_R] * far[_D] * far[_K], far[_R] * far[_D] * far[_C], far[_W] * far[_H] * far[_B]
        ]  # fmt: skip
        spread = [f if f != 1 else 0 for f in spread]
        reads = [rdk * spread[0], rdc * spread[1], whb * spread[2]]
        far_reads = [a * n for a, n in zip(reads, sizes, strict=True)]
        count = sum(int(x) for x in np.ceil(far_reads))
        terms.append((count, HOP_ENERGY * part[loop]))
    return terms


class OptimusPricing:
    """The ``optimus-groups`` convention: every group costs what Optimus reports for its
    layers (docs/cost-model.md, "The optimus profile"). ``alone(v)`` is the cost model's own
    single-layer cost, used where Optimus finds no blocking for a layer."""

    dram_pj_per_element = DRAM_ENERGY

    def __init__(self, graph: OpGraph, accel, io_elements, alone) -> None:
        self.b = accel.bytes_per_element
        self.view = OptimusView(graph, accel.pe_unroll, accel.buffer_bytes, self.b)
        conventions = accel.conventions
        self.solver = "optimus-solver" in conventions
        self.round_up = "rounded-up-tiles" in conventions
        self.once = "unsliced-weights-once" in conventions
        self.free_local = "free-unfused-local" in conventions
        self.io_elements, self.alone = io_elements, alone
        rf_bytes, self.rf_energy = register_file(accel.buffer_bytes)
        self.rf_capacity = rf_bytes / self.b * PES  # all register files, in elements
        self._fused: dict[tuple[int, ...], Price | None] = {}

    def weights(self) -> tuple[int, ...]:
        """Weights per op as Optimus counts them: a dense layer's kernels, no bias; none for
        the other ops (a depthwise conv is a local layer)."""
        layers = self.view.layers
        return tuple(layers[v].weights if v in layers else 0 for v in range(len(self.view.graph)))

    def free_alone(self) -> Group:
        """Ops that cost nothing on their own: an activation, and a local layer (under
        ``free-unfused-local``)."""
        mask = 0
        for v in range(len(self.view.graph)):
            members = self.view.layers_of(1 << v)
            if not members or (self.free_local and not self.view.layers[members[0]].conv):
                mask |= 1 << v
        return mask

    def floor(self, nodes: Group) -> int:
        """Elements every valid group holding ``nodes`` keeps: each conv at least its
        unrolled slice of channels, one row wide (Optimus stores no other layer's rows)."""
        layers = self.view.layers
        return sum(
            self.view.lower_k(layers[v].nofm) * layers[v].wofm
            for v in self.view.layers_of(nodes)
            if layers[v].conv
        )

    def price(self, group: Group) -> tuple[GroupCost, str, int]:
        """(GroupCost, kind, core op) as ``CostModel._priced`` returns them."""
        b, view = self.b, self.view
        members = view.layers_of(group)
        if not members:
            return GroupCost(0, 0, True), "free", -1  # activations only: not layers
        if len(members) == 1:
            v = members[0]
            if not view.layers[v].conv:
                cost = 0 if self.free_local else b * self.io_elements(group)
                return GroupCost(0, cost, True), "free" if self.free_local else "layer", v
            found = single_price(view, v, self.solver)
            if found is None:  # no Optimus blocking: the cost model's own
                return GroupCost(0, b * self.alone(v), True), "layer", v
            dram, held = found
            return GroupCost(b * held, b * dram, True), "layer", v
        price = self._fused_price(members)
        if price is None:  # outside what Optimus's code prices: it never fuses these
            io = self.io_elements(group)
            weights = sum(view.layers[v].weights for v in members)
            return GroupCost(0, b * (io + weights), False), "scheme", -1
        held = math.ceil(b * price.need)
        return GroupCost(held, b * price.dram, price.valid), "scheme", -1

    def fixed_energy(self) -> tuple[float, ...]:
        """pJ per op that Optimus reports for every group holding it, whatever its blocking:
        a conv's register-file accesses (``4 M - O``) and MACs; 0 for the other ops. With the
        DRAM term, the floor of :meth:`energy` that the exact search's bound adds up."""
        layers = self.view.layers
        return tuple(
            self.rf_energy * sum(_rf_accesses(layers[v])) + layers[v].ops * MAC_ENERGY
            if v in layers and layers[v].conv
            else 0.0
            for v in range(len(self.view.graph))
        )

    def _fused_price(self, members: list[int]) -> Price | None:
        """:func:`fused_price` of these layers, once per set (its DRAM and its energy both
        read it)."""
        key = tuple(members)
        if key not in self._fused:
            self._fused[key] = fused_price(self.view, members, self.solver, self.round_up,
                                           self.once)  # fmt: skip
        return self._fused[key]

    def energy(self, group: Group) -> float:
        """Optimus's reported energy of ``group`` in pJ (:meth:`energy_split`'s total); inf
        where Optimus's code finds no schedule for it."""
        split = self.energy_split(group)
        return math.inf if split is None else split.total

    def energy_split(self, group: Group) -> Energy | None:
        """The energy Optimus's cost model reports for ``group`` (docs/cost-model.md, "The
        optimus profile", energy): the DRAM accesses :meth:`price` counts, and each conv's
        register-file, global-buffer and array-network accesses under the register blocking
        Optimus maps its tile to. None where Optimus's code finds no schedule (a group it does
        not fuse, a conv with no blocking)."""
        view = self.view
        members = view.layers_of(group)
        convs: list[tuple[Layer, list[int]]] = []  # (layer, its tile: global-buffer blocking)
        if len(members) > 1:
            price = self._fused_price(members)
            if price is None or not price.valid:
                return None
            dram = list(price.split)
            convs = [(view.layers[v], list(tile)) for v, tile in price.loops]
        elif members and view.layers[members[0]].conv:
            layer = view.layers[members[0]]
            found = single_blocking(view, members[0], self.solver)
            if found is None:
                return None
            block, order = found
            dram = _accesses(layer, block, _dimension(layer), order)
            convs = [(layer, block)]
        else:  # activations or a local layer alone: no MACs, the DRAM the price charges
            dram = [self.price(group)[0].dram // self.b, 0, 0]
        rf, glb, noc, macs = [0, 0, 0], [0, 0, 0], 0.0, 0
        for layer, tile in convs:
            mapped = _register_blocking(layer, tile, self.rf_capacity, view.unroll)
            if mapped is None:
                return None
            accesses, block, order = mapped
            rf = [a + x for a, x in zip(rf, _rf_accesses(layer), strict=True)]
            glb = [a + x for a, x in zip(glb, accesses, strict=True)]
            for count, cost in _array_terms(layer, block, tile, order, view.unroll):
                noc += count * cost
            macs += layer.ops
        levels = ((rf, self.rf_energy), (glb, view.glb), (dram, DRAM_ENERGY))
        rf_pj, glb_pj, dram_pj = (sum(a * energy for a in acc) for acc, energy in levels)
        return Energy(rf_pj, glb_pj, dram_pj, noc, macs * MAC_ENERGY)
