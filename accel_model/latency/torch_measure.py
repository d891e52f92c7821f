"""Time one op with PyTorch: on the GPU when there is one, else on the CPU.

Each ONNX op maps to the torch call a framework would make (conv2d, addmm, cat, split, ...);
the op's latency is the median of repeated calls, timed with CUDA events on a GPU (so host
overhead between kernels is left out) and with the wall clock on the CPU. Views (Reshape,
Split along channels of a batch-1 tensor) cost what torch charges for a view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accel_model.latency.bench import cpu_model, median_seconds, operand_arrays, slug
from accel_model.latency.signature import OpSignature
from fusionplan.ir.errors import ConfigError

Run = Callable[[], Any]
Builder = Callable[[OpSignature, list[Any], Any], Run]  # (sig, tensors, torch) -> run


class TorchMeasurer:
    """Measures signatures with PyTorch on ``device`` (default: CUDA if available)."""

    def __init__(
        self,
        *,
        device: str | None = None,
        threads: int = 1,
        warmup: int = 2,
        repeats: int = 10,
        budget_s: float = 0.1,
    ) -> None:
        import torch  # heavy: 2 s, and only measuring needs it

        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.threads = threads  # CPU only: intra-op threads while measuring
        self.warmup, self.repeats, self.budget_s = warmup, repeats, budget_s
        if self.device.startswith("cuda"):
            gpu = torch.cuda.get_device_name(self.device)
            self.device_id = slug(f"torch-cuda-{gpu}-{torch.__version__}")
        else:
            self.device_id = slug(f"torch-cpu-{torch.__version__}-{cpu_model()}-{threads}t")

    def measure(self, sig: OpSignature) -> float:
        """Median seconds of one call of the op's torch equivalent."""
        build = _BUILDERS.get(sig.op)
        if build is None:
            raise ConfigError(f"the torch measurer does not support op {sig.op}")
        torch = self._torch
        tensors = [
            None if a is None else torch.from_numpy(a).to(self.device) for a in operand_arrays(sig)
        ]
        try:
            with torch.inference_mode():
                run = build(sig, tensors, torch)
                run()
                if self.device.startswith("cuda"):
                    return self._cuda_seconds(run)
                return self._cpu_seconds(run)
        except (RuntimeError, ValueError, TypeError, IndexError) as err:
            raise ConfigError(f"torch cannot run {sig.op}: {str(err).splitlines()[0]}") from err

    def _cpu_seconds(self, run: Run) -> float:
        """Wall time with ``threads`` intra-op threads.

        torch's default, one thread per core, is at the mercy of other load: on a busy
        2-core machine a parallel op waits a whole scheduler tick for its second thread.
        """
        before = self._torch.get_num_threads()
        self._torch.set_num_threads(self.threads)
        try:
            return median_seconds(run, self.warmup, self.repeats, self.budget_s)
        finally:
            self._torch.set_num_threads(before)

    def _cuda_seconds(self, run: Run) -> float:
        cuda = self._torch.cuda
        for _ in range(self.warmup):
            run()
        events = [
            (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
            for _ in range(self.repeats)
        ]
        for start, end in events:
            start.record()
            run()
            end.record()
        cuda.synchronize()
        return float(np.median([start.elapsed_time(end) for start, end in events])) / 1e3


# ----------------------------------------------------------------------------- attributes
def _ints(sig: OpSignature, name: str, n: int, default: int) -> list[int]:
    return [int(v) for v in sig.attr(name, (default,) * n)]


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
        raise ConfigError(f"the torch measurer does not support {sig.op} activation {name}")
    return acts[name]


def _opt(xs: list[Any], i: int) -> Any:
    return xs[i] if i < len(xs) else None


# ----------------------------------------------------------------------------- builders
def _conv(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    F = torch.nn.functional
    x, w, b, z = xs[0], xs[1], _opt(xs, 2), _opt(xs, 3)
    nd = x.dim() - 2
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    stride, dilation = _ints(sig, "strides", nd, 1), _ints(sig, "dilations", nd, 1)
    begins, ends = _pads(sig, tuple(x.shape[2:]), list(w.shape[2:]), stride, dilation)
    pre = _torch_pad(begins, ends) if begins != ends else None
    padding = 0 if pre else begins
    group, act = int(sig.attr("group", 1)), _activation(sig, torch)

    def run() -> Any:
        y = conv(F.pad(x, pre) if pre else x, w, b, stride, padding, dilation, group)
        return act(y if z is None else y + z)

    return run


def _conv_transpose(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    F = torch.nn.functional
    x, w, b = xs[0], xs[1], _opt(xs, 2)
    nd = x.dim() - 2
    conv = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[nd - 1]
    stride, dilation = _ints(sig, "strides", nd, 1), _ints(sig, "dilations", nd, 1)
    extra, group = _ints(sig, "output_padding", nd, 0), int(sig.attr("group", 1))
    begins = _ints(sig, "pads", 2 * nd, 0)[:nd]
    # unpadded output, then a view cropped to the signature's output (handles auto_pad too)
    spatial = zip(begins, sig.outputs[0].shape[2:], strict=True)
    crop = (slice(None), slice(None), *(slice(p, p + o) for p, o in spatial))
    return lambda: conv(x, w, b, stride, 0, extra, group, dilation)[crop]


def _gemm(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    a, b, c = xs[0], xs[1], _opt(xs, 2)
    a = a.t() if int(sig.attr("transA", 0)) else a
    b = b.t() if int(sig.attr("transB", 0)) else b
    alpha, beta = float(sig.attr("alpha", 1.0)), float(sig.attr("beta", 1.0))
    act = _activation(sig, torch)
    if c is None:
        return lambda: act(torch.mm(a, b) if alpha == 1 else torch.mm(a, b) * alpha)
    return lambda: act(torch.addmm(c, a, b, beta=beta, alpha=alpha))


def _pool(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    F = torch.nn.functional
    x = xs[0]
    nd = x.dim() - 2
    kernel = _ints(sig, "kernel_shape", nd, 1)
    stride, dilation = _ints(sig, "strides", nd, 1), _ints(sig, "dilations", nd, 1)
    begins, ends = _pads(sig, tuple(x.shape[2:]), kernel, stride, dilation)
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
    return lambda: op(F.pad(x, pre, value=fill) if pre else x)


def _slice(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    x, starts, ends = xs[0], xs[1].tolist(), xs[2].tolist()
    axes = xs[3].tolist() if _opt(xs, 3) is not None else list(range(len(starts)))
    steps = xs[4].tolist() if _opt(xs, 4) is not None else [1] * len(starts)
    index = [slice(None)] * x.dim()
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        index[a] = slice(s, e, st)
    return lambda: x[tuple(index)]


def _split(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    axis = int(sig.attr("axis", 0)) % xs[0].dim()
    split = _opt(xs, 1)
    sizes = split.tolist() if split is not None else [o.shape[axis] for o in sig.outputs]
    return lambda: torch.split(xs[0], sizes, axis)


def _pad(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    x, pads = xs[0], xs[1].tolist()
    rank = x.dim()
    flat = _torch_pad(pads[:rank], pads[rank:])
    while flat and flat[-2:] == [0, 0]:  # reflect/replicate pad only the trailing dims
        flat = flat[:-2]
    mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}
    kind = mode.get(sig.attr("mode", "constant"), sig.attr("mode"))
    value = float(xs[2]) if kind == "constant" and _opt(xs, 2) is not None else None
    return lambda: torch.nn.functional.pad(x, flat, kind, value)


def _resize(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    x, out = xs[0], sig.outputs[0].shape
    if tuple(x.shape[:2]) != out[:2]:
        raise ConfigError("the torch measurer resizes only spatial dims (N, C unchanged)")
    nd = x.dim() - 2
    mode = sig.attr("mode", "nearest")
    kind = {"nearest": "nearest", "cubic": "bicubic"}.get(
        mode, ("linear", "bilinear", "trilinear")[nd - 1]
    )
    corners = sig.attr("coordinate_transformation_mode") == "align_corners"
    align = corners if kind != "nearest" else None
    return lambda: torch.nn.functional.interpolate(x, out[2:], mode=kind, align_corners=align)


def _unary(name: str) -> Builder:
    """``torch.<name>(x)``, or ``torch.nn.functional.<name>`` where torch has none."""

    def build(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
        fn = getattr(torch, name, None) or getattr(torch.nn.functional, name)
        return lambda: fn(xs[0])

    return build


def _binary(name: str) -> Builder:
    def build(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
        fn = getattr(torch, name)
        return lambda: fn(xs[0], xs[1])

    return build


def _view(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    shape = sig.outputs[0].shape
    return lambda: xs[0].reshape(shape)


def _identity(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    return lambda: xs[0]


def _leaky_relu(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    alpha = float(sig.attr("alpha", 0.01))
    return lambda: torch.nn.functional.leaky_relu(xs[0], alpha)


def _clip(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    return lambda: torch.clamp(xs[0], _opt(xs, 1), _opt(xs, 2))


def _hard_sigmoid(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    alpha, beta = float(sig.attr("alpha", 0.2)), float(sig.attr("beta", 0.5))
    return lambda: torch.clamp(xs[0] * alpha + beta, 0, 1)


def _softmax(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    axis = int(sig.attr("axis", -1))
    return lambda: torch.softmax(xs[0], axis)


def _layer_norm(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    x, eps = xs[0], float(sig.attr("epsilon", 1e-5))
    shape = tuple(x.shape[int(sig.attr("axis", -1)) :])
    return lambda: torch.nn.functional.layer_norm(x, shape, xs[1], _opt(xs, 2), eps)


def _batch_norm(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    x, scale, bias, mean, var = xs[:5]
    eps = float(sig.attr("epsilon", 1e-5))
    return lambda: torch.nn.functional.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)


def _global_average_pool(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    dims = tuple(range(2, xs[0].dim()))
    return lambda: xs[0].mean(dims, keepdim=True)


def _concat(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    parts, axis = [t for t in xs if t is not None], int(sig.attr("axis", 0))
    return lambda: torch.cat(parts, axis)


def _transpose(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    perm = sig.attr("perm", tuple(reversed(range(xs[0].dim()))))
    return lambda: xs[0].permute(perm).contiguous()  # ONNX Transpose materializes


def _gather(sig: OpSignature, xs: list[Any], torch: Any) -> Run:
    axis = int(sig.attr("axis", 0)) % xs[0].dim()
    flat, shape = xs[1].reshape(-1), sig.outputs[0].shape
    return lambda: torch.index_select(xs[0], axis, flat).reshape(shape)


_BUILDERS: dict[str, Builder] = {
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
