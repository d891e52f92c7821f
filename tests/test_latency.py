"""GPU op-latency models: work counts, the datasheet roofline, measured tables, registry."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from accel_model.latency import (
    A100,
    H100,
    V100,
    GpuSpec,
    MeasuredLatency,
    OpSignature,
    RooflineLatency,
    TensorSig,
    bytes_moved,
    flops,
    make_latency_model,
    op_kind,
)
from accel_model.latency.ort_measure import OrtMeasurer
from accel_model.latency.roofline import (
    E_GROUPED,
    E_MATRIX,
    E_MEMORY,
    RAMP_MATRIX_S,
    RAMP_MEMORY_S,
)
from fusionplan.ir.errors import ConfigError


def t(*shape: int, dtype: str = "float32") -> TensorSig:
    return TensorSig(shape, dtype)


def w(*shape: int, value: tuple[int, ...] | None = None, dtype: str = "float32") -> TensorSig:
    return TensorSig(shape, dtype, const=True, value=value)


def i64(*shape: int, value: tuple[int, ...] | None = None) -> TensorSig:
    return w(*shape, value=value, dtype="int64")


def conv(cin: int, cout: int, hw: int, k: int = 3, group: int = 1, dtype: str = "float32",
         op: str = "Conv", extra: tuple = (), attrs: tuple = ()) -> OpSignature:  # fmt: skip
    """A same-padded stride-1 conv on a batch-1 ``cin x hw x hw`` tensor."""
    x, y = t(1, cin, hw, hw, dtype=dtype), t(1, cout, hw, hw, dtype=dtype)
    p = k // 2
    return OpSignature(
        op,
        "com.microsoft" if op == "FusedConv" else "",
        (x, w(cout, cin // group, k, k, dtype=dtype), w(cout, dtype=dtype), *extra),
        (y,),
        (("group", group), ("kernel_shape", (k, k)), ("pads", (p, p, p, p)), *attrs),
    )


X = t(1, 8, 16, 16)
ALL_OPS = [
    conv(8, 16, 16),
    conv(8, 8, 16, op="FusedConv", extra=(X,), attrs=(("activation", "Relu"),)),
    OpSignature("ConvTranspose", "", (X, w(8, 4, 2, 2)), (t(1, 4, 32, 32),),
                (("strides", (2, 2)),)),
    OpSignature("Gemm", "", (t(4, 32), w(64, 32), w(64)), (t(4, 64),), (("transB", 1),)),
    OpSignature("FusedGemm", "com.microsoft", (t(4, 32), w(32, 64)), (t(4, 64),),
                (("activation", "Relu"),)),
    OpSignature("MatMul", "", (t(2, 4, 8, 16), t(2, 4, 16, 8)), (t(2, 4, 8, 8),)),
    *[OpSignature(op, "", (X, t(1, 8, 1, 1)), (X,)) for op in ("Add", "Sub", "Mul", "Div")],
    *[OpSignature(op, "", (X,), (X,))
      for op in ("Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "HardSwish", "Identity")],
    OpSignature("LeakyRelu", "", (X,), (X,), (("alpha", 0.1),)),
    OpSignature("HardSigmoid", "", (X,), (X,), (("alpha", 0.2), ("beta", 0.5))),
    OpSignature("Clip", "", (X, w(), w()), (X,)),
    OpSignature("Softmax", "", (t(4, 64),), (t(4, 64),), (("axis", -1),)),
    OpSignature("LayerNormalization", "", (t(4, 64), w(64), w(64)), (t(4, 64),)),
    OpSignature("BatchNormalization", "", (X, w(8), w(8), w(8), w(8)), (X,)),
    OpSignature("MaxPool", "", (X,), (t(1, 8, 8, 8),),
                (("kernel_shape", (2, 2)), ("strides", (2, 2)))),
    OpSignature("AveragePool", "", (X,), (t(1, 8, 8, 8),),
                (("kernel_shape", (3, 3)), ("pads", (0, 0, 1, 1)), ("strides", (2, 2)))),
    OpSignature("GlobalAveragePool", "", (X,), (t(1, 8, 1, 1),)),
    OpSignature("Concat", "", (X, X), (t(1, 16, 16, 16),), (("axis", 1),)),
    OpSignature("Split", "", (X, i64(2, value=(3, 5))), (t(1, 3, 16, 16), t(1, 5, 16, 16)),
                (("axis", 1),)),
    OpSignature("Split", "", (X,), (t(1, 4, 16, 16), t(1, 4, 16, 16)), (("axis", 1),)),
    OpSignature("Slice", "", (X, i64(1, value=(2,)), i64(1, value=(6,)), i64(1, value=(1,))),
                (t(1, 4, 16, 16),)),
    OpSignature("Slice", "", (X, i64(4), i64(4)), (t(1, 4, 16, 16),)),
    OpSignature("Transpose", "", (X,), (t(1, 16, 16, 8),), (("perm", (0, 2, 3, 1)),)),
    OpSignature("Reshape", "", (X, i64(2, value=(1, -1))), (t(1, 2048),)),
    OpSignature("Flatten", "", (X,), (t(1, 2048),), (("axis", 1),)),
    OpSignature("Squeeze", "", (t(1, 8, 1, 1), i64(2)), (t(1, 8),)),
    OpSignature("Unsqueeze", "", (t(1, 8), i64(2, value=(2, 3))), (t(1, 8, 1, 1),)),
    OpSignature("Gather", "", (t(100, 16), t(4, dtype="int64")), (t(4, 16),)),
    OpSignature("Pad", "", (X, i64(8)), (t(1, 8, 18, 18),)),
    OpSignature("Pad", "", (X, i64(8, value=(0, 0, 1, 1, 0, 0, 1, 1))), (t(1, 8, 17, 17),),
                (("mode", "reflect"),)),
    OpSignature("Resize", "", (X, None, w(4)), (t(1, 8, 32, 32),), (("mode", "nearest"),)),
    OpSignature("Resize", "", (X, w(0), w(0), i64(4)), (t(1, 8, 32, 32),), (("mode", "linear"),)),
]  # fmt: skip


def first(op: str) -> OpSignature:
    return next(s for s in ALL_OPS if s.op == op)


# ----------------------------------------------------------------------------- signature
def test_signature_key_is_stable_and_readable() -> None:
    sig = OpSignature("Split", "", [X, i64(2, value=[3, 5])], [X], [("axis", 1), ("a", [1, 2])])
    assert sig.attrs == (("a", (1, 2)), ("axis", 1))  # sorted, lists made tuples
    assert sig.key() == "Split(f32[1,8,16,16],c:i64[2]=[3,5])->(f32[1,8,16,16]){a=[1,2];axis=1}"
    assert sig == OpSignature("Split", "", (X, i64(2, value=(3, 5))), (X,), sig.attrs)
    assert sig.attr("axis") == 1 and sig.attr("missing", 7) == 7
    assert first("FusedConv").key().startswith("com.microsoft.FusedConv(")
    assert len({s.key() for s in ALL_OPS}) == len(ALL_OPS)


def test_bad_tensor_signature_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="dtype"):
        TensorSig((1,), "floaty")
    with pytest.raises(ConfigError, match="negative"):
        TensorSig((1, -1))


# ----------------------------------------------------------------------------- work
def test_conv_flops_and_bytes_by_hand() -> None:
    sig = conv(3, 4, 8)  # W 4x3x3x3, Y 1x4x8x8
    assert flops(sig) == 2 * (4 * 8 * 8) * (3 * 3 * 3)  # 13824
    assert bytes_moved(sig) == 4 * (3 * 64 + 4 * 27 + 4 + 4 * 64)  # 2240


def test_grouped_and_depthwise_conv_flops_by_hand() -> None:
    assert flops(conv(8, 8, 8, group=4)) == 2 * (8 * 64) * (2 * 9)  # 2 in-channels a group
    assert flops(conv(8, 8, 8, group=8)) == 2 * (8 * 64) * 9


def test_strided_conv_and_conv_transpose_flops() -> None:
    strided = OpSignature("Conv", "", (t(1, 3, 224, 224), w(64, 3, 7, 7)), (t(1, 64, 112, 112),),
                          (("strides", (2, 2)),))  # fmt: skip
    assert flops(strided) == 2 * 64 * 112 * 112 * 3 * 49  # ResNet stem: 236 MFLOP
    assert flops(first("ConvTranspose")) == 2 * (8 * 16 * 16) * (
        4 * 2 * 2
    )  # each input to 4x2x2 outputs


def test_gemm_flops_by_hand_with_transposes() -> None:
    gemm = first("Gemm")  # A 4x32, B^T 64x32, C 64, Y 4x64
    assert flops(gemm) == 2 * 4 * 64 * 32
    assert bytes_moved(gemm) == 4 * (4 * 32 + 64 * 32 + 64 + 4 * 64)
    trans_a = OpSignature("Gemm", "", (t(32, 4), t(32, 64)), (t(4, 64),), (("transA", 1),))
    assert flops(trans_a) == 2 * 4 * 64 * 32


def test_batched_matmul_flops_by_hand() -> None:
    sig = OpSignature("MatMul", "", (t(2, 3, 4, 5), t(2, 3, 5, 6)), (t(2, 3, 4, 6),))
    assert flops(sig) == 2 * (2 * 3) * 4 * 6 * 5
    broadcast = OpSignature("MatMul", "", (t(2, 3, 4, 5), w(5, 6)), (t(2, 3, 4, 6),))
    assert flops(broadcast) == flops(sig)


def test_elementwise_and_other_flops() -> None:
    add = OpSignature("Add", "", (t(1, 8, 4, 4), t(1, 8, 1, 1)), (t(1, 8, 4, 4),))
    assert flops(add) == 128
    assert bytes_moved(add) == 4 * (128 + 8 + 128)
    assert flops(first("AveragePool")) == 8 * 8 * 8 * 9  # AveragePool 3x3 per output
    assert flops(first("Softmax")) == 5 * 256  # Softmax
    half = OpSignature("Relu", "", (t(10, dtype="float16"),), (t(10, dtype="float16"),))
    assert bytes_moved(half) == 2 * 10 * 2


def test_op_kinds() -> None:
    assert op_kind(conv(3, 4, 8)) == "compute"
    assert op_kind(first("Add")) == "memory"  # Add
    split = first("Split")
    assert op_kind(split) == "view"  # batch 1, axis 1: contiguous pieces
    batch2 = OpSignature("Split", "", (t(2, 8, 4, 4),), (t(2, 4, 4, 4),) * 2, (("axis", 1),))
    assert op_kind(batch2) == "memory"


# ----------------------------------------------------------------------------- roofline
BIG = conv(256, 256, 56)  # 3.7 GFLOP, 8.8 MB


def test_tiny_op_is_launch_dominated() -> None:
    tiny = OpSignature("Add", "", (t(16), t(16)), (t(16),))
    latency = RooflineLatency(A100).latency(tiny)
    memory = 3 * 64 / (A100.hbm_bytes_s * E_MEMORY) + RAMP_MEMORY_S
    assert latency == pytest.approx(A100.launch_s + memory)
    assert A100.launch_s / latency > 0.75


def test_big_conv_is_compute_bound_by_the_hand_formula() -> None:
    f = 2 * (256 * 56 * 56) * (256 * 9)
    assert flops(BIG) == f
    compute = f / (A100.tf32_flops * E_MATRIX) + RAMP_MATRIX_S  # fp32 runs as TF32
    memory = bytes_moved(BIG) / (A100.hbm_bytes_s * E_MEMORY) + RAMP_MEMORY_S
    assert compute > 3 * memory
    assert RooflineLatency(A100).latency(BIG) == pytest.approx(A100.launch_s + compute)
    # V100 has no TF32: fp32 runs on the CUDA cores
    v100 = RooflineLatency(V100).latency(BIG)
    assert v100 == pytest.approx(V100.launch_s + f / (V100.fp32_flops * E_MATRIX) + RAMP_MATRIX_S)


def test_newer_gpus_are_faster_on_a_big_conv() -> None:
    v100, a100, h100 = (RooflineLatency(g).latency(BIG) for g in (V100, A100, H100))
    assert h100 < a100 < v100
    # the worked numbers of docs/cost-model.md, "GPU op-latency model"
    assert (v100, a100, h100) == pytest.approx((322.2e-6, 39.62e-6, 17.97e-6), rel=1e-3)
    fp16 = conv(256, 256, 56, dtype="float16")
    assert RooflineLatency(A100).latency(fp16) < RooflineLatency(A100).latency(BIG)


def test_depthwise_conv_runs_off_the_tensor_cores() -> None:
    dw = conv(512, 512, 56, group=512)
    compute = flops(dw) / (A100.fp32_flops * E_GROUPED) + RAMP_MATRIX_S
    assert RooflineLatency(A100).latency(dw) >= A100.launch_s + compute
    dense_rate = flops(BIG) / RooflineLatency(A100).latency(BIG)
    assert flops(dw) / RooflineLatency(A100).latency(dw) < dense_rate / 10


@pytest.mark.parametrize("op", ["Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Split"])
def test_views_cost_nothing(op: str) -> None:
    assert RooflineLatency(H100).latency(first(op)) == 0.0


def test_concat_and_batched_split_are_copies() -> None:
    model = RooflineLatency(A100)
    assert model.latency(first("Concat")) > A100.launch_s  # Concat
    batch2 = OpSignature("Split", "", (t(2, 8, 4, 4),), (t(2, 4, 4, 4),) * 2, (("axis", 1),))
    assert model.latency(batch2) > A100.launch_s


def test_fused_conv_costs_the_conv_and_its_sum_input() -> None:
    model = RooflineLatency(A100)
    relu = (("activation", "Relu"),)
    assert model.latency(conv(64, 64, 56, op="FusedConv", attrs=relu)) == model.latency(
        conv(64, 64, 56)
    )
    # memory-bound 1x1 conv: reading the residual Z adds its bytes
    z = t(1, 32, 256, 256)
    plain = conv(32, 32, 256, k=1)
    summed = conv(32, 32, 256, k=1, op="FusedConv", extra=(z,), attrs=relu)
    assert bytes_moved(summed) == bytes_moved(plain) + z.nbytes
    assert model.latency(summed) > model.latency(plain)
    gemm, fused = first("Gemm"), OpSignature("FusedGemm", "com.microsoft", *_parts(first("Gemm")))
    assert model.latency(fused) == model.latency(gemm)


def _parts(sig: OpSignature) -> tuple:
    return sig.inputs, sig.outputs, (*sig.attrs, ("activation", "Relu"))


def test_every_listed_op_and_an_unknown_one_have_a_roofline_latency() -> None:
    model = RooflineLatency(V100)
    unknown = OpSignature("NonMaxSuppression", "", (t(1, 100, 4), t(1, 1, 100)), (t(10, 3),))
    for sig in [*ALL_OPS, unknown, OpSignature("Shape")]:
        latency = model.latency(sig)
        assert math.isfinite(latency) and latency >= 0


def test_gpu_spec_precisions() -> None:
    assert A100.matrix_flops("float32") == 156e12 and V100.matrix_flops("float32") == 15.7e12
    assert H100.matrix_flops("bfloat16") == H100.fp16_flops
    assert V100.matrix_flops("bfloat16") == V100.fp32_flops  # no bf16 tensor cores
    assert isinstance(A100, GpuSpec) and "2039 GB/s" in RooflineLatency(A100).describe()


# ----------------------------------------------------------------------------- measured
@pytest.fixture(scope="module")
def ort() -> OrtMeasurer:
    return OrtMeasurer()


def test_ort_latencies_are_positive_and_grow_with_the_conv(ort, tmp_path) -> None:
    model = MeasuredLatency(ort, cache_dir=tmp_path)
    small, add, big = conv(3, 4, 8), first("Add"), conv(16, 32, 32)
    seconds = model.latencies([small, add, big])
    assert all(math.isfinite(s) and 0 < s < 0.05 for s in seconds)
    assert seconds[2] > seconds[0]
    assert model.measured == 3


def test_second_instance_hits_the_cache(ort, tmp_path) -> None:
    model = MeasuredLatency(ort, cache_dir=tmp_path)
    calls = []
    seconds = model.latencies(
        [first("Conv"), first("Add"), first("Conv")], lambda *a: calls.append(a)
    )
    assert model.measured == 2 and calls == [(1, 2), (2, 2)]  # the duplicate measured once
    second = MeasuredLatency(ort, cache_dir=tmp_path)
    assert second.latencies([first("Add"), first("Conv")]) == [seconds[1], seconds[0]]
    assert second.measured == 0
    data = json.loads((tmp_path / f"{ort.device_id}.json").read_text())
    assert data["device"] == ort.device_id and first("Conv").key() in data["seconds"]


def test_packaged_table_is_read_first(ort, tmp_path) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    sig = conv(3, 4, 8)
    payload = {"device": ort.device_id, "format": 1, "seconds": {sig.key(): 1.25e-5}}
    (tables / f"{ort.device_id}.json").write_text(json.dumps(payload))
    model = MeasuredLatency(ort, cache_dir=tmp_path / "cache", tables_dir=tables)
    assert model.latency(sig) == 1.25e-5
    assert model.measured == 0 and not (tmp_path / "cache").exists()


def test_malformed_cache_is_a_config_error(ort, tmp_path) -> None:
    (tmp_path / f"{ort.device_id}.json").write_text("{not json")
    with pytest.raises(ConfigError, match="malformed"):
        MeasuredLatency(ort, cache_dir=tmp_path)


def test_device_id_names_runtime_cpu_and_threads(ort) -> None:
    assert ort.device_id.startswith("ort-cpu-") and ort.device_id.endswith("-1t")
    assert "/" not in ort.device_id and " " not in ort.device_id


@pytest.mark.parametrize("sig", ALL_OPS, ids=lambda s: s.op)
def test_ort_measures_every_listed_op(ort, sig) -> None:
    seconds = ort.measure(sig)
    assert math.isfinite(seconds) and 0 < seconds < 0.05


def test_ort_unsupported_op_is_a_config_error(ort) -> None:
    with pytest.raises(ConfigError, match="Erfc"):
        ort.measure(OpSignature("Erfc", "", (X,), (X,)))


@pytest.fixture(scope="module")
def torch_cpu():
    from accel_model.latency.torch_measure import TorchMeasurer

    return TorchMeasurer(device="cpu")


@pytest.mark.parametrize("sig", ALL_OPS, ids=lambda s: s.op)
def test_torch_measures_every_listed_op_on_the_cpu(torch_cpu, sig) -> None:
    seconds = torch_cpu.measure(sig)
    assert math.isfinite(seconds) and 0 < seconds < 0.05


def test_torch_unsupported_op_is_a_config_error(torch_cpu) -> None:
    with pytest.raises(ConfigError, match="Erfc"):
        torch_cpu.measure(OpSignature("Erfc", "", (X,), (X,)))


def test_torch_on_the_gpu(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    model = make_latency_model("torch", cache_dir=tmp_path)
    assert model.device_id.startswith("torch-cuda-")
    small, big = model.latencies([conv(3, 4, 8), BIG])
    assert 0 < small < big


# ----------------------------------------------------------------------------- registry
def test_registry_builds_each_kind(tmp_path) -> None:
    assert isinstance(make_latency_model("h100"), RooflineLatency)
    assert make_latency_model("ort-cpu", cache_dir=tmp_path).name == "ort-cpu"
    measured = make_latency_model("measured", cache_dir=tmp_path)
    assert measured.device_id.startswith(("ort-cpu-", "torch-cuda-"))


def test_unknown_name_or_option_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        make_latency_model("tpu")
    message = str(err.value)
    assert "\n" not in message and "'tpu'" in message
    assert all(n in message for n in ("v100", "a100", "h100", "measured", "ort-cpu", "torch"))
    with pytest.raises(ConfigError, match="bad options"):
        make_latency_model("a100", threads=4)


def test_import_loads_neither_torch_nor_onnxruntime() -> None:
    code = (
        "import sys, accel_model.latency\n"
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
