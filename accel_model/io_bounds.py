"""Lower bounds on one layer's DRAM traffic from the red-blue pebble game
(docs/cost-model.md, "I/O lower bounds").

A cost is a claim that some schedule moves that many elements; a bound says no schedule can
move fewer. Checking every single-layer cost against its bound catches a formula that prices
a schedule which cannot exist. Two facts bound a layer run alone with ``S`` elements of fast
memory (buffer plus operands in flight):

* *compulsory*: it reads its inputs and weights and writes its outputs at least once;
* *pebble*: for a conv or a linear layer, a segment of the schedule with ``t`` operand loads
  runs at most a bounded number of multiply-accumulates (Loomis-Whitney over the three
  operands, each input element shared by at most ``rho`` window positions), so the layer's
  MACs need a number of segments, hence loads. The derivation, and why spilled partial sums
  cannot beat it, is in the docs; :func:`pebble_bound_at` is its formula for one choice of
  the two free parameters, each choice a valid bound, and :func:`pebble_bound` the best on a
  fixed grid.

Everything is in elements; a cost model's bytes are ``b`` times these.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from accel_model.rows import is_activation_matmul
from fusionplan.ir.graph import OpGraph

IN_FLIGHT = 3
"""Elements a MAC may hold outside the buffer, in PE registers: its three operands. The
pebble game needs them in fast memory, the cost model counts only buffered data (a streamed
weight takes no buffer; the last-resort loop order holds nothing else), so fast memory is
the buffer plus these; a larger memory only lowers the bound."""

SAFETY = 1e-9
"""Relative margin taken off a floating-point bound before it is rounded down."""

_T_STEPS = np.arange(-20, 25) / 4  # segment lengths t = S * 2^step
_MU_STEPS = np.arange(-40, 17) / 4  # multipliers mu = sqrt(S) * 2^step
_FINE = np.arange(-8, 9) / 32  # a finer grid around the best coarse point


class Contraction(NamedTuple):
    """The multiply-accumulate structure of a conv or linear layer, as the bound needs it."""

    macs: int  # products of an in-bounds input element and a weight (padding excluded)
    reuse: int  # rho: the most (output position, kernel offset) pairs reading one input element
    outputs: int  # output elements, each written at least once


class IOBound(NamedTuple):
    """A lower bound on the DRAM elements of one op run alone."""

    compulsory: int  # its inputs, outputs and weights once each
    pebble: int  # the red-blue pebble bound (0 where the op has no contraction)

    @property
    def elements(self) -> int:
        return max(self.compulsory, self.pebble)


def fast_memory(buffer_bytes: int, bytes_per_element: int) -> int:
    """Fast-memory elements of an accelerator: the buffer's plus :data:`IN_FLIGHT`."""
    return buffer_bytes // bytes_per_element + IN_FLIGHT


def compulsory_elements(graph: OpGraph, v: int) -> int:
    """Inputs, outputs and weights of op ``v``, each once: no schedule of it moves less."""
    node, tensors = graph.nodes[v], graph.tensors
    io = sum(tensors[t].size for t in (*node.inputs, *node.outputs))
    return io + node.weights


def _window_hits(out_len: int, in_len: int, kernel: int, stride: int, pad: int, dil: int) -> int:
    """Sum over output positions of the kernel taps that land inside the input (one axis)."""
    hits = 0
    for y in range(out_len):
        first = y * stride - pad
        hits += sum(1 for r in range(kernel) if 0 <= first + r * dil < in_len)
    return hits


