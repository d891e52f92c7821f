"""Tensor shapes for the importer: static shapes computed inside the graph, and the row axis
of every activation tensor (docs/cost-model.md, "Units and scope", "What the importer does
to the graph" and "Transformers").

Shape resolution: ``onnx.shape_inference`` with data propagation gives up on shapes that a
model computes at run time from other shapes (a channel shuffle's Shape -> Gather -> Div ->
Slice, a ViT's Equal -> Where -> Expand of the class token). When every graph input is
static, such a subgraph is a constant: after one whole-model inference (on a copy without
the large weights), :func:`resolve_shapes` walks the graph once in order, evaluates each
node whose inputs are all known small constants (initializers, Constant nodes, Shape/Size
of a statically shaped tensor) with onnx's reference evaluator, and re-infers each node with
an unknown output from its now known inputs, constant ones passed as data. The model itself
is not changed (node names and order stay those of the file).

Rewrites: :func:`output_shapes` gives the output shapes of the ops substitution rules emit,
so a rewritten graph's tensors are known without another inference.

Row axes: the cost models stream tensors row by row, so the importer must know which axis of
each tensor is the row axis. :func:`row_axes` seeds it from the ops that define a layout
(spatial ops read axis 1 as channels and slide along axis 2) and carries it through
transposes, views, matmuls and gathers, so that a token axis stays the row axis wherever
the exporter moves it (PyTorch's attention runs sequence-first: (T, 1, D)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

if TYPE_CHECKING:
    from fusionplan.ir.model import ModelNode

Dims = tuple[int, ...]

FOLD_LIMIT = 1 << 16
"""Largest constant (elements) the resolver reads or produces: shape vectors and small tables.
Larger ones (weights, a ConstantOfShape of a feature map) keep only their inferred shape."""

SPATIAL_OPS = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "MaxPool",
        "AveragePool",
        "LpPool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "GlobalLpPool",
        "Resize",
        "Upsample",
        "BatchNormalization",
        "InstanceNormalization",
        "LRN",
    }
)
"""Ops whose ONNX definition fixes the layout (N, C, D1, ...): axis 1 is channels, axis 2 the
first spatial axis (the rows)."""

RESHAPE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
AXIS_MOVING_OPS = RESHAPE_OPS | frozenset(
    {"Transpose", "MatMul", "Gemm", "Einsum", "Gather", "GatherND", "DepthToSpace", "SpaceToDepth"}
)
"""Ops whose output axes are not their input's axes in order; every other op keeps axes."""


# ------------------------------------------------------------------ shape resolution
def static_dims(type_proto: onnx.TypeProto) -> Dims | None:
    """The dims of a tensor type if they are all known, else None."""
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(d.dim_value)
    return tuple(dims)


class Resolved(NamedTuple):
    """What shape resolution learnt about a model's tensors, by name."""

    shapes: dict[str, Dims | None]  # static dims (None where still unknown)
    types: dict[str, onnx.TypeProto]  # every tensor onnx could type
    values: dict[str, np.ndarray]  # the small constants it evaluated on the way


