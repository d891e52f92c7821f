"""ONNX <-> :class:`SubGraph`, and the numeric equivalence check of a rewritten model.

On the way in, ``Identity`` and ``Constant`` nodes are folded away (the exporter emits one
``Identity`` per shared weight; leaving them would hide a conv's weight from every rule),
and shapes come from :func:`fusionplan.ir.shapes.resolve_shapes`, which also handles models
onnx's own inference leaves unresolved. On the way out, derived weights are computed, the
model is checked with ``onnx.checker`` and keeps its interface: graph inputs and outputs
with their names and types.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from fusionplan.ir.errors import ModelError
from fusionplan.ir.onnx_import import fix_input_shapes, symbolic_input_hint
from fusionplan.ir.shapes import resolve_shapes
from fusionplan.passes.substitution.graph import (
    MS_DOMAIN,
    Node,
    SubGraph,
    TensorAttr,
    TensorInfo,
    Weight,
    make_attrs,
    qualified,
    split_qualified,
)


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Read and validate an ONNX file (weights included)."""
    try:
        model = onnx.load(os.fspath(path))
        onnx.checker.check_model(model, full_check=False)
    except (OSError, DecodeError, onnx.checker.ValidationError) as exc:
        raise ModelError(f"{path}: not a valid ONNX model ({str(exc).splitlines()[0]})") from exc
    return model


def with_input_shapes(
    model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None
) -> onnx.ModelProto:
    """``model`` with the named graph inputs given static shapes (``--input-shape``), for a
    model exported with symbolic axes; a copy, the caller's model is left as it was."""
    if not input_shapes:
        return model
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    fix_input_shapes(fixed, input_shapes)
    return fixed


def from_onnx(model: onnx.ModelProto, *, command: str = "substitute") -> SubGraph:
    """The substitution graph of ``model``; every tensor must have a static shape.
    ``command`` (or pass), the one that needs the graph, is named in its errors."""
    graph = model.graph
    shapes = resolve_shapes(model)
    types = _elem_types(model)
    weights = {t.name: Weight.of(numpy_helper.to_array(t)) for t in graph.initializer}
    alias: dict[str, str] = {}
    nodes: list[Node] = []
    outputs = [o.name for o in graph.output]
    for proto in graph.node:
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in proto.attribute
        ):
            raise ModelError(f"{command}: {proto.op_type} with a subgraph is not supported")
        ins = tuple(_follow(alias, t) for t in proto.input)
        if proto.op_type == "Constant" and not proto.domain:
            value = helper.get_attribute_value(proto.attribute[0])
            if isinstance(value, onnx.TensorProto):
                weights[proto.output[0]] = Weight.of(numpy_helper.to_array(value))
                continue
        if proto.op_type == "Identity" and not proto.domain and proto.output[0] not in outputs:
            alias[proto.output[0]] = ins[0]
            continue
        attrs = make_attrs(**{a.name: helper.get_attribute_value(a) for a in proto.attribute})
        name = proto.name or f"{proto.op_type}_{len(nodes)}"
        nodes.append(
            Node(name, qualified(proto.op_type, proto.domain), ins, tuple(proto.output), attrs)
        )
    inputs = [i.name for i in graph.input if i.name not in weights]
    _propagate_dtypes(nodes, types, weights)
    tensors: dict[str, TensorInfo] = {}
    for tensor in (*inputs, *(t for n in nodes for t in n.outputs if t)):
        dims = shapes.get(tensor)
        if dims is None:
            raise _no_static_shape(model, tensor, command)
        tensors[tensor] = TensorInfo(tuple(dims), types.get(tensor, "float32"))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        nodes = [
            Node(f"{n.name}#{i}", n.op, n.inputs, n.outputs, n.attrs) for i, n in enumerate(nodes)
        ]
    opsets = {o.domain or "": o.version for o in model.opset_import}
    return SubGraph(
        nodes, tensors, weights, inputs, outputs, opsets=opsets, name=graph.name or "graph"
    )


