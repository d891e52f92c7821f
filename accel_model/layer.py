"""The DRAM traffic of one op run on its own, by intra-layer tiling (docs/cost-model.md,
"Single-layer cost").

A layer whose weights and feature rows do not all fit the buffer still runs: it picks the
cheapest loop order the buffer allows, as an accelerator compiler (or Optimus) would. Every
order moves the layer's io and weights at least once; they differ in what they re-read:

* ``row-bands``: split the width into ``n`` column strips (``n = 1`` when a whole row fits)
  and each strip's height into bands of ``h`` output rows whose input window (halo columns
  included) fits; every weight streams once per band of every strip, and so does what a
  whole-input op reads in full; a strip re-reads its halo columns;
* ``channel-passes``: hold the weights of ``m`` output channels and the input window of one
  output row, re-read the whole input once per pass;
* ``output-tiles``: keep the partial sums of ``m`` output channels x a tile of positions (a
  band of whole rows, or a segment of one row) on chip while the input channels stream by,
  each staging its weights for the ``m`` channels and its window for the tile: weights are
  read once per position tile, each tile's input window once per channel tile (the classic
  output-stationary tiling of a matmul);
* ``streaming``: one output channel at a time, the partial sums of a band of its rows on
  chip, the input of its group streamed through (each element scattered into the sums it
  feeds): the input is re-read once per output channel;
* ``direct``: one output element at a time, its weights streamed and its window read one
  input row (of one input channel, for an op that reduces over them) at a time and folded
  into it: the last resort, holding one output element and one row segment of its window
  (the tools' profiles keep their charge: every MAC's two operands read, no buffer).

The fit tests count the unclipped window of a block; once they have chosen the block, the
default profile counts its DRAM and what it holds from the read windows its schedule uses
(accel_model/windows.py: no padding, stride gaps read through), so that the replay of
accel_model/schedule_layer.py moves and holds exactly that; the tools' profiles keep the
``(h - 1) S + K`` counts. Each order's traffic is non-increasing in the buffer (the strip and
channel counts tried are fixed per layer) and the cost is their minimum, so the single-layer
cost never rises with the buffer and never falls below ``io + weights``. Every order holds
what it computes from: its costs are checked against the I/O lower bounds of
docs/cost-model.md, "I/O lower bounds".
"""

from __future__ import annotations

import math
from typing import NamedTuple

from accel_model import windows
from accel_model.channels import ChannelRole, channel_role, is_depthwise
from accel_model.rows import input_rows, is_activation_matmul, row_window
from fusionplan.ir.graph import Node, OpGraph

Range = tuple[int, int]


class LayerTiling(NamedTuple):
    """The chosen loop order of one layer, its traffic and what it holds (elements, not
    bytes); the block sizes are what its schedule lays out (accel_model/schedule_layer.py)."""

    order: str  # "row-bands" | "channel-passes" | "output-tiles" | "streaming" | "direct"
    repeats: int  # weight reads (strips x bands), input reads (passes, channels) or tiles
    dram: int  # io + weights + re-reads, elements
    held: int = 0  # elements its schedule holds (default profile; else as its fit test counts)
    rows: int = 0  # output rows of a block: a band, a tile, a pass's one row
    cols: int = 0  # output columns of a block: the widest strip, a tile's, the whole width
    channels: int = 0  # output channels of a block: a pass's or tile's m, all, or one


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
    in_shapes: tuple[tuple[int, int, int], ...]  # per input: (C, H, W)
    col_window: tuple[int, int] | None  # conv/pool (span, stride) along W; None: proportional
    even_split: bool  # an activation matmul: a strip of output columns reads its share of all
    groups: int  # a grouped conv's output channels read only their group's input channels
    channel_weights: int  # weights per (output channel, input channel): K_h * K_w for a conv
    whole: int  # input elements every band or strip must read in full (whole-input ops)
    whole_rereads: int  # extra reads of ``whole`` when a weightless op streams
    # the op itself, for the exact read windows (accel_model/windows.py) its schedule uses;
    # ``physical`` False keeps the tools' conventions (the optimus profile): windows of
    # ``(h - 1) S + K`` rows, padding included
    whole_rows: bool = False  # every output column reads whole input rows (a matmul, Gemm)
    graph: OpGraph | None = None
    op: int = -1
    physical: bool = False
    memo: dict | None = None  # exact window sums, per (input, axis, block size)
    room: tuple[tuple[int, int, int, int], ...] = ()  # an epilogue's regions: see ``room``


