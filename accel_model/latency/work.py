"""How much work one op does: flops, bytes moved, and which resource bounds it.

These counts are device-independent; a roofline divides them by a device's rates. The
conventions (docs/cost-model.md, "GPU op-latency model"): a multiply-add is 2 flops; a
conv or GEMM counts only its multiply-adds (bias, residual sum and activation run in the
epilogue and are negligible next to them); other ops count a small number of flops per
output element; bytes are every input (weights included) plus every output, once each.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from accel_model.latency.signature import OpSignature, TensorSig
from fusionplan.ir.errors import ConfigError

OpKind = Literal["compute", "memory", "view"]

COMPUTE_OPS = frozenset({"Conv", "FusedConv", "ConvTranspose", "Gemm", "FusedGemm", "MatMul"})
"""Ops that map to tensor-core GEMM kernels (cuDNN implicit GEMM, cuBLAS)."""

VIEW_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
"""Ops that only relabel a contiguous buffer: a GPU framework returns a view, no kernel."""

DATA_OPS = frozenset({"Concat", "Split", "Slice", "Transpose", "Gather", "Pad", "Resize"})
"""Ops that copy or rearrange data without arithmetic: 0 flops."""

FLOPS_PER_OUTPUT = {
    "Softmax": 5,  # max, subtract, exp, sum, divide
    "LayerNormalization": 8,  # mean, centre, square, mean, rsqrt, normalise, scale, shift
    "BatchNormalization": 2,  # inference: one folded scale and shift
    "HardSigmoid": 3,  # alpha*x + beta, then clamp
    "HardSwish": 4,  # x * hardsigmoid(x)
    "Clip": 2,  # min and max
    "LeakyRelu": 2,  # compare, scale
}
"""Arithmetic per output element of a straightforward kernel; any other op counts 1."""


def op_kind(sig: OpSignature) -> OpKind:
    """Which ceiling bounds ``sig`` on a GPU: the math units, memory, or nothing (a view)."""
    if sig.op in COMPUTE_OPS:
        return "compute"
    if sig.op in VIEW_OPS or (sig.op == "Split" and _split_is_view(sig)):
        return "view"
    return "memory"


def is_grouped_conv(sig: OpSignature) -> bool:
    """A grouped or depthwise conv: too few channels per group to fill tensor-core tiles."""
    return sig.op in ("Conv", "FusedConv", "ConvTranspose") and int(sig.attr("group", 1)) > 1


def flops(sig: OpSignature) -> float:
    """Floating-point operations of one execution of ``sig`` (multiply-add = 2)."""
    if sig.op in ("Conv", "FusedConv"):
        # each output element is a dot product over Cin/group x kernel taps: W[1:]
        return 2.0 * _out(sig).numel * _prod(_in(sig, 1).shape[1:])
    if sig.op == "ConvTranspose":
        # each input element scatters into Cout/group x kernel taps: W[1:]
        return 2.0 * _in(sig, 0).numel * _prod(_in(sig, 1).shape[1:])
    if sig.op in ("Gemm", "FusedGemm"):
        a = _in(sig, 0).shape
        k = a[0] if int(sig.attr("transA", 0)) else a[-1]
        return 2.0 * _out(sig).numel * k
    if sig.op == "MatMul":
        return 2.0 * _out(sig).numel * _in(sig, 0).shape[-1]
    if sig.op in VIEW_OPS or sig.op in DATA_OPS:
        return 0.0
    if sig.op in ("MaxPool", "AveragePool"):
        return float(_out(sig).numel * _prod(tuple(sig.attr("kernel_shape", ()))))
    if sig.op in ("GlobalAveragePool", "GlobalMaxPool"):
        return float(_in(sig, 0).numel)
    return float(FLOPS_PER_OUTPUT.get(sig.op, 1) * sum(t.numel for t in sig.outputs))


def bytes_moved(sig: OpSignature) -> float:
    """Bytes read and written once: all inputs (weights included) and all outputs."""
    tensors = [t for t in sig.inputs if t is not None] + list(sig.outputs)
    return float(sum(t.nbytes for t in tensors))


def _split_is_view(sig: OpSignature) -> bool:
    """Split along an axis with only unit dims before it: each piece is a contiguous block.

    That covers the common case, a batch-1 NCHW tensor split along channels (axis 1).
    """
    if not sig.inputs or sig.inputs[0] is None:
        return False
    shape = sig.inputs[0].shape
    axis = int(sig.attr("axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    return _prod(shape[:axis]) == 1


def _in(sig: OpSignature, i: int) -> TensorSig:
    if i >= len(sig.inputs) or sig.inputs[i] is None:
        raise ConfigError(f"{sig.op} signature lacks input {i}")
    return sig.inputs[i]


def _out(sig: OpSignature) -> TensorSig:
    if not sig.outputs:
        raise ConfigError(f"{sig.op} signature has no output shape")
    return sig.outputs[0]


def _prod(dims: tuple[int, ...]) -> int:
    return int(np.prod(dims, dtype=np.int64))