def _window_reuse(kernel: int, stride: int, dil: int, out_len: int) -> int:
    """The most output positions of one axis whose windows read one input position: the taps
    ``r < kernel`` with ``r * dil`` in one residue class mod ``stride`` (one position each)."""
    period = stride // math.gcd(dil, stride)
    return max(1, min(-(-kernel // period), out_len))


def conv_contraction(graph: OpGraph, v: int) -> Contraction | None:
    """The contraction of a (grouped, depthwise or dense) Conv; None for a ConvTranspose or
    a conv whose shapes do not follow 2-D conv arithmetic (e.g. a 3-D conv folded into W)."""
    node = graph.nodes[v]
    if node.op_type != "Conv" or not node.inputs:
        return None
    c_in, h_in, w_in = graph.tensors[node.inputs[0]].shape
    c_out, h_out, w_out = graph.out_shape(v)
    (kh, kw), (sh, sw), (dh, dw) = node.kernel, node.stride, node.dilation
    top, left, bottom, right = node.pads
    groups = max(node.groups, 1)
    expected = (
        (h_in + top + bottom - dh * (kh - 1) - 1) // sh + 1,
        (w_in + left + right - dw * (kw - 1) - 1) // sw + 1,
    )
    if expected != (h_out, w_out) or c_in % groups or c_out % groups:
        return None
    taps = _window_hits(h_out, h_in, kh, sh, top, dh) * _window_hits(w_out, w_in, kw, sw, left, dw)
    macs = c_out * (c_in // groups) * taps
    if macs == 0:
        return None
    reuse = _window_reuse(kh, sh, dh, h_out) * _window_reuse(kw, sw, dw, w_out)
    return Contraction(macs, reuse, c_out * h_out * w_out)


def linear_contraction(graph: OpGraph, v: int) -> Contraction | None:
    """The contraction of a MatMul/Gemm with a constant weight (a GEMM: every input element
    meets each weight of its row at most once, rho = 1); None for any other matmul."""
    node = graph.nodes[v]
    if node.kind != "matmul" or node.weights == 0 or is_activation_matmul(node):
        return None
    outputs = sum(graph.tensors[t].size for t in node.outputs)
    if node.macs <= 0 or outputs == 0:
        return None
    return Contraction(node.macs, 1, outputs)


def contraction(graph: OpGraph, v: int) -> Contraction | None:
    """The contraction of op ``v`` if it is a conv or a linear layer, else None."""
    return conv_contraction(graph, v) or linear_contraction(graph, v)


def segment_capacity(s: float, t: np.ndarray | float, mu: np.ndarray | float) -> np.ndarray:
    """Psi(mu) = max over c in [0, S], u >= 0 of ((S + t - c) / 2) sqrt(c + u) - mu u: what
    one segment of ``t`` operand loads can compute (over sqrt(rho)), less ``mu`` per output
    it brings in. For a fixed c the best u is interior or 0, which makes a convex piece
    (c below the switch point c_s) and a concave one (above it); the candidates are the
    ends of both pieces and the concave piece's peak, c = (S + t) / 3."""
    mu = np.asarray(mu, dtype=float)
    root = -2 * mu + np.sqrt(4 * mu * mu + s + t)
    switch = np.minimum(root * root, s)  # where S + t - c = 4 mu sqrt(c), capped at S

    def value(c: np.ndarray | float) -> np.ndarray:
        room = s + t - c
        interior = room * room / (16 * mu) + mu * c  # best u > 0
        at_zero = room / 2 * np.sqrt(c)  # u = 0
        return np.where(room >= 4 * mu * np.sqrt(c), interior, at_zero)

    peak = np.clip((s + t) / 3, switch, s)
    return np.maximum.reduce([value(0.0), value(switch), value(float(s)), value(peak)])


def pebble_bound_at(
    c: Contraction, s: int, t: np.ndarray | int, mu: np.ndarray | float
) -> np.ndarray:
    """The bound for segments of ``t`` operand loads and multiplier ``mu`` (any t >= 1 and
    mu > 0 give a valid bound): ``O + max(0, A - Psi) * min(t / Psi, 1 / mu)`` with
    ``A = MACs / sqrt(rho) - mu * O`` (docs/cost-model.md, "I/O lower bounds")."""
    psi = segment_capacity(s, t, mu)
    excess = np.maximum(0.0, c.macs / math.sqrt(c.reuse) - mu * c.outputs - psi)
    return c.outputs + excess * np.minimum(t / psi, 1 / np.asarray(mu, dtype=float))


def _best_on(
    c: Contraction, s: int, t_steps: np.ndarray, mu_steps: np.ndarray, t0: float, mu0: float
) -> tuple[float, float, float]:
    """The largest bound on the grid t = t0 * 2^t_steps (rounded to whole loads),
    mu = mu0 * 2^mu_steps: (value, t, mu), the first maximum in grid order."""
    ts = np.unique(np.maximum(1, np.round(t0 * np.exp2(t_steps))))[:, None]
    mus = (mu0 * np.exp2(mu_steps))[None, :]
    values = pebble_bound_at(c, s, ts, mus)
    i, j = np.unravel_index(int(np.argmax(values)), values.shape)
    return float(values[i, j]), float(ts[i, 0]), float(mus[0, j])


def pebble_bound(c: Contraction, s: int) -> int:
    """The red-blue pebble bound of contraction ``c`` with ``s`` elements of fast memory: the
    best of :func:`pebble_bound_at` over a fixed grid of (t, mu), refined around the best
    point, rounded down with a margin for floating point."""
    value, t, mu = _best_on(c, s, _T_STEPS, _MU_STEPS, float(s), math.sqrt(s))
    fine, _, _ = _best_on(c, s, _FINE, _FINE, t, mu)
    return max(0, math.floor(max(value, fine) * (1 - SAFETY)))


def io_lower_bound(graph: OpGraph, v: int, s: int) -> IOBound:
    """The I/O lower bound of op ``v`` run alone with ``s`` elements of fast memory."""
    found = contraction(graph, v)
    pebble = pebble_bound(found, s) if found is not None else 0
    return IOBound(compulsory_elements(graph, v), pebble)
