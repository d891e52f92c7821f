"""Op latency on a named GPU from its datasheet: launch overhead plus a roofline.

``latency = launch + max(flops / (peak * eff_c(flops)), bytes / (bw * eff_m(bytes)))``, with
saturating efficiencies ``eff(w) = e_max * w / (w + w_half)``: a tiny op cannot fill the
GPU and is bound by launch and ramp-up latency, a big GEMM approaches ``e_max`` of peak.
Writing ``w_half = rate * e_max * ramp`` turns each term into ``w / (rate * e_max) + ramp``,
so the curve is one constant per resource: the time the unit takes to get going. Views
cost nothing (no kernel). Constants and their sources: docs/cost-model.md.
"""

from __future__ import annotations

from functools import partial

from accel_model.latency.base import LatencyModel
from accel_model.latency.devices import GPUS, GpuSpec
from accel_model.latency.registry import LATENCY_MODELS
from accel_model.latency.signature import OpSignature
from accel_model.latency.work import bytes_moved, flops, is_grouped_conv, op_kind

E_MATRIX = 0.75
"""Conv/GEMM: large cuDNN/cuBLAS kernels sustain ~70-80% of the dense tensor peak."""
E_GROUPED = 0.5
"""Grouped/depthwise conv, as a fraction of the FP32 CUDA-core peak: cuDNN runs them as
direct kernels off the tensor cores (too few channels per group to fill an MMA tile)."""
E_VECTOR = 0.5
"""Arithmetic of memory-bound ops on the FP32 CUDA cores (it rarely binds)."""
E_MEMORY = 0.85
"""Streaming kernels reach ~85-90% of HBM peak (STREAM-style copy benchmarks)."""
RAMP_MATRIX_S = 4e-6
"""Time at which a conv/GEMM reaches half of ``E_MATRIX``: about one wave of 128x128x128
output tiles over every SM (A100: 108 SMs x 4.2 MFLOP at 117 TFLOP/s = 3.9 µs)."""
RAMP_MEMORY_S = 1e-6
"""Time at which a streaming kernel reaches half of ``E_MEMORY``: about one DRAM round
trip (several hundred ns on V100-H100) plus the ramp-up and tail of the first wave."""


def busy_time(work: float, rate: float, e_max: float, ramp_s: float) -> float:
    """Seconds for ``work`` at ``rate * eff(work)``, ``eff(w) = e_max * w / (w + w_half)``."""
    if work <= 0:
        return 0.0
    work_half = rate * e_max * ramp_s
    return (work + work_half) / (rate * e_max)  # = work / (rate * eff(work))


class RooflineLatency(LatencyModel):
    """Roofline estimate on a datasheet GPU."""

    def __init__(self, spec: GpuSpec) -> None:
        self.spec = spec
        self.name = spec.key

    def latency(self, sig: OpSignature) -> float:
        kind = op_kind(sig)
        if kind == "view":
            return 0.0
        if kind == "compute" and is_grouped_conv(sig):
            rate, e_c, ramp = self.spec.fp32_flops, E_GROUPED, RAMP_MATRIX_S
        elif kind == "compute":
            dtype = sig.inputs[0].dtype if sig.inputs and sig.inputs[0] else "float32"
            rate, e_c, ramp = self.spec.matrix_flops(dtype), E_MATRIX, RAMP_MATRIX_S
        else:
            rate, e_c, ramp = self.spec.fp32_flops, E_VECTOR, RAMP_MEMORY_S
        compute = busy_time(flops(sig), rate, e_c, ramp)
        memory = busy_time(bytes_moved(sig), self.spec.hbm_bytes_s, E_MEMORY, RAMP_MEMORY_S)
        return self.spec.launch_s + max(compute, memory)

    def describe(self) -> str:
        s = self.spec
        tf32 = f", {s.tf32_flops / 1e12:g} TF32" if s.tf32_flops else ""
        return (
            f"roofline {s.key}: {s.name}, {s.fp32_flops / 1e12:g} TFLOP/s FP32{tf32}, "
            f"{s.fp16_flops / 1e12:g} FP16 tensor, {s.hbm_bytes_s / 1e9:g} GB/s, "
            f"launch {s.launch_s * 1e6:g} µs"
        )


for _spec in GPUS:
    LATENCY_MODELS.register(
        _spec.key, partial(RooflineLatency, _spec), help=f"roofline, {_spec.name}"
    )
