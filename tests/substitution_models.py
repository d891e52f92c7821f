"""Small ONNX models for the substitution tests, and the check every rule test makes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import from_onnx, to_onnx
from fusionplan.ir.onnx_run import check_equivalence
from fusionplan.passes.substitution.pipeline import STANDARD_DOMAINS
from fusionplan.passes.substitution.rules.registry import RULES

RNG = np.random.default_rng(0)


def weight(name: str, *shape: int, scale: float = 0.5) -> onnx.TensorProto:
    """A random float32 initializer."""
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def int_const(name: str, values: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: dict[str, Sequence[int]],
    outputs: Sequence[str],
    initializers: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    """A checked opset-17 model; output shapes are left to inference."""
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()]
    probe = helper.make_graph(list(nodes), "test", ins, [], list(initializers))
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    inferred = onnx.shape_inference.infer_shapes(helper.make_model(probe, opset_imports=opsets))
    typed = {v.name: v for v in inferred.graph.value_info}
    graph = helper.make_graph(
        list(nodes), "test", ins, [typed[n] for n in outputs], list(initializers)
    )
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def apply_everywhere(m: onnx.ModelProto, rule_name: str) -> tuple[ModelGraph, int]:
    """Apply ``rule_name`` until it matches nowhere (at most 50 times); the final graph
    and how many times it applied."""
    rule = RULES.get(rule_name)()
    g = from_onnx(m)
    applied = 0
    while applied < 50:
        found = rule.matches(g)
        if not found:
            break
        g = rule.apply(g, found[0])
        applied += 1
    return g, applied


def assert_rule_preserves(
    m: onnx.ModelProto, rule_name: str, *, times: int = 1, tolerance: float = 1e-4
) -> ModelGraph:
    """The rule applies exactly ``times`` times to ``m``, and the rewritten model, written
    with onnxruntime's contrib ops and with standard ops only, passes ``onnx.checker`` and
    matches the original in onnxruntime (optimisations off) to ``tolerance`` (relative)."""
    g, applied = apply_everywhere(m, rule_name)
    assert applied == times, f"{rule_name} applied {applied} times, expected {times}"
    for standard_ops in (False, True):  # as onnxruntime runs it, and portable
        written = to_onnx(g, standard_ops=standard_ops)
        if standard_ops:
            assert_standard_ops(written)
        result = check_equivalence(m, written, tolerance=tolerance)
        assert result.ok, f"{rule_name}: relative error {result.max_rel_error:.2e}"
    return g


def assert_standard_ops(m: onnx.ModelProto) -> None:
    """Every node is a default-domain ONNX op and no other opset is imported: the model
    needs none of onnxruntime's contrib ops."""
    domains = {n.domain for n in m.graph.node} | {o.domain for o in m.opset_import}
    assert domains <= STANDARD_DOMAINS, domains


def inception_block(channels: int = 4, size: int = 6) -> onnx.ModelProto:
    """Three branches on one input (1x1; 1x1 -> 3x3; 3x3), each with a Relu, concatenated:
    room for activation fusion, sibling merges and kernel enlargement."""
    c = channels
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["a3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a3"], ["r3"]),
        helper.make_node("Conv", ["x", "w4", "b4"], ["a4"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a4"], ["r4"]),
        helper.make_node("Concat", ["r1", "r3", "r4"], ["y"], axis=1),
    ]
    inits = [
        weight("w1", c, c, 1, 1),
        weight("b1", c),
        weight("w2", c, c, 1, 1),
        weight("b2", c),
        weight("w3", c, c, 3, 3),
        weight("b3", c),
        weight("w4", c, c, 3, 3),
        weight("b4", c),
    ]
    return model(nodes, {"x": (1, c, size, size)}, ["y"], inits)


def mlp(width: int = 8, layers: int = 3) -> onnx.ModelProto:
    """MatMul + bias Add + Relu layers: chains of dependent rewrites (Gemm, then fusion)."""
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
            helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
            helper.make_node("Relu", [f"a{i}"], [f"h{i}"]),
        ]
        inits += [weight(f"w{i}", width, width), weight(f"b{i}", width)]
        prev = f"h{i}"
    return model(nodes, {"x": (2, width)}, [prev], inits)
