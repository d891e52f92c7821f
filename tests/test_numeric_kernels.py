"""The numeric replay's op kernels (accel_model/numeric/kernels.py) against onnxruntime, one
op at a time, and the NaN propagation the replay's proof rests on (docs/cost-model.md,
"Numeric replay")."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from accel_model.numeric.kernels import UNARY, run_onnx_op

RNG = np.random.default_rng(11)
X4 = (1, 4, 7, 6)


def one_op(op: str, inputs, attrs=None, consts=None, opset: int = 17, outputs: int = 1):
    """A one-node model: activation ``inputs`` (name -> shape), constant ``consts`` (name ->
    array), the node's inputs in the order activations then constants (an empty name for
    an absent optional input)."""
    consts = consts or {}
    names = [*inputs, *consts]
    outs = [f"y{i}" for i in range(outputs)]
    node = helper.make_node(
        op, [n if not n.startswith("_") else "" for n in names], outs, **(attrs or {})
    )
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        initializer=[numpy_helper.from_array(v, n) for n, v in consts.items() if v is not None],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)
    return model, node


def against_onnxruntime(op, inputs, attrs=None, consts=None, opset=17, positive=False):
    consts = {n: v for n, v in (consts or {}).items()}
    model, node = one_op(op, inputs, attrs, consts, opset)
    feeds = {}
    for n, s in inputs.items():
        x = RNG.standard_normal(s).astype(np.float32)
        feeds[n] = np.abs(x) + 0.1 if positive else x
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    args = [feeds[n] for n in inputs] + [v for v in consts.values()]
    got = run_onnx_op(node, args, opset)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert np.abs(g - w).max() <= 1e-5 * max(np.abs(w).max(), 1.0)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    ("op", "attrs", "consts"),
    [
        ("Conv", {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, {"w": f32(6, 4, 3, 3)}),
        ("Conv", {"pads": [0, 2, 1, 0], "dilations": [2, 1]}, {"w": f32(6, 4, 3, 2), "b": f32(6)}),
        ("Conv", {"group": 2, "pads": [1, 1, 1, 1]}, {"w": f32(6, 2, 3, 3)}),
        (
            "MaxPool",
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
            {},
        ),
        (
            "AveragePool",
            {
                "kernel_shape": [3, 2],
                "strides": [2, 2],
                "pads": [1, 0, 1, 1],
                "count_include_pad": 1,
            },
            {},
        ),
        ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {}),
        ("GlobalMaxPool", {}, {}),
        ("InstanceNormalization", {"epsilon": 1e-3}, {"s": f32(4), "b": f32(4)}),
        (
            "BatchNormalization",
            {},
            {"s": f32(4), "b": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 0.5},
        ),
        ("LayerNormalization", {"axis": -2}, {"s": f32(7, 6), "b": f32(7, 6)}),
        ("ReduceMean", {"axes": [1, 3], "keepdims": 1}, {}),
        ("ReduceMax", {"axes": [2], "keepdims": 0}, {}),
        (
            "Pad",
            {},
            {
                "pads": np.array([0, 1, 2, 0, 0, 0, 1, 3], np.int64),
                "value": np.array(0.5, np.float32),
            },
        ),
        ("Gather", {"axis": 1}, {"i": np.array([3, 0, 0, 2], np.int64)}),
        (
            "Slice",
            {},
            {
                "st": np.array([1, -4], np.int64),
                "en": np.array([7, 99], np.int64),
                "ax": np.array([2, 3], np.int64),
                "sp": np.array([2, 1], np.int64),
            },
        ),
        ("Transpose", {"perm": [0, 2, 3, 1]}, {}),
        ("Softmax", {"axis": 2}, {}),
        ("LogSoftmax", {"axis": -1}, {}),
        ("Clip", {}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}),
        ("PRelu", {}, {"slope": f32(4, 1, 1)}),
        ("Mul", {}, {"s": f32(4, 1, 1)}),
        ("Div", {}, {"d": np.abs(f32(6)) + 0.5}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_kernel_matches_onnxruntime(op, attrs, consts):
    against_onnxruntime(op, {"x": X4}, attrs, consts)


def test_legacy_softmax_normalises_every_axis_from_its_axis():
    against_onnxruntime("Softmax", {"x": X4}, {"axis": 1}, opset=11)


def test_reduce_sum_axes_as_input_and_split():
    against_onnxruntime(
        "ReduceSum", {"x": X4}, {"keepdims": 1}, {"a": np.array([1], np.int64)}, opset=13
    )
    model, node = one_op(
        "Split", {"x": X4}, {"axis": 1}, {"s": np.array([1, 3], np.int64)}, outputs=2
    )
    x = f32(*X4)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for g, w in zip(
        run_onnx_op(node, [x, np.array([1, 3])], 17), session.run(None, {"x": x}), strict=True
    ):
        assert np.array_equal(g, w)


def test_matmul_gemm_and_elementwise_with_broadcast():
    against_onnxruntime("MatMul", {"a": (1, 2, 5, 3), "b": (1, 2, 3, 4)})
    against_onnxruntime(
        "Gemm",
        {"a": (3, 5)},
        {"transA": 1, "alpha": 0.5, "beta": 2.0},
        {"b": f32(3, 4), "c": f32(4)},
    )
    against_onnxruntime("Max", {"a": (2, 3), "b": (3,), "c": (2, 1)})
    against_onnxruntime("Mean", {"a": (2, 3), "b": (2, 3)})
    against_onnxruntime("Sub", {"a": (2, 3), "b": (1, 3)})
    against_onnxruntime("Concat", {"a": (1, 2, 3), "b": (1, 4, 3)}, {"axis": 1})


UNARY_OPSETS = {"Mish": 18, "Gelu": 20}


@pytest.mark.parametrize("op", sorted(set(UNARY) - {"Clip", "Cast"}))
def test_unary_kernel_matches_onnxruntime(op):
    positive = op in ("Log", "Sqrt", "Reciprocal")
    against_onnxruntime(op, {"x": X4}, opset=UNARY_OPSETS.get(op, 17), positive=positive)


def test_gelu_tanh_approximation():
    against_onnxruntime("Gelu", {"x": X4}, {"approximate": "tanh"}, opset=20)


@pytest.mark.parametrize("op", sorted(set(UNARY) - {"Cast"}))
def test_a_nan_reaches_exactly_its_own_output(op):
    """An elementwise kernel passes a NaN to the output it feeds and to no other: the
    replay reads a NaN in a computed block as a missing input."""
    x = np.abs(RNG.standard_normal((1, 3, 4, 5))) + 0.5  # in every op's domain
    x[0, 1, 2, 3] = np.nan
    node = helper.make_node(op, ["x"], ["y"])
    (y,) = run_onnx_op(node, [x], 20)
    assert np.array_equal(np.isnan(y), np.isnan(x))


def test_a_nan_reaches_a_conv_and_pool_window_and_no_further():
    """A NaN input element poisons exactly the outputs whose window covers it (3x3, stride
    1, pad 1: a 3x3 block of every output channel; max and average pools alike)."""
    x = RNG.standard_normal((1, 2, 6, 6))
    x[0, 1, 2, 3] = np.nan
    want = np.zeros((6, 6), bool)
    want[1:4, 2:5] = True
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    (y,) = run_onnx_op(conv, [x, RNG.standard_normal((3, 2, 3, 3))], 17)
    assert all(np.array_equal(np.isnan(y[0, c]), want) for c in range(3))
    for op in ("MaxPool", "AveragePool"):
        pool = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        (y,) = run_onnx_op(pool, [x], 17)
        assert np.array_equal(np.isnan(y[0, 1]), want)
        assert not np.isnan(y[0, 0]).any()


def test_unsupported_op_is_named():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up")
    with pytest.raises(Exception, match=r"ConvTranspose .*'up'.* not supported"):
        run_onnx_op(node, [np.zeros((1, 1, 2, 2)), np.zeros((1, 1, 2, 2))], 17)