def resolve_shapes(model: onnx.ModelProto) -> Resolved:
    """Static dims, types and the small constant values of the tensors of ``model``.

    One whole-model inference first; if it leaves node outputs unknown, one pass in graph
    order folds each constant node and re-infers each node with an unknown output from its
    now known inputs (constant inputs passed as data), so chains of computed shapes (one per
    block in a Swin) resolve in a single pass. Raises what ``onnx.shape_inference`` raises
    on a model it cannot infer.
    """
    graph = model.graph
    consts: dict[str, TensorProto] = {}  # small initializers with their data
    typed: list[onnx.ValueInfoProto] = []  # the rest: only their type matters here
    for init in graph.initializer:
        if init.data_location != TensorProto.EXTERNAL and math.prod(init.dims) <= FOLD_LIMIT:
            consts[init.name] = init
        else:
            typed.append(helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    types = _infer(model, consts, typed)
    shapes = {name: static_dims(t) for name, t in types.items()}
    values = {name: numpy_helper.to_array(t) for name, t in consts.items()}
    if all(shapes.get(o) is not None for n in graph.node for o in n.output if o):
        return Resolved(shapes, types, values)
    opsets = {o.domain or "": o.version for o in model.opset_import}
    needed = _needed_constants(graph.node, shapes, set(consts))
    for node in graph.node:
        outs = [o for o in node.output if o]
        folded = None
        if any(o in needed for o in outs):
            folded = evaluate_node(node, values, shapes, opsets)
        if folded is not None and set(folded) == set(outs):
            if all(v.size <= FOLD_LIMIT for v in folded.values()):
                values.update(folded)
            for name, value in folded.items():
                shapes[name] = value.shape
                types[name] = helper.make_tensor_type_proto(
                    helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
                )
            continue
        if any(shapes.get(o) is None for o in outs):
            for name, t in _infer_node(model, node, types, values).items():
                if static_dims(t) is not None:
                    shapes[name], types[name] = static_dims(t), t
    return Resolved(shapes, types, values)


def _needed_constants(
    nodes: Sequence[onnx.NodeProto], shapes: Mapping[str, Dims | None], consts: set[str]
) -> set[str]:
    """Tensors that may be constants and whose values an unknown shape may depend on: the
    only ones worth evaluating (a Swin holds 10 000 constant nodes, most already resolved)."""
    maybe = set(consts)
    for node in nodes:
        if node.op_type in ("Shape", "Size") or all(i in maybe for i in node.input if i):
            maybe.update(o for o in node.output if o)
    needed: set[str] = set()
    for node in reversed(nodes):
        outs = [o for o in node.output if o]
        unknown = any(shapes.get(o) is None for o in outs)
        if unknown or (node.op_type not in ("Shape", "Size") and needed.intersection(outs)):
            needed.update(i for i in node.input if i in maybe)
    return needed


def _infer(
    model: onnx.ModelProto,
    consts: Mapping[str, TensorProto],
    typed: list[onnx.ValueInfoProto],
) -> dict[str, onnx.TypeProto]:
    """Types of every tensor by whole-model inference on a copy without the large weights
    (inference needs only their types; serialising 300 MB of inline weights would dominate
    the import)."""
    graph = model.graph
    inputs = [vi for vi in graph.input if vi.name not in consts]
    listed = {vi.name for vi in inputs}
    proto = onnx.ModelProto()
    proto.ir_version = model.ir_version
    proto.opset_import.extend(model.opset_import)
    proto.functions.extend(model.functions)
    proto.graph.CopyFrom(
        helper.make_graph(
            graph.node,
            graph.name or "g",
            inputs + [vi for vi in typed if vi.name not in listed],
            graph.output,
            initializer=list(consts.values()),
            value_info=graph.value_info,
        )
    )
    inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True).graph
    types = {vi.name: vi.type for vi in [*inferred.input, *inferred.value_info, *inferred.output]}
    for init in graph.initializer:
        types[init.name] = helper.make_tensor_type_proto(init.data_type, init.dims)
    return types


def _infer_node(
    model: onnx.ModelProto,
    node: onnx.NodeProto,
    types: Mapping[str, onnx.TypeProto],
    values: Mapping[str, np.ndarray],
) -> dict[str, onnx.TypeProto]:
    """Output types of one node from its input types and constant input data ({} if its
    inputs are not all typed or onnx has no inference for it)."""
    ins = [i for i in node.input if i]
    if not all(i in types for i in ins):
        return {}
    version = next((o.version for o in model.opset_import if o.domain == node.domain), None)
    try:
        schema = onnx.defs.get_schema(node.op_type, version or 1, node.domain)
        return onnx.shape_inference.infer_node_outputs(
            schema,
            node,
            {i: types[i] for i in ins},
            {i: numpy_helper.from_array(values[i], i) for i in ins if i in values},
            opset_imports=list(model.opset_import),
            ir_version=model.ir_version,
        )
    except Exception:  # no schema (custom op), or inference rejects the node: leave it
        return {}


