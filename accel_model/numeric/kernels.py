"""The ONNX ops the numeric replay runs, in numpy (float64), on ONNX-shaped arrays.

Each kernel keeps to the op's ONNX definition (attributes, defaults and opset changes named
where they matter) and lets a NaN in any input element reach every output element that
element feeds: the replay fills what the buffer does not hold with NaN, so a NaN in a
computed block is the proof that a compute needed an element the schedule never loaded
(docs/cost-model.md, "Numeric replay"). Kernels therefore avoid NaN-dropping forms
(``fmax``, masked sums) and pad with zeros or -inf only where ONNX pads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import helper

from fusionplan.ir.errors import ModelError

Array = np.ndarray
Attrs = dict[str, object]

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: Array) -> Array:
    """The error function elementwise (numpy has none; math.erf keeps NaN)."""
    return _erf(x).astype(np.float64)


def attributes(node: onnx.NodeProto) -> Attrs:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------ windows
def _window_geometry(node: onnx.NodeProto, attrs: Attrs, x: Array, kernel: Sequence[int]):
    """Pads (begin, end per spatial axis), strides and dilations of a conv or pool over
    the spatial axes of ``x`` (N, C, spatial...), auto_pad resolved as ONNX defines it."""
    nd = x.ndim - 2
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    auto_pad = _text(attrs.get("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            size = x.shape[2 + i]
            out = -(-size // strides[i])
            span = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (out - 1) * strides[i] + span - size)
            small, big = total // 2, total - total // 2
            pads[i], pads[nd + i] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    return [(pads[i], pads[nd + i]) for i in range(nd)], strides, dilations


def _windows(
    x: Array, kernel: Sequence[int], pads, strides, dilations, fill: float, ceil_mode: bool
) -> Array:
    """Every window of ``x`` (N, C, spatial...): shape (N, C, out..., kernel...), padded
    with ``fill``; ``ceil_mode`` keeps a last window that starts inside the padded input."""
    nd = x.ndim - 2
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    outs, extra = [], []
    for i in range(nd):
        room = x.shape[2 + i] + pads[i][0] + pads[i][1] - spans[i]
        out = (-(-room // strides[i]) if ceil_mode else room // strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= x.shape[2 + i] + pads[i][0]:
            out -= 1  # ONNX: the last window must start inside the input or its begin pad
        outs.append(out)
        extra.append(max(0, (out - 1) * strides[i] + spans[i] - x.shape[2 + i] - sum(pads[i])))
    widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra, strict=True)]
    xp = np.pad(x, widths, constant_values=fill)
    win = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))
    index = (slice(None), slice(None))
    index += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides, strict=True))
    index += tuple(slice(None, None, d) for d in dilations)
    return win[index]


def _spatial(fn: Callable[..., Array]) -> Callable[..., Array]:
    """Run a 2-D window kernel on 1-D inputs (N, C, L) by adding a unit axis."""

    def run(node, attrs, x, *rest, **options):
        if x.ndim == 3:
            return fn(node, attrs, x[..., None], *rest, **options)[..., 0]
        if x.ndim != 4:
            raise ModelError(f"{node.op_type} '{node.name}': only 1-D and 2-D maps are replayed")
        return fn(node, attrs, x, *rest, **options)

    return run


@_spatial
def conv(node, attrs: Attrs, x: Array, w: Array, b: Array | None = None, *, rows=None) -> Array:
    """ONNX Conv: pads, strides, dilations, groups (depthwise included), optional bias.
    ``rows`` (output rows, half-open) computes only those rows, the others NaN."""
    if w.ndim == 3:
        w = w[..., None]
    kernel = list(attrs.get("kernel_shape", w.shape[2:]))
    if len(kernel) == 1:
        kernel = [*kernel, 1]
    attrs = _two_d(attrs)
    pads, strides, dilations = _window_geometry(node, attrs, x, kernel)
    win = _windows(x, kernel, pads, strides, dilations, 0.0, False)
    group = int(attrs.get("group", 1))
    if rows is not None:
        full = np.full((x.shape[0], w.shape[0], *win.shape[2:4]), np.nan)
        full[:, :, rows[0] : rows[1]] = conv_rows(win[:, :, rows[0] : rows[1]], w, b, group)
        return full
    return conv_rows(win, w, b, group)


def conv_rows(win: Array, w: Array, b: Array | None, group: int) -> Array:
    """A conv's outputs from its windows (N, C, out rows, out cols, kh, kw)."""
    n, c = win.shape[:2]
    m = w.shape[0]
    oy, ox, kh, kw = win.shape[2:]
    # per group, (positions x window) @ (window x output channels): one batched matmul
    cols = win.reshape(n, group, c // group, oy, ox, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(group, n * oy * ox, -1)
    wg = w.reshape(group, m // group, -1).transpose(0, 2, 1)
    y = np.matmul(cols, wg).reshape(group, n, oy, ox, m // group)
    y = y.transpose(1, 0, 4, 2, 3).reshape(n, m, oy, ox)
    if b is not None:
        y = y + b.reshape(1, m, 1, 1)
    return y


def _two_d(attrs: Attrs) -> Attrs:
    """1-D window attributes widened to 2-D (the unit axis has kernel 1, no pad)."""
    out = dict(attrs)
    for key, fill in (("strides", 1), ("dilations", 1), ("kernel_shape", 1)):
        if key in out and len(out[key]) == 1:
            out[key] = [*out[key], fill]
    if "pads" in out and len(out["pads"]) == 2:
        out["pads"] = [out["pads"][0], 0, out["pads"][1], 0]
    return out


@_spatial
def pool(node, attrs: Attrs, x: Array) -> Array:
    """ONNX MaxPool / AveragePool (count_include_pad, ceil_mode, dilations)."""
    attrs = _two_d(attrs)
    kernel = list(attrs["kernel_shape"])
    pads, strides, dilations = _window_geometry(node, attrs, x, kernel)
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    if node.op_type == "MaxPool":
        win = _windows(x, kernel, pads, strides, dilations, -np.inf, ceil_mode)
        return win.max(axis=(-2, -1))
    total = _windows(x, kernel, pads, strides, dilations, 0.0, ceil_mode).sum(axis=(-2, -1))
    if attrs.get("count_include_pad", 0):
        # pads count, the ceil_mode overhang past them does not
        ones = np.pad(np.ones((1, 1, *x.shape[2:])), [(0, 0), (0, 0), *pads], constant_values=1)
        count = _windows(ones, kernel, [(0, 0)] * 2, strides, dilations, 0.0, ceil_mode)
    else:
        ones = np.ones((1, 1, *x.shape[2:]))
        count = _windows(ones, kernel, pads, strides, dilations, 0.0, ceil_mode)
    return total / count.sum(axis=(-2, -1))


# ------------------------------------------------------------------ elementwise
def _clip(node, attrs, x, lo=None, hi=None):
    lo = attrs.get("min", -np.inf) if lo is None else lo
    hi = attrs.get("max", np.inf) if hi is None else hi
    return np.minimum(np.maximum(x, lo), hi)


def _gelu(node, attrs, x):
    if _text(attrs.get("approximate", "none")) == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


UNARY: dict[str, Callable[..., Array]] = {
    "Relu": lambda n, a, x: np.maximum(x, 0.0),
    "LeakyRelu": lambda n, a, x: np.where(x >= 0, x, a.get("alpha", 0.01) * x),
    "Clip": _clip,
    "Sigmoid": lambda n, a, x: 1 / (1 + np.exp(-x)),
    "HardSigmoid": lambda n, a, x: np.minimum(
        np.maximum(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0.0), 1.0
    ),
    "HardSwish": lambda n, a, x: x * np.minimum(np.maximum(x / 6 + 0.5, 0.0), 1.0),
    "Tanh": lambda n, a, x: np.tanh(x),
    "Elu": lambda n, a, x: np.where(x >= 0, x, a.get("alpha", 1.0) * np.expm1(x)),
    "Selu": lambda n, a, x: (
        a.get("gamma", 1.0507009873554805)
        * np.where(x > 0, x, a.get("alpha", 1.6732632423543772) * np.expm1(x))
    ),
    "Celu": lambda n, a, x: (
        np.maximum(x, 0) + np.minimum(0, a.get("alpha", 1.0) * np.expm1(x / a.get("alpha", 1.0)))
    ),
    "Softplus": lambda n, a, x: _softplus(x),
    "Softsign": lambda n, a, x: x / (1 + np.abs(x)),
    "Gelu": _gelu,
    "Erf": lambda n, a, x: erf(x),
    "Exp": lambda n, a, x: np.exp(x),
    "Log": lambda n, a, x: np.log(x),
    "Sqrt": lambda n, a, x: np.sqrt(x),
    "Reciprocal": lambda n, a, x: 1 / x,
    "Neg": lambda n, a, x: -x,
    "Abs": lambda n, a, x: np.abs(x),
    "Mish": lambda n, a, x: x * np.tanh(_softplus(x)),
    "ThresholdedRelu": lambda n, a, x: np.where(x > a.get("alpha", 1.0), x, 0.0 * x),
    "Cast": lambda n, a, x: x.astype(helper.tensor_dtype_to_np_dtype(a["to"])).astype(np.float64),
}
"""Unary activations: ``fn(node, attrs, x, *settings)``."""

BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Pow": np.power,
    "Max": np.maximum,
    "Min": np.minimum,
    "Sum": np.add,
}
"""Elementwise ops with broadcasting; the variadic ones (Max, Min, Sum) fold left."""


def _prelu(node, attrs, x, slope):
    return np.where(x < 0, slope * x, x)


def _mean(node, attrs, *xs):
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    return total / len(xs)


def _where(node, attrs, cond, x, y):
    return np.where(cond.astype(bool), x, y)


# ------------------------------------------------------------------ normalisation
def _batch_norm(node, attrs, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    eps = attrs.get("epsilon", 1e-5)
    inv = scale.reshape(shape) / np.sqrt(var.reshape(shape) + eps)
    return (x - mean.reshape(shape)) * inv + bias.reshape(shape)


def _instance_norm(node, attrs, x, scale, bias):
    axes = tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + attrs.get("epsilon", 1e-5))
    return y * scale.reshape(shape) + bias.reshape(shape)


def _layer_norm(node, attrs, x, scale, bias=None):
    first = int(attrs.get("axis", -1)) % x.ndim
    axes = tuple(range(first, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + attrs.get("epsilon", 1e-5)) * scale
    return y if bias is None else y + bias


def _softmax(node, attrs, x, *, opset: int):
    """Softmax / LogSoftmax: over ``axis`` from opset 13 (default -1); before, over every
    axis from ``axis`` on (default 1), the input seen as a 2-D matrix."""
    if opset >= 13:
        axes: tuple[int, ...] = (int(attrs.get("axis", -1)) % x.ndim,)
    else:
        axes = tuple(range(int(attrs.get("axis", 1)) % x.ndim, x.ndim))
    shifted = x - x.max(axis=axes, keepdims=True)
    total = np.exp(shifted).sum(axis=axes, keepdims=True)
    if node.op_type == "LogSoftmax":
        return shifted - np.log(total)
    return np.exp(shifted) / total


# ------------------------------------------------------------------ reductions
REDUCERS: dict[str, Callable[..., Array]] = {
    "ReduceMean": np.mean,
    "ReduceSum": np.sum,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceProd": np.prod,
    "ReduceL1": lambda x, axis, keepdims: np.abs(x).sum(axis=axis, keepdims=keepdims),
    "ReduceL2": lambda x, axis, keepdims: np.sqrt((x * x).sum(axis=axis, keepdims=keepdims)),
}
AXES_AS_INPUT = {"ReduceSum": 13}
"""Reductions take ``axes`` as an input from opset 18, ReduceSum from 13."""


def _reduce(node, attrs, x, axes=None, *, opset: int):
    if axes is None and opset < AXES_AS_INPUT.get(node.op_type, 18):
        axes = attrs.get("axes")
    keep = bool(attrs.get("keepdims", 1))
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        if attrs.get("noop_with_empty_axes", 0):
            return x
        picked = tuple(range(x.ndim))
    else:
        picked = tuple(int(a) % x.ndim for a in np.asarray(axes).reshape(-1))
    return REDUCERS[node.op_type](x, axis=picked, keepdims=keep)


def _global(node, attrs, x):
    axes = tuple(range(2, x.ndim))
    if node.op_type == "GlobalMaxPool":
        return x.max(axis=axes, keepdims=True)
    return x.mean(axis=axes, keepdims=True)


# ------------------------------------------------------------------ data movement, matmul
def _gemm(node, attrs, a, b, c=None):
    a = a.T if attrs.get("transA", 0) else a
    b = b.T if attrs.get("transB", 0) else b
    y = attrs.get("alpha", 1.0) * (a @ b)
    return y if c is None else y + attrs.get("beta", 1.0) * c


def _transpose(node, attrs, x):
    return np.transpose(x, attrs.get("perm", tuple(reversed(range(x.ndim)))))


def _concat(node, attrs, *xs):
    return np.concatenate(xs, axis=int(attrs["axis"]))


def _slice(node, attrs, x, starts, ends, axes=None, steps=None):
    index = [slice(None)] * x.ndim
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[int(a) % x.ndim] = slice(int(s), int(e), int(st))
    return x[tuple(index)]


def _gather(node, attrs, x, indices):
    return np.take(x, indices.astype(np.int64), axis=int(attrs.get("axis", 0)))


def _pad(node, attrs, x, pads, value=None, axes=None):
    if _text(attrs.get("mode", "constant")) != "constant":
        raise ModelError(f"Pad '{node.name}': only constant padding is replayed")
    pads = [int(p) for p in pads]
    axes = range(x.ndim) if axes is None else [int(a) % x.ndim for a in axes]
    widths = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[len(axes) + i])
    fill = 0.0 if value is None else float(np.asarray(value).reshape(-1)[0])
    return np.pad(x, widths, constant_values=fill)


def _split(node, attrs, x, split=None, *, outputs: int):
    axis = int(attrs.get("axis", 0)) % x.ndim
    if split is None:
        split = attrs.get("split")
    if split is None:
        size = -(-x.shape[axis] // outputs)
        split = [min(size, x.shape[axis] - i * size) for i in range(outputs)]
    return np.split(x, np.cumsum(split)[:-1], axis=axis)


SIMPLE: dict[str, Callable[..., Array]] = {
    "Conv": conv,
    "MaxPool": pool,
    "AveragePool": pool,
    "GlobalAveragePool": _global,
    "GlobalMaxPool": _global,
    "BatchNormalization": _batch_norm,
    "InstanceNormalization": _instance_norm,
    "LayerNormalization": _layer_norm,
    "PRelu": _prelu,
    "Mean": _mean,
    "Where": _where,
    "MatMul": lambda n, a, x, y: np.matmul(x, y),
    "Gemm": _gemm,
    "Transpose": _transpose,
    "Concat": _concat,
    "Slice": _slice,
    "Gather": _gather,
    "Pad": _pad,
}


def run_onnx_op(
    node: onnx.NodeProto,
    inputs: Sequence[Array | None],
    opset: int,
    rows: tuple[int, int] | None = None,
) -> list[Array]:
    """The outputs of ONNX node ``node`` on ``inputs`` (None for an absent optional input);
    float inputs are computed in float64. ``rows``: a Conv computes only those output rows
    (axis 2), the others NaN (a replay's compute needs no more)."""
    attrs = attributes(node)
    op = node.op_type
    given = list(inputs)
    while given and given[-1] is None:
        given.pop()
    args = [None if x is None else np.asarray(x) for x in given]
    args = [x.astype(np.float64) if x is not None and x.dtype.kind == "f" else x for x in args]
    if op in UNARY:
        return [UNARY[op](node, attrs, *args)]
    if op in BINARY:
        out = args[0]
        for x in args[1:]:
            out = BINARY[op](out, x)
        return [out]
    if op in ("Softmax", "LogSoftmax"):
        return [_softmax(node, attrs, *args, opset=opset)]
    if op in REDUCERS:
        return [_reduce(node, attrs, *args, opset=opset)]
    if op == "Split":
        return _split(node, attrs, *args, outputs=len(node.output))
    if op == "Conv":
        return [conv(node, attrs, *args, rows=rows)]
    if op in SIMPLE:
        return [SIMPLE[op](node, attrs, *args)]
    raise ModelError(f"op {op} (node '{node.name}') is not supported by the numeric replay")
