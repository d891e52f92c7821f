"""Datasheet figures of the GPUs the roofline latency model knows.

Peaks are NVIDIA's published boost-clock figures for dense math (no 2:4 sparsity); the
sources are in each spec's ``source`` and in docs/cost-model.md ("GPU op-latency model").
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9

LAUNCH_S = 4e-6
"""Per-kernel launch overhead from a framework: a few µs (NVIDIA's "Getting Started with
CUDA Graphs" blog measures overheads of this order between back-to-back short kernels)."""


@dataclass(frozen=True)
class GpuSpec:
    """Peak rates of one GPU, for :class:`~accel_model.latency.roofline.RooflineLatency`."""

    key: str  # registry name: "v100", "a100", "h100"
    name: str  # the exact part the figures are for
    fp32_flops: float  # CUDA-core FP32 FLOP/s (non-tensor)
    tf32_flops: float | None  # dense TF32 tensor-core FLOP/s; None before Ampere
    fp16_flops: float  # dense FP16 tensor-core FLOP/s (FP32 accumulate)
    bf16_tensor: bool  # whether the tensor cores take bfloat16 (same rate as FP16)
    hbm_bytes_s: float  # DRAM bandwidth, bytes/s
    source: str
    launch_s: float = LAUNCH_S

    def matrix_flops(self, dtype: str) -> float:
        """Peak of the unit a conv/GEMM with ``dtype`` inputs runs on.

        float32 uses TF32 tensor cores where the GPU has them (cuDNN convolutions under
        PyTorch and TensorFlow default to TF32), else the FP32 CUDA cores; float16 and
        bfloat16 use FP16-rate tensor cores; other dtypes fall back to FP32 CUDA cores.
        """
        if dtype == "float16" or (dtype == "bfloat16" and self.bf16_tensor):
            return self.fp16_flops
        if dtype == "float32" and self.tf32_flops is not None:
            return self.tf32_flops
        return self.fp32_flops


V100 = GpuSpec(
    key="v100",
    name="NVIDIA Tesla V100 SXM2 (16/32 GB)",
    fp32_flops=15.7 * TERA,
    tf32_flops=None,
    fp16_flops=125 * TERA,
    bf16_tensor=False,
    hbm_bytes_s=900 * GIGA,
    source="NVIDIA Tesla V100 datasheet (SXM2): 15.7 TF FP32, 125 TF tensor, 900 GB/s HBM2",
)

A100 = GpuSpec(
    key="a100",
    name="NVIDIA A100 SXM4 80 GB",
    fp32_flops=19.5 * TERA,
    tf32_flops=156 * TERA,
    fp16_flops=312 * TERA,
    bf16_tensor=True,
    hbm_bytes_s=2039 * GIGA,
    source="NVIDIA A100 datasheet (SXM4 80GB): 19.5 TF FP32, 156 TF TF32, 312 TF FP16/BF16 "
    "dense, 2039 GB/s HBM2e",
)

H100 = GpuSpec(
    key="h100",
    name="NVIDIA H100 SXM5 80 GB",
    fp32_flops=67 * TERA,
    tf32_flops=494.7 * TERA,
    fp16_flops=989.4 * TERA,
    bf16_tensor=True,
    hbm_bytes_s=3350 * GIGA,
    source="NVIDIA H100 datasheet (SXM): 67 TF FP32, 989 TF TF32 and 1979 TF FP16/BF16 with "
    "sparsity (half dense), 3.35 TB/s HBM3",
)

GPUS: tuple[GpuSpec, ...] = (V100, A100, H100)