def evaluate_node(
    node: onnx.NodeProto,
    values: Mapping[str, np.ndarray],
    shapes: Mapping[str, Dims | None],
    opsets: Mapping[str, int],
) -> dict[str, np.ndarray] | None:
    """The outputs of ``node`` by name if they are constants, else None."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ):
        return None
    if node.op_type in ("Shape", "Size"):
        dims = shapes.get(node.input[0])
        if dims is None:
            return None
        if node.op_type == "Size":
            return {node.output[0]: np.array(math.prod(dims), np.int64)}
        attrs = {a.name: a.i for a in node.attribute}
        window = dims[attrs.get("start", 0) : attrs.get("end", len(dims))]
        return {node.output[0]: np.array(window, np.int64)}
    ins = [i for i in node.input if i]
    if not all(i in values for i in ins):
        return None
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    if node.op_type == "Constant" and value is not None:  # the common case, without the evaluator
        return {node.output[0]: numpy_helper.to_array(value)}
    try:
        outs = ReferenceEvaluator(node, opsets=dict(opsets)).run(None, {i: values[i] for i in ins})
    except Exception:  # an op the reference evaluator lacks or rejects: leave it unfolded
        return None
    arrays = {name: np.asarray(o) for name, o in zip(node.output, outs, strict=False) if name}
    # shape data is numeric; a string or object tensor has no ONNX type to infer with
    return arrays if all(a.dtype.kind in "biuf" for a in arrays.values()) else None


# ------------------------------------------------------------------ rewritten ops
REWRITE_UNARY = frozenset(
    {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Erf"}
)


def output_shapes(
    node: ModelNode,
    shape: Callable[[str], Dims],
    value: Callable[[str], tuple[int, ...] | None],
) -> list[Dims]:
    """The shape of each output of ``node``, one of the ops rewrite rules emit, without
    re-running onnx's inference on every candidate graph (a search makes thousands);
    ``shape`` and ``value`` read its inputs. Another op is a rule bug, reported as such."""
    op = node.op.rpartition(".")[2]
    ins = [shape(t) if t else () for t in node.inputs]
    if op in REWRITE_UNARY:
        return [ins[0]]
    if op in ("Conv", "FusedConv"):
        return [conv_shape(node, ins[0], ins[1])]
    if op in ("Gemm", "FusedGemm"):
        rows = ins[0][1] if node.attr("transA", 0) else ins[0][0]
        cols = ins[1][0] if node.attr("transB", 0) else ins[1][1]
        return [(rows, cols)]
    if op == "MatMul":
        a, b = ins
        batch = broadcast(a[:-2], b[:-2]) if len(a) > 2 or len(b) > 2 else ()
        return [(*batch, a[-2], b[-1])]
    if op == "Concat":
        axis = _axis(node.attr("axis"), len(ins[0]))
        out = list(ins[0])
        out[axis] = sum(s[axis] for s in ins)
        return [tuple(out)]
    if op == "Split":
        axis = _axis(node.attr("axis", 0), len(ins[0]))
        sizes = value(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        if sizes is None:
            n = len(node.outputs)
            sizes = (ins[0][axis] // n,) * n
        return [(*ins[0][:axis], s, *ins[0][axis + 1 :]) for s in sizes]
    raise ValueError(f"no shape rule for {node.op}")  # a rule emitted an op this file lacks


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def broadcast(a: Dims, b: Dims) -> Dims:
    """Numpy broadcasting of two shapes."""
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def conv_shape(node: ModelNode, x: Dims, w: Dims) -> Dims:
    """ONNX Conv output dims (explicit pads; auto_pad is resolved at import)."""
    spatial = len(x) - 2
    kernel = w[2:]
    strides = node.attr("strides") or (1,) * spatial
    dilations = node.attr("dilations") or (1,) * spatial
    pads = node.attr("pads") or (0,) * (2 * spatial)
    out = [x[0], w[0]]
    for i in range(spatial):
        span = dilations[i] * (kernel[i] - 1) + 1
        out.append((x[2 + i] + pads[i] + pads[i + spatial] - span) // strides[i] + 1)
    return tuple(out)


# ------------------------------------------------------------------------ row axes
def row_axes(
    nodes: Sequence[ModelNode],
    shapes: Mapping[str, Dims | None],
    constants: Collection[str],
    graph_inputs: list[str],
    values: Mapping[str, np.ndarray],
) -> dict[str, int]:
    """The row axis of every activation tensor of rank >= 2, by ONNX name.

    1. *Spatial* tensors: those read or written by a spatial op, and every same-rank tensor
       joined to one through ops that keep axes (elementwise, activations, Concat, Slice,
       Pad, ...). Their row axis is 2, as the op's definition says.
    2. Every other tensor, in graph order: carried from its producer's input (a Transpose
       moves it with its permutation, a view maps it by element strides, a MatMul or Gemm
       keeps its activation's non-contracted row axis, a Gather drops or shifts it, any
       axis-keeping op keeps it); where nothing carries it, the default of
       :func:`default_row_axis`.

    ``constants`` are the names that are weights or shape data, not activations; ``values``
    holds small constant arrays (Reduce axes given as an input).
    """
    active = [n for n in nodes if not all(o in constants for o in n.outputs if o)]

    def acts(names) -> list[str]:
        return [t for t in names if t and t not in constants and shapes.get(t) is not None]

    def rank(t: str) -> int:
        return len(shapes[t])

    spatial = _spatial_tensors(active, acts, rank)
    rows: dict[str, int] = {}
    for t in graph_inputs:
        if shapes.get(t) is not None and rank(t) >= 2:
            rows[t] = 2 if t in spatial else default_row_axis(shapes[t])
    for node in active:
        ins = acts(node.inputs)
        for out in acts(node.outputs):
            if rank(out) < 2:
                continue
            if out in spatial:
                rows[out] = 2
                continue
            carried = _carry(node, ins, out, rows, shapes, values)
            rows[out] = default_row_axis(shapes[out]) if carried is None else carried
    return rows


def _spatial_tensors(active, acts, rank) -> set[str]:
    """Tensors in a layout-preserving component that touches a spatial op (rank >= 3)."""
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        parent.setdefault(t, t)
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    seeds: list[str] = []
    for node in active:
        touched = [t for t in acts(node.inputs) + acts(node.outputs) if rank(t) >= 3]
        if node.op_type in SPATIAL_OPS:
            seeds.extend(touched)
        elif node.op_type not in AXIS_MOVING_OPS and len({rank(t) for t in touched}) == 1:
            for t in touched[1:]:
                parent[find(t)] = find(touched[0])
    roots = {find(t) for t in seeds}
    return {t for t in parent if find(t) in roots} | set(seeds)


def default_row_axis(dims: Dims) -> int:
    """Row axis of a tensor nothing else decides: axis 2 from rank 4 up (N, C, H, W...); for
    rank 2 and 3 (tokens, features last) the first axis of size > 1 before the last (the
    batch is 1, so (1, T, D) and (T, 1, D) both give T), else the second to last."""
    if len(dims) >= 4:
        return 2
    return next((a for a, d in enumerate(dims[:-1]) if d > 1), len(dims) - 2)


def _carry(node, ins, out, rows, shapes, values) -> int | None:
    """The row axis of ``out`` carried from ``node``'s activation inputs, or None."""
    op = node.op_type
    first = next((t for t in ins if t in rows), None)
    if first is None:
        return None
    r, src, dst = rows[first], shapes[first], shapes[out]
    attrs = dict(node.attrs)
    if op == "Transpose":
        perm = list(attrs.get("perm", range(len(src) - 1, -1, -1)))
        return perm.index(r)
    if op in RESHAPE_OPS:
        return _view_row_axis(src, r, dst)
    if op == "MatMul":
        if node.inputs[0] == first:  # A (..., M, K): M and batch axes survive
            return r + len(dst) - len(src) if r < len(src) - 1 else None
        if r == len(src) - 1:  # B (..., K, N) with rows along N
            return len(dst) - 1
        return r + len(dst) - len(src) if r < len(src) - 2 else None
    if op == "Gemm":
        if node.inputs[0] != first:
            return None
        return 0 if r == (1 if attrs.get("transA", 0) else 0) else None
    if op == "Gather":
        if node.inputs[0] != first:
            return None
        axis = attrs.get("axis", 0) % len(src)
        if r == axis:
            return None
        indices = shapes.get(node.inputs[1])
        return r if r < axis else r - 1 + len(indices or ())
    if op in AXIS_MOVING_OPS:
        return None
    if len(dst) == len(src):
        return r
    if len(dst) > len(src):  # broadcasting (Expand, Add of a lower-rank input)
        return r + len(dst) - len(src)
    axes = _reduced_axes(node, attrs, len(src), values)
    if axes is None or r in axes:
        return None
    return r - sum(a < r for a in axes)


