"""ONNX <-> :class:`ModelGraph`: the one importer, and the writer at the boundary.

In (:func:`from_onnx`): checked, static shapes inferred once, constant subgraphs folded into
weights, ``Identity`` nodes removed; every pass and the planner's lowering start from it.
Out (:func:`to_onnx`): derived weights are computed, the model is checked with
``onnx.checker`` and keeps its interface: graph inputs and outputs with their names and
types.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from fusionplan.ir.errors import GraphError, ModelError
from fusionplan.ir.graph import _topological_order
from fusionplan.ir.model import (
    MS_DOMAIN,
    ModelGraph,
    ModelNode,
    TensorAttr,
    TensorInfo,
    Weight,
    make_attrs,
    qualified,
    split_qualified,
)
from fusionplan.ir.shapes import Resolved, evaluate_node, resolve_shapes


def read_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Read an ONNX file; weights stored in external files stay on disk (the model IR reads
    them when a weight's values are asked for)."""
    try:
        model = onnx.load(os.fspath(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several unrelated types
        raise ModelError(f"{path} is not an ONNX model ({type(exc).__name__})") from None
    if model.ir_version == 0 or len(model.graph.node) == 0:
        raise ModelError(f"{path} is not an ONNX model (no graph)")
    return model


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Read an ONNX file with its weights, for a pass that also runs the model."""
    try:
        return onnx.load(os.fspath(path))
    except (OSError, DecodeError) as exc:
        raise ModelError(f"{path}: not a valid ONNX model ({str(exc).splitlines()[0]})") from exc


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


def from_onnx(
    model: onnx.ModelProto,
    *,
    command: str = "",
    path: str | os.PathLike | None = None,
    require_shapes: bool = True,
) -> ModelGraph:
    """The model IR of ``model``: the one importer every pass and the planner go through.

    In order: a cycle check, ``onnx.checker`` (by ``path`` when given: external weights,
    models over 2 GB), static shape inference (:func:`resolve_shapes`), then one walk in
    graph order that turns Constant nodes and every node computable from constants (Shape
    and Size of a static tensor, Cast and arithmetic on those, a transform of a weight)
    into :class:`Weight` s (except where it makes a graph output: the interface stays
    computed), and removes ``Identity`` nodes (the exporter emits one per shared weight;
    leaving them would hide a conv's weight from every rule). Node names
    are :func:`onnx_node_names`. Every graph input must be static; with
    ``require_shapes`` every other tensor too (a tensor without one is left out of
    ``tensors`` otherwise). ``command``, the one that needs the graph, prefixes errors.
    """
    prefix = f"{command}: " if command else ""
    graph = model.graph
    _check_acyclic(graph)
    _check(model, path)
    try:
        resolved = resolve_shapes(model)
    except Exception as exc:
        raise ModelError(f"shape inference failed: {str(exc).splitlines()[0]}") from None
    types = _elem_types(resolved.types)
    base_dir = os.path.dirname(os.fspath(path)) if path is not None else ""
    weights = {t.name: _initializer(t, base_dir) for t in graph.initializer}
    opsets = {o.domain or "": o.version for o in model.opset_import}
    alias: dict[str, str] = {}
    nodes: list[ModelNode] = []
    outputs = [o.name for o in graph.output]
    for proto, name in zip(graph.node, onnx_node_names(graph), strict=True):
        if any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
            for a in proto.attribute
        ):
            raise ModelError(f"{prefix}{proto.op_type} with a subgraph is not supported")
        ins = tuple(_follow(alias, t) for t in proto.input)
        if proto.op_type == "Identity" and not proto.domain and proto.output[0] not in outputs:
            alias[proto.output[0]] = ins[0]
            continue
        produces_output = any(o in outputs for o in proto.output)
        folded = None if produces_output else _fold(proto, ins, weights, resolved, opsets)
        if folded is not None:
            weights.update(folded)
            continue
        attrs = make_attrs(**{a.name: helper.get_attribute_value(a) for a in proto.attribute})
        nodes.append(
            ModelNode(name, qualified(proto.op_type, proto.domain), ins, tuple(proto.output), attrs)
        )
    shapes = resolved.shapes
    inputs = [i.name for i in graph.input if i.name not in weights]
    read = {t for n in nodes for t in n.inputs} | set(outputs)
    weights = {name: w for name, w in weights.items() if name in read}  # folded away
    for tensor in inputs:
        if shapes.get(tensor) is None:
            raise _symbolic_input(model, tensor, prefix)
    _propagate_dtypes(nodes, types, weights)
    tensors: dict[str, TensorInfo] = {}
    for tensor in (*inputs, *(t for n in nodes for t in n.outputs if t)):
        dims = shapes.get(tensor)
        if dims is None:
            if require_shapes:
                raise ModelError(
                    f"{prefix}tensor {tensor!r} has no static shape although every graph "
                    "input is static; declare it in the model's value_info"
                )
            continue
        tensors[tensor] = TensorInfo(tuple(dims), types.get(tensor, "float32"))
    return ModelGraph(
        nodes, tensors, weights, inputs, outputs, opsets=opsets, name=graph.name or "graph"
    )


FOLD_EAGER = 1 << 16
"""A constant node whose inputs and outputs are all at most this many elements is folded at
import (shape vectors, small tables); a larger one (a transform of a weight, a filled
tensor) is folded lazily, its value computed when read."""
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
     "Bernoulli"}
)  # fmt: skip


def _fold(
    proto: onnx.NodeProto,
    ins: tuple[str, ...],
    weights: dict[str, Weight],
    resolved: Resolved,
    opsets: Mapping[str, int],
) -> dict[str, Weight] | None:
    """The outputs of ``proto`` as weights if it computes a constant (a Constant node, the
    Shape or Size of a static tensor, an op on constants only), else None. Values shape
    resolution already computed are reused."""
    shapes, inferred = resolved.shapes, resolved.types
    if proto.domain not in ("", "ai.onnx") or proto.op_type in RANDOM_OPS:
        return None
    outs = [o for o in proto.output if o]
    given = [t for t in ins if t]
    node = _renamed(proto, ins)
    if proto.op_type == "Constant":
        tensor = next((a.t for a in proto.attribute if a.name == "value"), None)
        if tensor is not None and not tensor.external_data:  # a weight: read when used
            dims, dtype = tuple(tensor.dims), _np_name(tensor.data_type)
            return {outs[0]: Weight.lazy(dims, lambda: numpy_helper.to_array(tensor), dtype)}
    static = proto.op_type in ("Shape", "Size")
    on_constants = proto.op_type == "Constant" or (given and all(t in weights for t in given))
    if not (static or on_constants):
        return None
    if all(o in resolved.values for o in outs):  # evaluated by shape resolution
        return {o: Weight.of(resolved.values[o]) for o in outs}
    if static:
        value = evaluate_node(node, {}, shapes, opsets)
        return None if value is None else {o: Weight.of(v) for o, v in value.items()}
    known = [shapes.get(o) for o in outs]
    large_out = any(d is not None and math.prod(d) > FOLD_EAGER for d in known)
    if not large_out and all(math.prod(weights[t].shape) <= FOLD_EAGER for t in given):
        value = evaluate_node(node, {t: weights[t].array for t in given}, shapes, opsets)
        if value is None or set(value) != set(outs):
            return None
        return {o: Weight.of(v) for o, v in value.items()}
    if len(outs) != 1 or shapes.get(outs[0]) is None or outs[0] not in inferred:
        return None
    elem = inferred[outs[0]].tensor_type.elem_type
    if not elem:
        return None

    def make() -> np.ndarray:
        value = evaluate_node(node, {t: weights[t].array for t in given}, shapes, opsets)
        if value is None:
            raise ModelError(f"cannot fold constant node {proto.name or proto.op_type!r}")
        return value[outs[0]]

    return {outs[0]: Weight.lazy(shapes[outs[0]], make, _np_name(elem))}


def _renamed(proto: onnx.NodeProto, ins: tuple[str, ...]) -> onnx.NodeProto:
    """``proto`` reading ``ins`` (a removed Identity's source instead of its output)."""
    if tuple(proto.input) == ins:
        return proto
    node = onnx.NodeProto()
    node.CopyFrom(proto)
    del node.input[:]
    node.input.extend(ins)
    return node


def _initializer(tensor: onnx.TensorProto, base_dir: str) -> Weight:
    """A weight whose array is read from the initializer (or its external file) when used."""
    dtype = _np_name(tensor.data_type)
    return Weight.lazy(tuple(tensor.dims), lambda: numpy_helper.to_array(tensor, base_dir), dtype)


def _check(model: onnx.ModelProto, path: str | os.PathLike | None) -> None:
    """``onnx.checker``; by path when the file is the model as given (external weights and
    models over 2 GB need it)."""
    try:
        onnx.checker.check_model(os.fspath(path) if path is not None else model)
    except onnx.checker.ValidationError as exc:
        # The checker's messages span lines (node dumps); keep them on one line.
        text = " ".join(str(exc).split()) or "invalid"
        raise ModelError(f"invalid ONNX model: {text[:300]}") from None


def _symbolic_input(model: onnx.ModelProto, tensor: str, prefix: str) -> ModelError:
    """A graph input without a static shape: say how to give it one."""
    shown, example = symbolic_input_hint(next(vi for vi in model.graph.input if vi.name == tensor))
    return ModelError(
        f"{prefix}tensor '{tensor}' has a dynamic or unknown shape: it is a graph input with "
        f"symbolic dimensions ({shown}); give it a static shape, e.g. --input-shape "
        f"{tensor}={example} (API: input_shapes={{'{tensor}': (...)}})"
    )


def onnx_node_names(graph: onnx.GraphProto) -> list[str]:
    """A unique name per ONNX node: its own name, or ``<op>_<index>`` when it has none.

    Plans refer to nodes by these names, so annotating a model uses the same rule.
    """
    names, seen = [], set()
    for i, n in enumerate(graph.node):
        name = n.name or f"{n.op_type}_{i}"
        if name in seen:
            name = f"{name}__{i}"
        seen.add(name)
        names.append(name)
    return names


def fix_input_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Give graph inputs of ``model`` (a ModelProto, changed in place) static shapes, e.g.
    for symbolic batch axes, and drop the value_info inferred from the old shapes."""
    inputs = {vi.name: vi for vi in model.graph.input}
    for tname, dims in input_shapes.items():
        if tname not in inputs:
            raise ModelError(f"input_shapes names '{tname}', which is not a graph input")
        shape = inputs[tname].type.tensor_type.shape
        if len(shape.dim) != len(dims):
            raise ModelError(f"input '{tname}' has rank {len(shape.dim)}, not {len(dims)}")
        for d, value in zip(shape.dim, dims, strict=True):
            d.Clear()
            d.dim_value = int(value)
    for vi in model.graph.value_info:
        vi.type.tensor_type.ClearField("shape")


def symbolic_input_hint(value_info: onnx.ValueInfoProto) -> tuple[str, str]:
    """A graph input's dimensions as declared (``N, 3, 224, 224``) and a static shape to
    suggest for it (``1x3x224x224``: batch 1, other symbols as ``<T>`` placeholders), for
    the errors that ask for ``--input-shape``."""
    dims = value_info.type.tensor_type.shape.dim
    shown = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param for d in dims]
    example = "x".join(
        s if s.isdigit() else "1" if axis == 0 else f"<{s or '?'}>" for axis, s in enumerate(shown)
    )
    return ", ".join(s or "?" for s in shown), example or "1x3x224x224"


def _check_acyclic(graph: onnx.GraphProto) -> None:
    """ONNX requires topological order, but we report a cycle in words, not a checker dump."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    preds = [[producer[t] for t in node.input if t in producer] for node in graph.node]
    if _topological_order(len(graph.node), preds) is None:
        raise GraphError("the graph has a cycle; a fusion plan needs a DAG")


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


def _propagate_dtypes(
    nodes: list[ModelNode], types: dict[str, str], weights: dict[str, Weight]
) -> None:
    """Element types of node outputs shape inference could not type (contrib ops), in graph
    order: written back as value_info, a wrong guess (an int64 output called float) breaks
    the model."""

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


def _elem_types(types: Mapping[str, onnx.TypeProto]) -> dict[str, str]:
    """Numpy dtype name of every tensor shape inference typed (declared or inferred)."""
    out: dict[str, str] = {}
    for name, t in types.items():
        elem = t.tensor_type.elem_type
        if elem:
            out[name] = _np_name(elem)
    return out


OnnxWriter = Callable[[ModelGraph], onnx.ModelProto]
"""How a caller writes model graphs (``to_onnx`` with its options fixed): what is measured
or shipped is the graph as written."""


def to_onnx(g: ModelGraph, *, standard_ops: bool = False) -> onnx.ModelProto:
    """An ONNX model computing what ``g`` computes; passes ``onnx.checker``.

    With ``standard_ops``, onnxruntime's fused contrib ops are written as the standard ops
    they fuse (``FusedConv`` -> ``Conv`` [+ ``Add``] [+ activation]): a portable model for
    any ONNX runtime, and for the fusion planner's importer, which fuses activations into
    their producer itself.
    """
    if standard_ops:
        g = standard_graph(g)
    nodes = []
    domains = set()
    for node in g.nodes.values():
        domains.add(split_qualified(node.op)[0])
        nodes.append(node_proto(node))
    initializers = [numpy_helper.from_array(w.array, name) for name, w in g.weights.items()]
    inputs = [_value_info(g, t) for t in g.inputs]
    outputs = [_value_info(g, t) for t in g.outputs]
    io = {*g.inputs, *g.outputs}
    known = [_value_info(g, t) for t in g.tensors if t not in io]  # contrib ops lack inference
    graph = helper.make_graph(nodes, g.name, inputs, outputs, initializers, value_info=known)
    # the default domain and those the nodes use: a standard-op model imports no contrib set
    opsets = {d: v for d, v in g.opsets.items() if d in domains or d in ("", "ai.onnx")}
    if MS_DOMAIN in domains:
        opsets.setdefault(MS_DOMAIN, 1)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    return model


def node_proto(node: ModelNode) -> onnx.NodeProto:
    """``node`` as an ONNX node (attributes back in onnx's terms)."""
    domain, op_type = split_qualified(node.op)
    return helper.make_node(
        op_type,
        list(node.inputs),
        list(node.outputs),
        name=node.name,
        domain=domain or None,
        **{k: _thaw(v) for k, v in node.attrs},
    )


def _np_name(elem_type: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def _thaw(value: Any) -> Any:
    """An attribute value back in onnx.helper's terms (tensor attributes were frozen)."""
    if isinstance(value, TensorAttr):
        return onnx.load_tensor_from_string(value.data)
    return value


def standard_graph(g: ModelGraph) -> ModelGraph:
    """``g`` with onnxruntime's fused contrib ops as the standard ops they fuse: what any
    ONNX runtime and the planner's lowering read. The tensors between the parts of a fused
    op have its output's shape and type; ``g`` itself when it has no such op."""
    if not any(node.op in FUSED_CONTRIB for node in g.nodes.values()):
        return g
    nodes: list[ModelNode] = []
    tensors = dict(g.tensors)
    for node in g.nodes.values():
        for part in _standard(node):
            nodes.append(part)
            for t in part.outputs:
                tensors.setdefault(t, g.tensors[node.outputs[0]])
    opsets = {d: v for d, v in g.opsets.items() if d != MS_DOMAIN}
    return ModelGraph(nodes, tensors, g.weights, g.inputs, g.outputs, opsets=opsets, name=g.name)


FUSED_CONTRIB = frozenset({f"{MS_DOMAIN}.FusedConv", f"{MS_DOMAIN}.FusedGemm"})
STANDARD_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu")
"""The fused ops' activations written as a standard op with at most LeakyRelu's slope."""
"""onnxruntime's fused ops the substitution rules write; each has a standard form."""


def _standard(node: ModelNode) -> Iterator[ModelNode]:
    """A ``FusedConv``/``FusedGemm`` as the standard ops it fuses: ``Conv`` (or ``Gemm``),
    then ``Add`` of FusedConv's Z input where it has one, then the activation where it has
    one; the last of these writes the fused node's output. Any other node as it is."""
    if node.op not in FUSED_CONTRIB:
        yield node
    else:
        conv = node.op.endswith("FusedConv")
        act = node.attr("activation")
        params = node.attr("activation_params") or ()
        if act and act not in STANDARD_ACTIVATIONS:
            # Clip's bounds are inputs in standard ONNX, HardSigmoid has two parameters:
            # written without them, the model would compute something else
            raise ModelError(
                f"{node.name}: {node.op} with activation {act} has no standard-op form here "
                f"(only {', '.join(STANDARD_ACTIVATIONS)}); use --target onnxruntime"
            )
        alpha = params[0] if params else node.attr("activation_alpha")
        attrs = node.with_attrs(activation=None, activation_params=None, activation_alpha=None)
        ins, out = node.inputs, node.outputs[0]
        residual = ins[3] if conv and len(ins) > 3 and ins[3] else ""
        mid = f"{out}__pre" if residual or act else out
        yield ModelNode(node.name, "Conv" if conv else "Gemm", ins[:3], (mid,), attrs)
        if residual:
            summed = f"{out}__sum" if act else out
            yield ModelNode(f"{node.name}__add", "Add", (mid, residual), (summed,))
            mid = summed
        if act:
            slope = make_attrs(alpha=alpha if act == "LeakyRelu" else None)
            yield ModelNode(f"{node.name}__act", act, (mid,), (out,), slope)


def _value_info(g: ModelGraph, tensor: str) -> onnx.ValueInfoProto:
    info = g.tensors[tensor]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    return helper.make_tensor_value_info(tensor, elem, list(info.shape))
