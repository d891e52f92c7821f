"""ONNX ops as PyTorch calls: one kernel per op signature, shared by the torch latency
measurer and the op-by-op executor of the streams pre-pass.

A kernel is built once from the op's signature (attributes, shapes) and the host values of
its compile-time operands (Slice bounds, Split sizes, Pad widths): everything that decides
*what* the op does is fixed at build time, so a call only reads tensors and launches torch
ops, which is what a CUDA Graph capture needs (no host sync inside). Each op maps to the call
a framework would make (conv2d, addmm, cat, split, ...); views (Reshape, Split along
channels of a batch-1 tensor) cost what torch charges for a view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from accel_model.latency.signature import OpSignature
from fusionplan.ir.errors import ConfigError

Kernel = Callable[[Sequence[Any]], Any]
"""Operand tensors (None for an omitted optional input) -> the output tensor or a tuple."""
Consts = Sequence[np.ndarray | None]
"""Host values of the operands known before running (None where unknown)."""
Builder = Callable[[OpSignature, Consts, Any], Kernel]  # (sig, consts, torch) -> kernel


def torch_kernel(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    """The kernel of ``sig``; ``ConfigError`` for an op without a torch mapping."""
    build = KERNELS.get(_op_type(sig.op))
    if build is None:
        raise ConfigError(f"no torch kernel for op {sig.op}")
    return build(sig, consts, torch)


def supports(op: str) -> bool:
    """Whether op type ``op`` (qualified or not) has a torch kernel."""
    return _op_type(op) in KERNELS


def _op_type(op: str) -> str:
    """``"com.microsoft.FusedConv"`` -> ``"FusedConv"``: kernels are keyed by the bare type."""
    return op.rpartition(".")[2]


# ----------------------------------------------------------------------------- attributes
def _ints(sig: OpSignature, name: str, n: int, default: int) -> list[int]:
    return [int(v) for v in sig.attr(name, (default,) * n)]


def _const(sig: OpSignature, consts: Consts, i: int) -> np.ndarray | None:
    """Host value of operand ``i``: the signature's small constant or the given one."""
    if i < len(sig.inputs) and sig.inputs[i] is not None and sig.inputs[i].value is not None:
        return np.asarray(sig.inputs[i].value)
    return consts[i] if i < len(consts) else None


def _required(sig: OpSignature, consts: Consts, i: int, what: str) -> list[Any]:
    value = _const(sig, consts, i)
    if value is None:
        raise ConfigError(f"{sig.op}: {what} (input {i}) must be a constant to build a kernel")
    return np.asarray(value).reshape(-1).tolist()


def _rank(sig: OpSignature, i: int = 0) -> int:
    t = sig.inputs[i]
    if t is None:
        raise ConfigError(f"{sig.op} signature lacks input {i}")
    return len(t.shape)