def layer_geometry(
    graph: OpGraph, v: int, io: int, weights: int | None = None, physical: bool = True
) -> LayerGeometry:
    """The geometry of op ``v``; ``io`` is its singleton io and ``weights`` the weights the
    cost model counts (default: the node's). ``physical``: count what the schedule reads and
    holds (the default profile); else the tools' conventions (docs/cost-model.md)."""
    tensors = graph.tensors
    node = graph.nodes[v]
    c_out, h_out, w_out = graph.out_shape(v)
    ins = [tensors[t].shape for t in node.inputs]
    weights = node.weights if weights is None else weights
    col_window = None
    if node.kind in ("conv", "pool") and node.op_type != "ConvTranspose":
        col_window = ((node.kernel[1] - 1) * node.dilation[1] + 1, node.stride[1])
    return LayerGeometry(
        io=io,
        inputs=sum(c * h * w for c, h, w in ins),
        weights=weights,
        out_channels=max(c_out, 1),
        out_height=max(h_out, 1),
        out_row=c_out * w_out,
        out_width=max(w_out, 1),
        window=row_window(graph, v),
        in_shapes=tuple(ins),
        col_window=col_window,
        even_split=is_activation_matmul(node),
        groups=max(node.groups, 1),
        channel_weights=_channel_weights(node, weights, c_out, ins),
        whole=_whole_input_elements(node, ins),
        # a matmul of two activations re-reads its second operand per output row; any other
        # whole-input op needs one more pass (e.g. a softmax's max/sum, then normalise)
        whole_rereads=max(h_out - 1, 1) if is_activation_matmul(node) else 1,
        whole_rows=node.whole_input
        or (node.kind != "conv" and channel_role(graph, v) == ChannelRole.MIXING),
        graph=graph,
        op=v,
        physical=physical,
        memo={},
    )