def _no_static_shape(model: onnx.ModelProto, tensor: str, command: str) -> ModelError:
    """Say what fixes a missing shape: ``--input-shape`` for a symbolic graph input (inputs
    are checked first, so a later tensor lacks its shape although the inputs are static)."""
    inputs = {vi.name: vi for vi in model.graph.input}
    if tensor not in inputs:
        return ModelError(
            f"{command}: tensor {tensor!r} has no static shape although every graph input "
            "is static; declare it in the model's value_info"
        )
    shown, example = symbolic_input_hint(inputs[tensor])
    return ModelError(
        f"{command}: tensor {tensor!r} has no static shape: it is a graph input with "
        f"symbolic dimensions ({shown}); give it one, e.g. --input-shape {tensor}={example}"
    )


def _follow(alias: dict[str, str], tensor: str) -> str:
    while tensor in alias:
        tensor = alias[tensor]
    return tensor


INT64_OPS = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin"})
BOOL_OPS = frozenset(
    {
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "Not",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
    }
)
INDEX_FIRST_OPS = frozenset({"Where"})  # data type follows input 1 (input 0 is the condition)


def _propagate_dtypes(nodes: list[Node], types: dict[str, str], weights: dict[str, Weight]) -> None:
    """Element types of node outputs the model does not annotate, in graph order: written
    back as value_info, a wrong guess (an int64 Shape output called float) breaks the model."""

    def of(tensor: str) -> str:
        if tensor in weights:
            return weights[tensor].dtype
        return types.get(tensor, "float32")

    for node in nodes:
        op = split_qualified(node.op)[1]
        if op in INT64_OPS:
            dtype = "int64"
        elif op in BOOL_OPS:
            dtype = "bool"
        elif op == "Cast":
            dtype = _np_name(node.attr("to"))
        elif op == "ConstantOfShape":
            value = node.attr("value")
            dtype = "float32" if value is None else _np_name(_thaw(value).data_type)
        elif op in INDEX_FIRST_OPS and len(node.inputs) > 1:
            dtype = of(node.inputs[1])
        elif node.inputs and node.inputs[0]:
            dtype = of(node.inputs[0])
        else:
            dtype = "float32"
        for t in node.outputs:
            if t and t not in types:
                types[t] = dtype


def _elem_types(model: onnx.ModelProto) -> dict[str, str]:
    """Numpy dtype name of every typed tensor (inputs, outputs, value_info)."""
    graph = model.graph
    out: dict[str, str] = {}
    for info in (*graph.input, *graph.output, *graph.value_info):
        elem = info.type.tensor_type.elem_type
        if elem:
            out[info.name] = np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name
    return out


def to_onnx(g: SubGraph, *, standard_ops: bool = False) -> onnx.ModelProto:
    """An ONNX model computing what ``g`` computes; passes ``onnx.checker``.

    With ``standard_ops``, onnxruntime's fused contrib ops are written as the standard ops
    they fuse (``FusedConv`` -> ``Conv`` [+ ``Add``] + activation): for consumers that read
    only the ONNX standard, such as the fusion planner's importer, which fuses activations
    into their producer itself.
    """
    nodes = []
    domains = set()
    for node in _standard(g.nodes.values()) if standard_ops else g.nodes.values():
        domain, op_type = split_qualified(node.op)
        domains.add(domain)
        nodes.append(
            helper.make_node(
                op_type,
                list(node.inputs),
                list(node.outputs),
                name=node.name,
                domain=domain or None,
                **{k: _thaw(v) for k, v in node.attrs},
            )
        )
    initializers = [numpy_helper.from_array(w.array, name) for name, w in g.weights.items()]
    inputs = [_value_info(g, t) for t in g.inputs]
    outputs = [_value_info(g, t) for t in g.outputs]
    io = {*g.inputs, *g.outputs}
    known = [_value_info(g, t) for t in g.tensors if t not in io]  # contrib ops lack inference
    graph = helper.make_graph(nodes, g.name, inputs, outputs, initializers, value_info=known)
    opsets = dict(g.opsets)
    if MS_DOMAIN in domains:
        opsets.setdefault(MS_DOMAIN, 1)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    return model