def _pads(sig: OpSignature, size: tuple[int, ...], kernel: list[int], stride: list[int],
          dilation: list[int]) -> tuple[list[int], list[int]]:  # fmt: skip
    """(begin, end) padding per spatial dim, resolving ``auto_pad`` like ONNX does."""
    n = len(size)
    auto = sig.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [
            max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
            for i, k, s, d in zip(size, kernel, stride, dilation, strict=True)
        ]
        small, big = [t // 2 for t in total], [t - t // 2 for t in total]
        return (small, big) if auto == "SAME_UPPER" else (big, small)
    if auto == "VALID":
        return [0] * n, [0] * n
    pads = _ints(sig, "pads", 2 * n, 0)
    return pads[:n], pads[n:]


def _torch_pad(begins: list[int], ends: list[int]) -> list[int]:
    """ONNX per-dim (begin, end) as ``F.pad``'s list: last dim first."""
    return [p for b, e in zip(reversed(begins), reversed(ends), strict=True) for p in (b, e)]


def _activation(sig: OpSignature, torch: Any) -> Callable[[Any], Any]:
    """The epilogue of FusedConv/FusedGemm."""
    name, p = sig.attr("activation"), [float(v) for v in sig.attr("activation_params", ())]
    acts: dict[str | None, Callable[[Any], Any]] = {
        None: lambda y: y,
        "Relu": torch.relu,
        "Sigmoid": torch.sigmoid,
        "Tanh": torch.tanh,
        "LeakyRelu": lambda y: torch.nn.functional.leaky_relu(y, p[0] if p else 0.01),
        "Clip": lambda y: torch.clamp(y, *p) if p else y,
        "HardSigmoid": lambda y: torch.clamp(y * (p[0] if p else 0.2) + (p[1] if p else 0.5), 0, 1),
    }
    if name not in acts:
        raise ConfigError(f"no torch kernel for {sig.op} activation {name}")
    return acts[name]


def _opt(xs: Sequence[Any], i: int) -> Any:
    return xs[i] if i < len(xs) else None


# ----------------------------------------------------------------------------- builders
def _conv(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    F = torch.nn.functional
    x, w = sig.inputs[0], sig.inputs[1]
    assert x is not None and w is not None
    nd = len(x.shape) - 2
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    stride, dilation = _ints(sig, "strides", nd, 1), _ints(sig, "dilations", nd, 1)
    begins, ends = _pads(sig, x.shape[2:], list(w.shape[2:]), stride, dilation)
    pre = _torch_pad(begins, ends) if begins != ends else None
    padding = 0 if pre else begins
    group, act = int(sig.attr("group", 1)), _activation(sig, torch)

    def run(xs: Sequence[Any]) -> Any:
        x, z = xs[0], _opt(xs, 3)
        y = conv(F.pad(x, pre) if pre else x, xs[1], _opt(xs, 2), stride, padding, dilation, group)
        return act(y if z is None else y + z)

    return run


def _conv_transpose(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    F = torch.nn.functional
    nd = _rank(sig) - 2
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    stride, dilation = _ints(sig, "strides", nd, 1), _ints(sig, "dilations", nd, 1)
    extra, group = _ints(sig, "output_padding", nd, 0), int(sig.attr("group", 1))
    begins = _ints(sig, "pads", 2 * nd, 0)[:nd]
    # unpadded output, then a view cropped to the signature's output (handles auto_pad too)
    spatial = zip(begins, sig.outputs[0].shape[2:], strict=True)
    crop = (slice(None), slice(None), *(slice(p, p + o) for p, o in spatial))
    return lambda xs: conv(xs[0], xs[1], _opt(xs, 2), stride, 0, extra, group, dilation)[crop]


def _gemm(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    trans_a, trans_b = int(sig.attr("transA", 0)), int(sig.attr("transB", 0))
    alpha, beta = float(sig.attr("alpha", 1.0)), float(sig.attr("beta", 1.0))
    act = _activation(sig, torch)

    def run(xs: Sequence[Any]) -> Any:
        a = xs[0].t() if trans_a else xs[0]
        b = xs[1].t() if trans_b else xs[1]
        c = _opt(xs, 2)
        if c is None:
            return act(torch.mm(a, b) if alpha == 1 else torch.mm(a, b) * alpha)
        return act(torch.addmm(c, a, b, beta=beta, alpha=alpha))

    return run


def _pool(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    F = torch.nn.functional
    x = sig.inputs[0]
    assert x is not None
    nd = len(x.shape) - 2
    kernel = _ints(sig, "kernel_shape", nd, 1)
    stride, dilation = _ints(sig, "strides", nd, 1), _ints(sig, "dilations", nd, 1)
    begins, ends = _pads(sig, x.shape[2:], kernel, stride, dilation)
    is_max, ceil = sig.op == "MaxPool", bool(sig.attr("ceil_mode", 0))
    pre = _torch_pad(begins, ends) if begins != ends else None
    fill = float("-inf") if is_max else 0.0
    padding = 0 if pre else begins
    if is_max:
        pool = getattr(F, f"max_pool{nd}d")
        op = lambda t: pool(t, kernel, stride, padding, dilation, ceil_mode=ceil)  # noqa: E731
    else:
        pool, include = getattr(F, f"avg_pool{nd}d"), bool(sig.attr("count_include_pad", 0))
        op = lambda t: pool(t, kernel, stride, padding, ceil, include)  # noqa: E731
    return lambda xs: op(F.pad(xs[0], pre, value=fill) if pre else xs[0])


def _slice(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    rank = _rank(sig)
    starts, ends = _required(sig, consts, 1, "starts"), _required(sig, consts, 2, "ends")
    has_axes = _const(sig, consts, 3) is not None
    axes = _required(sig, consts, 3, "axes") if has_axes else list(range(len(starts)))
    has_steps = _const(sig, consts, 4) is not None
    steps = _required(sig, consts, 4, "steps") if has_steps else [1] * len(starts)
    index = [slice(None)] * rank
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[int(a) % rank] = slice(int(s), int(e), int(st))
    key = tuple(index)
    return lambda xs: xs[0][key]


def _split(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    axis = int(sig.attr("axis", 0)) % _rank(sig)
    has_split = len(sig.inputs) > 1 and sig.inputs[1] is not None
    sizes = (
        [int(v) for v in _required(sig, consts, 1, "split")]
        if has_split
        else [o.shape[axis] for o in sig.outputs]
    )
    return lambda xs: torch.split(xs[0], sizes, axis)


def _pad(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    rank = _rank(sig)
    pads = [int(v) for v in _required(sig, consts, 1, "pads")]
    flat = _torch_pad(pads[:rank], pads[rank:])
    while flat and flat[-2:] == [0, 0]:  # reflect/replicate pad only the trailing dims
        flat = flat[:-2]
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}
    kind = mode.get(sig.attr("mode", "constant"), sig.attr("mode"))
    fill = _const(sig, consts, 2)
    value = (
        float(np.asarray(fill).reshape(-1)[0]) if kind == "constant" and fill is not None else None
    )
    return lambda xs: torch.nn.functional.pad(xs[0], flat, kind, value)


def _resize(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    x, out = sig.inputs[0], sig.outputs[0].shape
    assert x is not None
    if tuple(x.shape[:2]) != out[:2]:
        raise ConfigError("the torch kernel resizes only spatial dims (N, C unchanged)")
    nd = len(x.shape) - 2
    mode = sig.attr("mode", "nearest")
    kind = {"nearest": "nearest", "cubic": "bicubic"}.get(
        mode, ("linear", "bilinear", "trilinear")[nd - 1]
    )
    corners = sig.attr("coordinate_transformation_mode") == "align_corners"
    align = corners if kind != "nearest" else None
    return lambda xs: torch.nn.functional.interpolate(
        xs[0], out[2:], mode=kind, align_corners=align
    )


def _unary(name: str) -> Builder:
    """``torch.<name>(x)``, or ``torch.nn.functional.<name>`` where torch has none."""

    def build(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
        fn = getattr(torch, name, None) or getattr(torch.nn.functional, name)
        return lambda xs: fn(xs[0])

    return build


def _binary(name: str) -> Builder:
    def build(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
        fn = getattr(torch, name)
        return lambda xs: fn(xs[0], xs[1])

    return build


def _view(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    shape = sig.outputs[0].shape
    return lambda xs: xs[0].reshape(shape)


def _identity(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    return lambda xs: xs[0]


def _leaky_relu(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    alpha = float(sig.attr("alpha", 0.01))
    return lambda xs: torch.nn.functional.leaky_relu(xs[0], alpha)


def _clip(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    return lambda xs: torch.clamp(xs[0], _opt(xs, 1), _opt(xs, 2))


def _hard_sigmoid(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    alpha, beta = float(sig.attr("alpha", 0.2)), float(sig.attr("beta", 0.5))
    return lambda xs: torch.clamp(xs[0] * alpha + beta, 0, 1)


def _softmax(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    axis = int(sig.attr("axis", -1))
    return lambda xs: torch.softmax(xs[0], axis)


def _layer_norm(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    x, eps = sig.inputs[0], float(sig.attr("epsilon", 1e-5))
    assert x is not None
    shape = tuple(x.shape[int(sig.attr("axis", -1)) :])
    return lambda xs: torch.nn.functional.layer_norm(xs[0], shape, xs[1], _opt(xs, 2), eps)


def _batch_norm(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    eps = float(sig.attr("epsilon", 1e-5))

    def run(xs: Sequence[Any]) -> Any:
        x, scale, bias, mean, var = xs[:5]
        return torch.nn.functional.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)

    return run


def _global_average_pool(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    dims = tuple(range(2, _rank(sig)))
    return lambda xs: xs[0].mean(dims, keepdim=True)


def _concat(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    axis = int(sig.attr("axis", 0))
    return lambda xs: torch.cat([t for t in xs if t is not None], axis)


def _transpose(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    perm = sig.attr("perm", tuple(reversed(range(_rank(sig)))))
    return lambda xs: xs[0].permute(perm).contiguous()  # ONNX Transpose materializes


def _gather(sig: OpSignature, consts: Consts, torch: Any) -> Kernel:
    axis = int(sig.attr("axis", 0)) % _rank(sig)
    shape = sig.outputs[0].shape
    return lambda xs: torch.index_select(xs[0], axis, xs[1].reshape(-1)).reshape(shape)


KERNELS: dict[str, Builder] = {
    "Conv": _conv,
    "FusedConv": _conv,
    "ConvTranspose": _conv_transpose,
    "Gemm": _gemm,
    "FusedGemm": _gemm,
    "MatMul": _binary("matmul"),
    "Add": _binary("add"),
    "Sub": _binary("sub"),
    "Mul": _binary("mul"),
    "Div": _binary("div"),
    "Relu": _unary("relu"),
    "Sigmoid": _unary("sigmoid"),
    "Tanh": _unary("tanh"),
    "Erf": _unary("erf"),
    "Sqrt": _unary("sqrt"),
    "HardSwish": _unary("hardswish"),
    "LeakyRelu": _leaky_relu,
    "Clip": _clip,
    "HardSigmoid": _hard_sigmoid,
    "Softmax": _softmax,
    "LayerNormalization": _layer_norm,
    "BatchNormalization": _batch_norm,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_average_pool,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Transpose": _transpose,
    "Reshape": _view,
    "Flatten": _view,
    "Squeeze": _view,
    "Unsqueeze": _view,
    "Identity": _identity,
    "Gather": _gather,
    "Pad": _pad,
    "Resize": _resize,
}
"""Bare op type -> kernel builder."""
