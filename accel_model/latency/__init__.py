"""Latency of single ONNX ops on a GPU, for graph-substitution passes (TASO/MetaFlow style).

Two kinds of :class:`LatencyModel`, both behind :data:`LATENCY_MODELS`: a roofline over
NVIDIA datasheet figures (``v100``, ``a100``, ``h100``) and measurements on the machine at
hand, cached on disk (``measured``, ``ort-cpu``, ``torch``). Importing this package loads
neither torch nor onnxruntime; only measuring does. docs/cost-model.md, "GPU op-latency
model", has the formulas and figures.
"""

from accel_model.latency.base import LatencyModel, Progress
from accel_model.latency.devices import A100, GPUS, H100, V100, GpuSpec
from accel_model.latency.registry import LATENCY_MODELS, make_latency_model
from accel_model.latency.signature import OpSignature, TensorSig
from accel_model.latency.work import bytes_moved, flops, is_grouped_conv, op_kind

# isort: off
# the builtin models register themselves, in this order
from accel_model.latency.roofline import RooflineLatency
from accel_model.latency.measured import MeasuredLatency, Measurer
# isort: on

__all__ = [
    "A100",
    "GPUS",
    "H100",
    "LATENCY_MODELS",
    "V100",
    "GpuSpec",
    "LatencyModel",
    "MeasuredLatency",
    "Measurer",
    "OpSignature",
    "Progress",
    "RooflineLatency",
    "TensorSig",
    "bytes_moved",
    "flops",
    "is_grouped_conv",
    "make_latency_model",
    "op_kind",
]