def _np_name(elem_type: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def _thaw(value: Any) -> Any:
    """An attribute value back in onnx.helper's terms (tensor attributes were frozen)."""
    if isinstance(value, TensorAttr):
        return onnx.load_tensor_from_string(value.data)
    return value


def _standard(nodes: Iterable[Node]) -> Iterator[Node]:
    for node in nodes:
        if node.op not in (f"{MS_DOMAIN}.FusedConv", f"{MS_DOMAIN}.FusedGemm"):
            yield node
            continue
        base = "Conv" if node.op.endswith("FusedConv") else "Gemm"
        act = node.attr("activation")
        params = node.attr("activation_params") or ()
        attrs = node.with_attrs(activation=None, activation_params=None)
        ins, out = node.inputs, node.outputs[0]
        summed = base == "Conv" and len(ins) > 3 and ins[3]
        mid = f"{out}__pre" if act or summed else out
        yield Node(node.name, base, ins[:3], (mid,), attrs)
        if summed:  # a residual without an activation is the Add's output itself
            sum_out = f"{out}__sum" if act else out
            yield Node(f"{node.name}__add", "Add", (mid, ins[3]), (sum_out,))
            mid = sum_out
        if act:
            act_attrs = make_attrs(alpha=params[0] if params else None)
            yield Node(f"{node.name}__act", act, (mid,), (out,), act_attrs)


def _value_info(g: SubGraph, tensor: str) -> onnx.ValueInfoProto:
    info = g.tensors[tensor]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    return helper.make_tensor_value_info(tensor, elem, list(info.shape))


@dataclass(frozen=True)
class Equivalence:
    """Outcome of running two models on the same random inputs."""

    max_rel_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_rel_error <= self.tolerance


def ort_session(model: onnx.ModelProto, *, threads: int = 0) -> Any:
    """An onnxruntime CPU session for ``model``; a model it cannot load is a one-line
    :class:`ModelError` (a search on a model nothing can run is wasted)."""
    import onnxruntime as ort  # heavy: loads the runtime, only when a model is run

    options = ort.SessionOptions()
    options.log_severity_level = 4  # fatal only: failures surface as our one-line error
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    try:
        return ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own unrelated exception types
        first = " ".join(str(exc).split())[:200]
        raise ModelError(f"onnxruntime cannot run the model: {first}") from None


def random_feeds(session: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """A seeded standard-normal float32 input for every graph input of ``session`` (a
    symbolic dimension taken as 1)."""
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(
            np.float32
        )
        for i in session.get_inputs()
    }


def run_model(model: onnx.ModelProto, *, seed: int = 0) -> dict[str, np.ndarray]:
    """Outputs of one onnxruntime run on a seeded random input (normal, float32); a model
    that fails to run is a one-line :class:`ModelError`."""
    import onnxruntime as ort  # heavy: already loaded by ort_session

    session = ort_session(model)
    feeds = random_feeds(session, seed)
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # fatal only: a failing run reports through our one line
    try:
        values = session.run(None, feeds, quiet)
    except Exception as exc:  # onnxruntime raises its own unrelated exception types
        first = " ".join(str(exc).split())[:200]
        raise ModelError(f"onnxruntime cannot run the model: {first}") from None
    return dict(zip([o.name for o in session.get_outputs()], values, strict=True))


def check_equivalence(
    original: onnx.ModelProto, rewritten: onnx.ModelProto, *, tolerance: float = 1e-4, seed: int = 0
) -> Equivalence:
    """Run both in onnxruntime on one random input and compare every output
    (:func:`max_relative_error`)."""
    ref = run_model(original, seed=seed)
    got = run_model(rewritten, seed=seed)
    return Equivalence(max_relative_error(ref, got), tolerance)


def max_relative_error(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> float:
    """Worst output's ``max |a - b| / max |a|`` (relative to the output's scale, so a
    near-zero element does not blow it up)."""
    worst = 0.0
    for name, a in ref.items():
        b = np.asarray(got[name])
        scale = float(np.max(np.abs(a))) or 1.0
        worst = max(worst, float(np.max(np.abs(a - b))) / scale if a.size else 0.0)
    return worst