def _channel_weights(node: Node, weights: int, c_out: int, ins: list[tuple[int, int, int]]) -> int:
    """Weights per (output, input) channel pair: the kernel of a conv (a bias is not staged
    per input channel), the weights a linear layer's output reads from one input channel
    (1 for a token's features, the map of a classifier over a flattened map)."""
    if node.kind == "conv":
        return node.kernel[0] * node.kernel[1]
    c_in = ins[0][0] if ins else 1
    return max(1, weights // max(c_out * c_in, 1))


def _whole_input_elements(node: Node, ins: list[tuple[int, int, int]]) -> int:
    """What each band or strip of a whole-input op reads in full: the second operand of a
    matmul of two activations (every output row reads all of it), else all its inputs."""
    if not node.whole_input:
        return 0
    if is_activation_matmul(node):
        c, h, w = ins[1]
        return c * h * w
    return sum(c * h * w for c, h, w in ins)


def input_cols(geo: LayerGeometry, i: int, cols: int) -> int:
    """Columns of input ``i`` that ``cols`` adjacent output columns read: the whole row for
    a full-width block, a conv's or pool's window ``(cols - 1) * stride + span``, the same
    columns for an op of the input's width, a broadcast input's one column, else the
    proportional columns and two more (a resize's taps)."""
    width = geo.in_shapes[i][2]
    if cols >= geo.out_width or (geo.physical and geo.whole_rows):
        return width
    if geo.col_window is not None:
        span, stride = geo.col_window
        return min(width, (cols - 1) * stride + span)
    if width == geo.out_width or width == 1:
        return min(width, cols)
    return min(width, -(-cols * width // geo.out_width) + 2)


def _rows_in(geo: LayerGeometry, i: int, rows: int) -> int:
    """Rows of input ``i`` that ``rows`` adjacent output rows read."""
    k, s = geo.window
    return input_rows(k, s, rows, geo.in_shapes[i][1])


def _blocks(total: int, size: int) -> list[tuple[int, int]]:
    """``total`` split into blocks of ``size`` (the last one shorter): (block size, count)."""
    full, rest = divmod(total, size)
    return [(size, full)] + ([(rest, 1)] if rest else [])


def _halo(geo: LayerGeometry, row_block: int, col_block: int) -> int:
    """Input elements read beyond each input once when the output is cut into blocks of
    ``row_block`` rows x ``col_block`` columns, each block reading its whole window: the
    halo rows and columns shared by neighbouring blocks (none for an activation matmul, whose
    column strips split its inputs: it re-reads what it reads in full instead)."""
    if geo.even_split:
        return 0
    extra = 0
    for i, (c, h, w) in enumerate(geo.in_shapes):
        rows = sum(n * _rows_in(geo, i, r) for r, n in _blocks(geo.out_height, row_block))
        cols = sum(n * input_cols(geo, i, q) for q, n in _blocks(geo.out_width, col_block))
        extra += c * max(0, rows * cols - h * w)
    return extra


def window_elements(geo: LayerGeometry, h: int, cols: int | None = None) -> int:
    """Feature elements held to produce ``h`` output rows over ``cols`` output columns
    (default: the whole width): the output block and the input window it reads."""
    cols = geo.out_width if cols is None else min(cols, geo.out_width)
    if geo.even_split and cols < geo.out_width and not geo.physical:
        return -(-window_elements(geo, h) * cols // geo.out_width)
    held = geo.out_row * h * cols // geo.out_width
    for i, (c, _, _) in enumerate(geo.in_shapes):
        held += c * _rows_in(geo, i, h) * input_cols(geo, i, cols)
    return held


# -- what the schedule reads and holds (the default profile) ---------------------------------
class _Windows(NamedTuple):
    """The real read windows of one input along one axis when the output is cut into blocks
    (accel_model/windows.py: padding and the input's edge clipped, stride gaps kept)."""

    total: int  # summed over the blocks
    most: int  # the largest block's
    union: int  # what some block reads


def _union(spans: list[Range]) -> int:
    """How many indices the half-open ``spans`` cover together."""
    covered, end = 0, 0
    for a, b in sorted(spans):
        if b > end:
            covered += b - max(a, end)
            end = b
    return covered


def _split(total: int, size: int) -> list[Range]:
    """``(0, total)`` cut into blocks of ``size`` (the last one shorter)."""
    return [(a, min(a + size, total)) for a in range(0, total, max(size, 1))]


def _windows(geo: LayerGeometry, i: int, axis: int, size: int) -> _Windows:
    """Input ``i``'s windows along ``axis`` (0 rows, 1 columns) for output blocks of ``size``
    (a block spanning the whole width reads whole rows, as the schedule's full strips do)."""
    key = ("win", i, axis, size)
    hit = geo.memo.get(key)
    if hit is None:
        graph, v = geo.graph, geo.op
        extent = geo.out_height if axis == 0 else geo.out_width
        spans = [
            windows.input_rows(graph, v, i, block)
            if axis == 0
            else windows.input_cols(graph, v, i, None if block == (0, extent) else block)
            for block in _split(extent, size)
        ]
        sizes = [b - a for a, b in spans]
        hit = geo.memo[key] = _Windows(sum(sizes), max(sizes), _union(spans))
    return hit


def _fed(geo: LayerGeometry, i: int, rows: int) -> tuple[int, int]:
    """Input ``i``'s rows that bands of ``rows`` output rows feed, one output row's window
    at a time (streaming): summed over the bands, and all bands together."""
    graph, v = geo.graph, geo.op
    spans = [windows.input_rows(graph, v, i, (r, r + 1)) for r in range(geo.out_height)]
    bands = [_union(spans[a:b]) for a, b in _split(geo.out_height, rows)]
    return sum(bands), _union(spans)


def _channel_rule(geo: LayerGeometry, i: int) -> tuple[str, int, int]:
    """How op's output channels map to input ``i``'s (accel_model/windows.py's
    ``input_channels``, as arithmetic, so that a sum over channel tiles costs no calls):
    ``("all", 0, C)``, ``("groups", out, in)`` per group, ``("mult", m, 0)`` a depthwise
    multiplier, ``("shift", offset, C)`` the same channels shifted (a concat's part)."""
    key = ("rule", i)
    hit = geo.memo.get(key)
    if hit is None:
        graph, v = geo.graph, geo.op
        node = graph.nodes[v]
        c_in, c_out = geo.in_shapes[i][0], geo.out_channels
        role = channel_role(graph, v)
        hit = ("all", 0, c_in)
        per_batch = windows.batch_channels(graph, v, i)
        if per_batch is not None:
            hit = ("groups", 1, per_batch)
        elif role == ChannelRole.MIXING:
            g = max(node.groups, 1)
            if g > 1 and not c_out % g and not c_in % g:
                hit = ("groups", c_out // g, c_in // g)
        elif role == ChannelRole.LOCAL:
            if c_in == 1 and c_out > 1:
                hit = ("groups", c_out, 1)  # a broadcast input: its one channel
            elif is_depthwise(graph, v) and c_out != c_in and not c_out % c_in:
                hit = ("mult", c_out // c_in, 0)
            else:
                hit = ("shift", 0, c_in)
        elif (offset := windows.concat_offset(graph, v, i)) is not None:
            hit = ("shift", offset, c_in)
        geo.memo[key] = hit
    return hit


def _tile_channels(rule: tuple[str, int, int], a: int, b: int) -> int:
    """How many input channels output channels ``a..b`` read under ``rule``."""
    kind, p, q = rule
    if kind == "all":
        return q
    if kind == "groups":
        return ((b - 1) // p - a // p + 1) * q
    if kind == "mult":
        return (b - 1) // p - a // p + 1
    return max(0, min(b - p, q) - max(a - p, 0))


def _tile_sums(rule: tuple[str, int, int], m: int, c_out: int) -> tuple[int, int]:
    """(channels read summed over the tiles of ``m`` output channels, the most one tile
    reads) under ``rule``; in closed form where every tile reads alike or the channels are
    shifted (tiles partition the output channels: interior ones are whole), else per tile."""
    kind, p, q = rule
    tiles = -(-c_out // m)
    if kind == "all" or (kind == "groups" and p >= c_out):
        return tiles * q, q
    if kind == "shift":
        lo, hi = max(p, 0), min(p + q, c_out)
        if lo >= hi:
            return 0, 0
        first, last = lo // m, (hi - 1) // m
        ends = (_tile_channels(rule, t * m, min(t * m + m, c_out)) for t in (first, last))
        return hi - lo, max(*ends, m if last - first >= 2 else 0)
    found = [_tile_channels(rule, a, b) for a, b in _split(c_out, m)]
    return sum(found), max(found)


def _channel_reads(geo: LayerGeometry, i: int, m: int) -> tuple[int, int, int]:
    """Input ``i``'s channels over the output-channel tiles of ``m``: (read one output
    channel at a time, read once per tile, the most one tile reads). A mixing op's tile
    reads its groups' channels once; a channel-local op reads each output channel's own."""
    key = ("ch", i, m)
    hit = geo.memo.get(key)
    if hit is None:
        per_tile, most = _tile_sums(_channel_rule(geo, i), m, geo.out_channels)
        per_channel = per_tile
        if m > 1 and not windows.reduces_over_inputs(geo.graph, geo.op):
            per_channel = _channel_reads(geo, i, 1)[1]
        hit = geo.memo[key] = (per_channel, per_tile, most)
    return hit


def _per_tensor(geo: LayerGeometry, held: list[int]) -> int:
    """Elements held per input, summed over distinct tensors (two inputs of one tensor, as
    in ``x * x``, share its cells: the larger counts)."""
    node = geo.graph.nodes[geo.op]
    most: dict[int, int] = {}
    for t, n in zip(node.inputs, held, strict=True):
        most[t] = max(most.get(t, 0), n)
    return sum(most.values())


def _whole_part(geo: LayerGeometry, i: int) -> bool:
    """Input ``i`` is read in full by every band of a whole-input op (the schedule's
    ``whole_part``): the second operand of a matmul of two activations, else every input."""
    return bool(geo.whole) and (i == 1 or not geo.even_split)


def _bands_exact(geo: LayerGeometry, h: int, width: int, repeats: int) -> tuple[int, int]:
    """(DRAM, held) of row bands ``h`` x ``width`` as the schedule runs them: rows roll down
    a strip, the next strip re-reads the halo columns, a whole-input op's full reads repeat
    per band, and the rows no window reaches are read once at the end."""
    extra, held = 0, []
    for i, (c, h_in, w_in) in enumerate(geo.in_shapes):
        rows, cols = _windows(geo, i, 0, h), _windows(geo, i, 1, width)
        ch = _channel_reads(geo, i, geo.out_channels)[1]
        held.append(ch * rows.most * cols.most)
        if _whole_part(geo, i):
            extra += ch * rows.most * cols.most * repeats - c * h_in * w_in
        elif not geo.whole:
            extra += ch * rows.union * (cols.total - cols.union)
    dram = geo.io + geo.weights * repeats + extra
    block = geo.out_channels * h * min(width, geo.out_width)
    return dram, block + _per_tensor(geo, held) + room(geo, geo.out_channels, h, width, True)


def _tiles_exact(geo: LayerGeometry, m: int, rows: int, cols: int) -> tuple[int, int]:
    """(input elements read, one input channel's largest windows) of output tiles of ``m``
    channels x ``rows`` x ``cols``: each tile's window per channel it reads, and the cells no
    window reaches once per channel tile."""
    reads, held = 0, []
    for i, (_, h_in, w_in) in enumerate(geo.in_shapes):
        r, k = _windows(geo, i, 0, rows), _windows(geo, i, 1, cols)
        per_channel, per_tile, _ = _channel_reads(geo, i, m)
        reads += per_channel * r.total * k.total + per_tile * (h_in * w_in - r.union * k.union)
        held.append(r.most * k.most)
    return reads, _per_tensor(geo, held)


def room(geo: LayerGeometry, m: int, rows: int, cols: int, held: bool = False) -> int:
    """Elements an epilogue holds beside an output block of ``m`` channels x ``rows`` x
    ``cols`` (docs/cost-model.md, "Single-layer cost", "Epilogues"): per region
    ``(dm, dr, dc, k)``, ``k`` times the block's channels, rows and columns each divided
    (rounded up) by its divisor, a divisor of 0 counting 1 (a broadcast dimension). A
    pooling's waiting rows, ``(1, -kh, -kw, k)``, are ``k m`` elements: the fit tests always
    count them (so they stay monotone), the ``held`` figure only when a block does not end
    on the pooling's windows."""

    def part(n: int, d: int) -> int:
        return -(-n // d) if d else 1

    total = 0
    for dm, dr, dc, k in geo.room:
        if dr >= 0:
            total += k * part(m, dm) * part(rows, dr) * part(cols, dc)
        elif not held or rows % -dr or (cols < geo.out_width and cols % -dc):
            total += k * m
    return total


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


def _tallest(fits, top: int) -> int:
    """The largest ``h <= top`` with ``fits(h)`` (``fits`` is monotone), 0 if none."""
    if top < 1 or not fits(1):
        return 0
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _band_height(geo: LayerGeometry, width: int, b: int, beta: int) -> int:
    """The tallest band of a strip ``width`` output columns wide whose window fits (0: none)."""
    c = geo.out_channels

    def fits(h: int) -> bool:
        return _fits(window_elements(geo, h, width) + room(geo, c, h, width), b, beta)

    return _tallest(fits, geo.out_height)


def _row_bands(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    best: LayerTiling | None = None
    widths = sorted({-(-geo.out_width // n) for n in tile_counts(geo.out_width)}, reverse=True)
    for width in widths:  # strips of ``width`` columns (the last one narrower)
        h = _band_height(geo, width, b, beta)
        if h == 0:
            continue
        bands = math.ceil(geo.out_height / h)
        repeats = math.ceil(geo.out_width / width) * bands
        if geo.physical:
            dram, held = _bands_exact(geo, h, width, repeats)
        else:
            halo = _halo(geo, geo.out_height, width)  # rows roll down a strip: columns only
            dram = geo.io + halo + (geo.weights + geo.whole) * repeats - geo.whole
            held = window_elements(geo, h, width)
        if _fits(held, b, beta) and (best is None or dram < best.dram):
            best = LayerTiling("row-bands", repeats, dram, held, h, width, geo.out_channels)
        if bands == 1:
            break  # more strips only re-read the weights and halos more often
    return best


def _channel_passes(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    if geo.weights == 0:
        return None  # nothing to hold: row bands already read everything once
    in_window = window_elements(geo, 1) - geo.out_row
    per_channel = math.ceil(geo.weights / geo.out_channels) + geo.out_width
    width = geo.out_width

    def held(m: int, window: int, exact: bool = False) -> int:
        return m * per_channel + window + room(geo, m, 1, width, exact)

    m = _tallest(lambda m: _fits(held(m, in_window), b, beta), geo.out_channels)
    if m < 1:
        return None
    passes = math.ceil(geo.out_channels / m)
    dram = geo.io + geo.weights + geo.inputs * (passes - 1)
    if geo.physical:  # one output row's window of the channels a pass reads
        windows_held = [
            _channel_reads(geo, i, m)[2] * _windows(geo, i, 0, 1).most * w
            for i, (_, _, w) in enumerate(geo.in_shapes)
        ]
        in_window = _per_tensor(geo, windows_held)
    return LayerTiling("channel-passes", passes, dram, held(m, in_window, True), 1, width, m)


def _channel_window(geo: LayerGeometry, rows: int, cols: int) -> int:
    """The window one input channel stages for a block of output positions (the largest
    over the inputs)."""
    return max(
        (_rows_in(geo, i, rows) * input_cols(geo, i, cols) for i in range(len(geo.in_shapes))),
        default=0,
    )


def _position_tile(geo: LayerGeometry, m: int, b: int, beta: int) -> tuple[int, int] | None:
    """The largest tile of positions (rows, columns) whose partial sums for ``m`` channels
    fit beside one input channel's staged weights and window: the tallest band of whole
    rows, else the widest segment of one row; None if not even one position fits."""
    staged = m * geo.channel_weights

    def fits(rows: int, cols: int) -> bool:
        held = staged + m * rows * cols + _channel_window(geo, rows, cols)
        return _fits(held + room(geo, m, rows, cols), b, beta)

    width = geo.out_width
    rows = _tallest(lambda r: fits(r, width), geo.out_height)
    if rows:
        return rows, width
    cols = _tallest(lambda q: fits(1, q), width - 1)
    return (1, cols) if cols else None


def _output_tiles(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    """Output-stationary tiling: partial sums of ``m`` channels x a tile of positions stay on
    chip while the input channels stream by, each staging its weights for the ``m`` channels
    and its window for the tile. A tile is a band of ``r`` whole rows, or (when one row does
    not fit) a segment of ``q`` columns of one row. Weights are read once per position tile,
    each tile's window once per channel tile (a grouped conv's tile reads only its groups'
    inputs); neighbouring tiles re-read their shared halo."""
    if geo.weights == 0:
        return None
    best: LayerTiling | None = None
    for m in tile_counts(geo.out_channels):
        block = _position_tile(geo, m, b, beta)
        if block is None:
            continue
        tiles = math.ceil(geo.out_height / block[0]) * math.ceil(geo.out_width / block[1])
        staged = m * geo.channel_weights
        if geo.physical:
            reads, window = _tiles_exact(geo, m, *block)
        else:
            input_reads = math.ceil(math.ceil(geo.out_channels / m) / geo.groups)
            reads = (geo.inputs + _halo(geo, *block)) * input_reads
            window = _channel_window(geo, *block)
        dram = geo.io - geo.inputs + geo.weights * tiles + reads
        held = staged + m * block[0] * block[1] + window + room(geo, m, *block, True)
        if _fits(held, b, beta) and (best is None or dram < best.dram):
            repeats = math.ceil(geo.out_channels / m) * tiles
            best = LayerTiling("output-tiles", repeats, dram, held, *block, m)
    return best


def _streaming(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    """One output channel at a time: a band of its rows' partial sums on chip beside the
    weights of one (output, input) channel pair and the input row being scattered, the input
    of its group streamed through once per band (a weightless op: one output row at a time,
    of one channel if it is channel-local, its window held)."""
    if geo.weights == 0:
        return _streaming_weightless(geo, b, beta)
    width = geo.out_width
    row_in = max(w for _, _, w in geo.in_shapes) if geo.physical else 0
    staged = geo.channel_weights + row_in

    def held(r: int, exact: bool = False) -> int:
        return r * width + staged + room(geo, 1, r, width, exact)

    rows = _tallest(lambda r: _fits(held(r), b, beta), geo.out_height)
    if rows == 0:
        return None
    bands = math.ceil(geo.out_height / rows)
    if geo.physical:  # each band reads the rows its outputs' windows feed, per channel
        reads = 0
        for i, (_, h_in, w_in) in enumerate(geo.in_shapes):
            fed, reached = _fed(geo, i, rows)
            reads += _channel_reads(geo, i, 1)[1] * w_in * (fed + h_in - reached)
    else:
        per_channel = geo.inputs + _halo(geo, rows, width)  # the input once, with band halos
        reads = per_channel * math.ceil(geo.out_channels / geo.groups)
    dram = geo.io - geo.inputs + geo.weights * bands + reads
    return LayerTiling(
        "streaming", geo.out_channels * bands, dram, held(rows, True), rows, width, 1
    )


def _streaming_weightless(geo: LayerGeometry, b: int, beta: int) -> LayerTiling | None:
    """A weightless op, one output row at a time (of one channel if it is channel-local)
    over a rolling window of its input rows: every input read once, if that fits (else
    None: ``direct`` runs it). The tools' conventions charge a second pass over what a
    whole-input op reads in full (no fit test)."""
    reads = geo.whole_rereads if geo.whole else 0
    fallback = LayerTiling("streaming", 1 + reads, geo.io + geo.whole * reads)
    if not geo.physical:
        return fallback
    chunk = 1 if windows.streams_channels(geo.graph, geo.op) else geo.out_channels
    extra, held = 0, []
    for i, (_, _, w_in) in enumerate(geo.in_shapes):
        rows = _windows(geo, i, 0, 1)
        per_chunk, most = _channel_reads(geo, i, chunk)[1:]
        every = _channel_reads(geo, i, geo.out_channels)[1]
        extra += (per_chunk - every) * rows.union * w_in  # a broadcast input, once per chunk
        held.append(most * rows.most * w_in)
    width = geo.out_width
    held_all = chunk * width + _per_tensor(geo, held)
    if not _fits(held_all + room(geo, chunk, 1, width), b, beta):
        return None  # ``direct`` runs it one output element at a time
    held_all += room(geo, chunk, 1, width, True)
    return LayerTiling("streaming", 1, geo.io + extra, held_all, 1, width, chunk)


def _direct(geo: LayerGeometry) -> LayerTiling | None:
    """Each output element alone, output channel by output channel (docs/cost-model.md,
    "Single-layer cost"): its weights streamed, its window read one input row (of one input
    channel, for an op that reduces over them) at a time and folded into it; each channel's
    pass reads the cells no window reaches. It moves what output tiles of one channel and
    one position move, and holds the element, one row segment per input and the epilogue's
    room. The tools' profiles charge each MAC's operands instead (no buffer, weighted ops)."""
    outputs = geo.out_channels * geo.out_height * geo.out_width
    if not geo.physical:
        if not geo.weights:
            return None
        per_output = math.ceil(geo.weights / geo.out_channels)
        return LayerTiling("direct", outputs, geo.io + 2 * per_output * outputs)
    reads, _ = _tiles_exact(geo, 1, 1, 1)
    positions = geo.out_height * geo.out_width
    dram = geo.io - geo.inputs + geo.weights * positions + reads
    one_channel = windows.reduces_over_inputs(geo.graph, geo.op)
    segments = []
    for i in range(len(geo.in_shapes)):
        channels = _channel_reads(geo, i, 1)[2]
        segments.append(min(channels, 1 if one_channel else channels) * _windows(geo, i, 1, 1).most)
    held = 1 + _per_tensor(geo, segments) + room(geo, 1, 1, 1, True)
    return LayerTiling("direct", outputs, dram, held, 1, 1, 1)


def loop_orders(geo: LayerGeometry, b: int, beta: int) -> list[LayerTiling]:
    """Every loop order the buffer allows for the layer, in the tie-break order (row bands,
    channel passes, output tiles, streaming, direct). ``direct`` is always listed, as the
    last resort: where even it holds ``beta`` or more, no schedule runs the layer at this
    buffer (the cost then reports that buffer). Under the tools' profiles a weightless op
    always streams and an op with weights can always run direct."""
    options = [
        _row_bands(geo, b, beta),
        _channel_passes(geo, b, beta),
        _output_tiles(geo, b, beta),
        _streaming(geo, b, beta),
        _direct(geo),
    ]
    return [o for o in options if o is not None]


def single_layer_tiling(geo: LayerGeometry, b: int, beta: int) -> LayerTiling:
    """The cheapest loop order of one layer at buffer ``beta`` bytes (``b`` bytes/element).

    Ties prefer the earlier order (row bands, channel passes, output tiles, streaming,
    direct).
    """
    return min(loop_orders(geo, b, beta), key=lambda o: o.dram)


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
