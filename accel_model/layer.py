"""The DRAM traffic of one op run on its own, by intra-layer tiling (docs/cost-model.md,
"Single-layer cost").

A layer whose weights and feature rows do not all fit the buffer still runs: it picks the
cheapest loop order the buffer allows, as an accelerator compiler (or Optimus) would. Every
order moves the layer's io and weights at least once; they differ in what they re-read:

* ``row-bands``: split the width into ``n`` column strips (``n = 1`` when a whole row fits)
  and each strip's height into bands of ``h`` output rows whose input rows fit; every weight
  streams once per band of every strip, and so does what a whole-input op reads in full;
* ``channel-passes``: hold the weights of ``m`` output channels and the input window of one
  output row, re-read the whole input once per pass;
* ``output-tiles``: keep the partial sums of ``m`` output channels x ``p`` positions on chip
  while the input channels stream by: weights are read once per position tile, the input
  once per channel tile (the classic output-stationary tiling of a matmul);
* ``streaming``: one output channel at a time with its input streamed through (always
  possible): the input is re-read once per output channel.

Each order's traffic is non-increasing in the buffer (the strip counts tried are fixed per
layer) and the cost is their minimum, so the single-layer cost never rises with the buffer
and never falls below ``io + weights``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from accel_model.rows import input_rows, is_activation_matmul, row_window
from fusionplan.ir.graph import Node, OpGraph


class LayerTiling(NamedTuple):
    """The chosen loop order of one layer and its traffic (elements, not bytes)."""

    order: str  # "row-bands" | "channel-passes" | "output-tiles" | "streaming"
    repeats: int  # weight reads (strips x bands), input reads (passes, channels) or tiles
    dram: int  # io + weights + re-reads, elements


class LayerGeometry(NamedTuple):
    """The per-op facts the loop orders need, in elements (precomputed once per graph)."""

    io: int  # |ext_in| + |ext_out| of the op alone
    inputs: int  # elements of all activation inputs (re-read by a channel pass)
    weights: int
    out_channels: int
    out_height: int
    out_row: int  # C_out * W_out: one output row
    out_width: int
    window: tuple[float, float]  # (K, S): input rows for h output rows = (h - 1) S + K
    in_rows: tuple[tuple[int, int], ...]  # per input: (row elements C*W, height)
    groups: int  # a grouped conv's output channels read only their group's input channels
    channel_weights: int  # weights per (output channel, input channel): K_h * K_w for a conv
    staged_rows: int  # input rows of one input channel one output position reads
    whole: int  # input elements every band or strip must read in full (whole-input ops)
    whole_rereads: int  # extra reads of ``whole`` when a weightless op streams


def layer_geometry(graph: OpGraph, v: int, io: int, weights: int | None = None) -> LayerGeometry:
    """The geometry of op ``v``; ``io`` is its singleton io and ``weights`` the weights the
    cost model counts (default: the node's)."""
    tensors = graph.tensors
    node = graph.nodes[v]
    c_out, h_out, w_out = graph.out_shape(v)
    ins = [tensors[t].shape for t in node.inputs]
    k, s = window = row_window(graph, v)
    return LayerGeometry(
        io=io,
        inputs=sum(c * h * w for c, h, w in ins),
        weights=node.weights if weights is None else weights,
        out_channels=max(c_out, 1),
        out_height=max(h_out, 1),
        out_row=c_out * w_out,
        out_width=w_out,
        window=window,
        in_rows=tuple((c * w, h) for c, h, w in ins),
        groups=max(node.groups, 1),
        # per (output, input) channel pair: the kernel; a bias is not staged per input channel
        channel_weights=node.kernel[0] * node.kernel[1] if node.kind == "conv" else 1,
        staged_rows=max((input_rows(k, s, 1, h) for _, h, _ in ins), default=1),
        whole=_whole_input_elements(node, ins),
        # a matmul of two activations re-reads its second operand per output row; any other
        # whole-input op needs one more pass (e.g. a softmax's max/sum, then normalise)
        whole_rereads=max(h_out - 1, 1) if is_activation_matmul(node) else 1,
    )


def _whole_input_elements(node: Node, ins: list[tuple[int, int, int]]) -> int:
    """What each band or strip of a whole-input op reads in full: the second operand of a
    matmul of two activations (every output row reads all of it), else all its inputs."""
    if not node.whole_input:
        return 0
    if is_activation_matmul(node):
        c, h, w = ins[1]
        return c * h * w
    return sum(c * h * w for c, h, w in ins)


def window_elements(geo: LayerGeometry, h: int) -> int:
    """Feature elements held to produce ``h`` output rows: the output rows and their inputs."""
    k, s = geo.window
    return geo.out_row * h + sum(row * input_rows(k, s, h, height) for row, height in geo.in_rows)


def _fits(elements: int, b: int, beta: int) -> bool:
    return b * elements < beta  # strict, as every validity test (docs/cost-model.md)


def tile_counts(width: int) -> list[int]:
    """Column-strip counts tried for an output ``width``: 1, 2, 3, 4, 6, 8, 12, ... and the
    width itself. Fixed per layer (not per buffer), so the cost stays monotone."""
    counts = {width}
    n = 1
    while n < width:
        counts.update((n, n * 3 // 2) if n > 1 else (n,))
        n *= 2
    return sorted(c for c in counts if 1 <= c <= width)


def _bands(geo: LayerGeometry, strips: int, b: int, beta: int) -> int | None:
    """Bands per strip: H_out over the tallest band whose window (split into ``strips``
    column strips) fits, or None if not even one row does."""

    def fits(h: int) -> bool:
        return _fits(-(-window_elements(geo, h) // strips), b, beta)

    if not fits(1):
        return None
    lo, hi = 1, geo.out_height  # the window grows with h: binary search the tallest band
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return math.ceil(geo.out_height / lo)


def _row_bands(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    best: LayerTiling | None = None
    for strips in tile_counts(max(geo.out_width, 1)):
        bands = _bands(geo, strips, b, beta)
        if bands is None:
            continue
        repeats = strips * bands
        if best is None or repeats < best.repeats:
            dram = geo.io + (geo.weights + geo.whole) * repeats - geo.whole
            best = LayerTiling("row-bands", repeats, dram)
        if bands == 1:
            break  # more strips only re-read the weights more often
    return best


def _channel_passes(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    if geo.weights == 0:
        return None  # nothing to hold: row bands already read everything once
    in_window = window_elements(geo, 1) - geo.out_row
    per_channel = math.ceil(geo.weights / geo.out_channels) + geo.out_width
    room = beta - b * in_window  # bytes left for m channels: b * m * per_channel < room
    if room <= 0:
        return None
    m = min(math.ceil(room / (b * per_channel)) - 1, geo.out_channels)
    if m < 1:
        return None
    passes = math.ceil(geo.out_channels / m)
    return LayerTiling("channel-passes", passes, geo.io + geo.weights + geo.inputs * (passes - 1))


def _output_tiles(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    """Output-stationary tiling: partial sums of ``m`` channels x ``p`` positions stay on chip
    while the input channels stream by, each staging its weights for the ``m`` channels and
    its window for the ``p`` positions. Weights are read once per position tile, the input
    once per channel tile (a grouped conv's tile reads only its groups' inputs)."""
    if geo.weights == 0:
        return None
    positions = geo.out_height * max(geo.out_width, 1)
    best: LayerTiling | None = None
    for m in tile_counts(geo.out_channels):
        staged = b * m * geo.channel_weights
        p = min(positions, (beta - 1 - staged) // (b * (m + geo.staged_rows)))
        if p < 1:
            continue
        channel_tiles = math.ceil(geo.out_channels / m)
        position_tiles = math.ceil(positions / p)
        input_reads = math.ceil(channel_tiles / geo.groups)
        dram = geo.io + geo.weights * position_tiles + geo.inputs * (input_reads - 1)
        if best is None or dram < best.dram:
            best = LayerTiling("output-tiles", channel_tiles * position_tiles, dram)
    return best


def _streaming(geo: LayerGeometry) -> LayerTiling:
    if geo.weights == 0:
        reads = geo.whole_rereads if geo.whole else 0
        return LayerTiling("streaming", 1 + reads, geo.io + geo.whole * reads)
    reads = geo.out_channels
    return LayerTiling("streaming", reads, geo.io + geo.weights + geo.inputs * (reads - 1))


def single_layer_tiling(geo: LayerGeometry, b: int, beta: int) -> LayerTiling:
    """The cheapest loop order of one layer at buffer ``beta`` bytes (``b`` bytes/element).

    Ties prefer the earlier order (row bands, channel passes, output tiles, streaming).
    """
    options = [
        _row_bands(geo, b, beta),
        _channel_passes(geo, b, beta),
        _output_tiles(geo, b, beta),
        _streaming(geo),
    ]
    return min((o for o in options if o is not None), key=lambda o: o.dram)


def optimus_blocking(
    shape: tuple[int, int, int, int],
    kernel_area: int,
    stride: int,
    weights: int,
    lower: int,
    capacity: int,
) -> int | None:
    """Optimus's single-layer DRAM estimate (docs/cost-model.md, "The optimus profile"), in
    elements, for a dense conv or linear layer of ``shape`` = (C_in, C_out, H_out, W_out)
    with ``capacity`` elements of buffer: the best of its five loop blockings (output-,
    weight- and input-stationary, all input or all output channels resident), blocked
    optimally. Like Optimus it reads the input as ``C_in x (H_out S) x (W_out S)`` (no halo)
    and unrolls at least ``lower`` output channels and columns. None if nothing fits."""
    c_in, c_out, h_out, w_out = shape
    rd, s2, nhw = kernel_area, stride * stride, h_out * w_out
    ifmap, ofmap = c_in * h_out * stride * w_out * stride, c_out * nhw
    lb_k, lb_w = min(c_out, lower), min(w_out, lower)

    def pixels(bhw: int) -> int:
        """The largest w x h <= bhw with lb_w <= w <= W_out, h <= H_out (0: none)."""
        if bhw >= nhw:
            return nhw
        return max((w * min(h_out, bhw // w) for w in range(lb_w, min(w_out, bhw) + 1)), default=0)

    def total(*terms: float) -> int:
        return sum(math.ceil(t) for t in terms)

    best: int | None = None

    def keep(cost: int) -> None:
        nonlocal best
        if best is None or cost < best:
            best = cost

    for k in range(lb_k, c_out + 1):
        # output stationary: one input channel at a time, k outputs x bhw pixels resident
        if capacity > rd * k and (n := pixels((capacity - rd * k) // (k + s2))):
            keep(total(ifmap * c_out / k, ofmap, weights * nhw / n))
        # weight stationary: the fewest pixels, as many input channels as fit
        room = capacity - lb_w * k
        c = min(room // (rd * k + lb_w * s2), c_in) if room > 0 else 0
        if c >= 1:
            keep(total(ifmap * c_out / k, ofmap * (2 * c_in / c - 1), weights))
    # all input channels resident (lb_k outputs), or all output channels (one input channel)
    for k, c in ((lb_k, c_in), (c_out, 1)):
        if capacity > rd * c * k and (n := pixels((capacity - rd * c * k) // (k + c * s2))):
            keep(total(ifmap, ofmap, weights * nhw / n))
    # input stationary: lb_k outputs, c input channels and bhw pixels resident
    for c in range(1, c_in + 1):
        if capacity <= rd * c * lb_k:
            break
        if n := pixels((capacity - rd * c * lb_k) // (lb_k + c * s2)):
            keep(total(ifmap, ofmap * (2 * c_in / c - 1), weights * nhw / n))
    return best