def _reduced_axes(node, attrs, rank: int, values) -> set[int] | None:
    """Axes a rank-dropping reduction (keepdims=0) removes, None if unknown."""
    if "axes" in attrs:
        axes = list(attrs["axes"])
    elif "axis" in attrs:
        axes = [attrs["axis"]]
    elif len(node.inputs) > 1 and node.inputs[1] in values:
        axes = [int(a) for a in np.asarray(values[node.inputs[1]]).reshape(-1)]
    else:
        return None
    return {a % rank for a in axes}


def _view_row_axis(src: Dims, r: int, dst: Dims) -> int | None:
    """Where a view (same elements, new dims) puts the row axis ``r`` of ``src``: the
    ``dst`` axis holding the row axis's outermost index. None if ``src`` has a single row."""
    if src[r] == 1:
        return None
    before = math.prod(src[:r])
    size = 1
    for axis, d in enumerate(dst):
        size *= d
        if size > before:
            return axis
    return None


def chw(dims: Dims, row: int | None) -> tuple[int, int, int]:
    """Normalise batch-1 ``dims`` to (C, H, W), H being the extent of the row axis ``row``.

    * Rank 0 and 1 (or no row axis): one row, ``(size, 1, 1)``.
    * Row axis last: C = every axis before it, W = 1 ((N, C, L) -> (C, L, 1)).
    * Row axis first, or second after a batch of 1 (tokens (1, T, D) or (T, 1, D),
      channels-last (1, H, W, C)): C = the last axis (the features), W = the axes between.
    * Otherwise: C = the axes before the row axis, W = the axes after it ((N, C, H, W) ->
      (C, H, W); attention's (N, heads, T, d) -> (heads, T, d)).
    """
    if len(dims) <= 1 or row is None:
        return (math.prod(dims), 1, 1)
    if row == len(dims) - 1:
        return (math.prod(dims[:row]), dims[row], 1)
    if row == 0 or (row == 1 and dims[0] == 1):
        return (dims[-1], dims[row], math.prod(dims[row + 1 : -1]))
    return (math.prod(dims[:row]), dims[row], math.prod(dims[row + 1 :]))
