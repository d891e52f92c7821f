"""ONNX -> :class:`OpGraph`.

What the importer does, in order: load (weights stay on disk when stored externally), check
the graph is a DAG, validate with ``onnx.checker``, infer static shapes, drop constant and
shape subgraphs, remove view ops (reconnecting their edges), fold BatchNormalization into a
preceding Conv, and turn every remaining op into a :class:`Node`. Unknown ops are kept as
``other`` nodes with their tensor sizes unless ``strict_ops`` is set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import numpy_helper

from fusionplan.ir.errors import GraphError, ModelError
from fusionplan.ir.graph import Node, OpGraph, Tensor, _topological_order

VIEW_OPS = frozenset({"Identity", "Dropout", "Flatten", "Reshape", "Squeeze", "Unsqueeze"})
SHAPE_OPS = frozenset({"Shape", "Size"})  # outputs depend on static shapes only
CONV_OPS = frozenset({"Conv", "ConvTranspose"})
MATMUL_OPS = frozenset({"Gemm", "MatMul"})
POOL_OPS = frozenset({"MaxPool", "AveragePool", "LpPool"})
GLOBAL_OPS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
REDUCE_OPS = frozenset(
    {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceProd"}
)
ELTWISE_OPS = frozenset(
    {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Where", "PRelu"}
)
ACT_OPS = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "Clip",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Elu",
        "Selu",
        "Celu",
        "Softplus",
        "Softsign",
        "Gelu",
        "Erf",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Mish",
        "ThresholdedRelu",
        "BatchNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "LRN",
        "Cast",
    }
)
SIMPLE_KINDS = {
    "Concat": "concat",
    "Pad": "pad",
    "Resize": "resize",
    "Upsample": "resize",
    "Softmax": "softmax",
    "LogSoftmax": "softmax",
    "Split": "split",
    "Slice": "split",
    "Transpose": "other",
}
# Ops whose constant inputs after the first are settings (sizes, bounds, axes, scales), not
# weights: they are not counted in ``Node.weights``.
PARAM_INPUT_OPS = frozenset({"Clip", "Pad", "Resize", "Upsample", "Slice", "Split"}) | REDUCE_OPS
KNOWN_OPS = (
    CONV_OPS | MATMUL_OPS | POOL_OPS | GLOBAL_OPS | REDUCE_OPS | ELTWISE_OPS | ACT_OPS
) | frozenset(SIMPLE_KINDS)


def load_model(
    source: str | Path,
    *,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
) -> OpGraph:
    """Import an ONNX file as an :class:`OpGraph`.

    ``input_shapes`` fixes graph-input shapes (e.g. ``{"input": (1, 3, 224, 224)}``) for
    models exported with dynamic axes. ``strict_ops`` turns unknown ops into an error.
    """

    path = Path(source)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises several unrelated types
        raise ModelError(f"{path} is not an ONNX model ({type(exc).__name__})") from None
    if model.ir_version == 0 or len(model.graph.node) == 0:
        raise ModelError(f"{path} is not an ONNX model (no graph)")
    return graph_from_proto(
        model,
        name=name or path.stem,
        input_shapes=input_shapes,
        strict_ops=strict_ops,
        check_path=path,
    )


def graph_from_proto(
    model,
    *,
    name: str = "model",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
    check_path: Path | None = None,
) -> OpGraph:
    """Import an in-memory ``onnx.ModelProto`` (see :func:`load_model`)."""
    if input_shapes:
        _fix_input_shapes(model, input_shapes)
    _check_acyclic(model.graph)
    try:
        # Checking by path handles external weights and models over 2 GB.
        if check_path is not None and not input_shapes:
            onnx.checker.check_model(str(check_path))
        else:
            onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        # The checker's messages span lines (node dumps); keep them on one line.
        text = " ".join(str(exc).split()) or "invalid"
        raise ModelError(f"invalid ONNX model: {text[:300]}") from None
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:
        raise ModelError(f"shape inference failed: {str(exc).splitlines()[0]}") from None
    return _Importer(inferred, name, strict_ops).run()


# ---------------------------------------------------------------------------- helpers
def onnx_node_names(graph) -> list[str]:
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


def _fix_input_shapes(model, input_shapes: Mapping[str, Sequence[int]]) -> None:
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


def _check_acyclic(graph) -> None:
    """ONNX requires topological order, but we report a cycle in words, not a checker dump."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    preds = [[producer[t] for t in node.input if t in producer] for node in graph.node]
    if _topological_order(len(graph.node), preds) is None:
        raise GraphError("the graph has a cycle; a fusion plan needs a DAG")


def _static_dims(type_proto) -> tuple[int, ...] | None:
    tt = type_proto.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            return None
        dims.append(d.dim_value)
    return tuple(dims)


def _chw(dims: tuple[int, ...]) -> tuple[int, int, int]:
    """Normalise a batch-1 shape to (C, H, W): rows are axis 2, anything past axis 3 is W."""
    if len(dims) >= 4:
        return (dims[1], dims[2], math.prod(dims[3:]))
    if len(dims) == 3:
        return (dims[1], dims[2], 1)
    if len(dims) == 2:
        return (dims[1], 1, 1)
    if len(dims) == 1:
        return (dims[0], 1, 1)
    return (1, 1, 1)


@dataclass
class _Importer:
    model: object
    name: str
    strict_ops: bool
    alias: dict[str, str] = field(default_factory=dict)
    const_elems: dict[str, int] = field(default_factory=dict)
    const_values: dict[str, object] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...] | None] = field(default_factory=dict)

    def run(self) -> OpGraph:
        g = self.model.graph
        for init in g.initializer:
            self.const_elems[init.name] = math.prod(init.dims)
            if math.prod(init.dims) <= 64 and not init.external_data:
                self.const_values[init.name] = numpy_helper.to_array(init)
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            self.shapes[vi.name] = _static_dims(vi.type)

        compute = []
        for node in g.node:
            if self._absorb_constant(node) or self._absorb_view(node):
                continue
            compute.append(node)
        compute = self._fold_batchnorm(compute)
        if not compute:
            raise GraphError(f"model '{self.name}' has no compute ops")
        return self._build(compute)

    # -- constant and view handling ---------------------------------------------------
    def _resolve(self, tensor: str) -> str:
        while tensor in self.alias:
            tensor = self.alias[tensor]
        return tensor

    def _is_const(self, tensor: str) -> bool:
        return self._resolve(tensor) in self.const_elems

    def _absorb_constant(self, node) -> bool:
        """Record outputs of constant and shape subgraphs; True if ``node`` is one of them."""
        ins = [t for t in node.input if t]
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            out = node.output[0]
            if value is not None:
                self.const_elems[out] = math.prod(value.dims)
                if math.prod(value.dims) <= 64:
                    self.const_values[out] = numpy_helper.to_array(value)
            else:
                self.const_elems[out] = 1
            return True
        if node.op_type in SHAPE_OPS or all(self._is_const(t) for t in ins):
            for out in node.output:
                dims = self.shapes.get(out)
                self.const_elems[out] = math.prod(dims) if dims else 0
            return True
        return False

    def _absorb_view(self, node) -> bool:
        if node.op_type not in VIEW_OPS:
            return False
        self.alias[node.output[0]] = self._resolve(node.input[0])
        return True

    def _fold_batchnorm(self, nodes: list) -> list:
        """Drop a BatchNormalization that directly follows a Conv whose output feeds only it."""
        producer = {self._resolve(o): n for n in nodes for o in n.output}
        readers: dict[str, int] = {}
        for n in nodes:
            for t in n.input:
                if t and not self._is_const(t):
                    readers[self._resolve(t)] = readers.get(self._resolve(t), 0) + 1
        outputs = {self._resolve(o.name) for o in self.model.graph.output}
        kept, self.bias_added = [], set()
        for n in nodes:
            src = self._resolve(n.input[0]) if n.input else ""
            conv = producer.get(src)
            if (
                n.op_type == "BatchNormalization"
                and conv is not None
                and conv.op_type in CONV_OPS
                and readers.get(src) == 1
                and src not in outputs
            ):
                self.alias[n.output[0]] = src
                if len(conv.input) < 3 or not conv.input[2]:
                    self.bias_added.add(id(conv))
                continue
            kept.append(n)
        return kept

    # -- node construction ------------------------------------------------------------
    def _build(self, compute: list) -> OpGraph:
        g = self.model.graph
        tensor_ids: dict[str, int] = {}
        tensors: list[Tensor] = []

        made_by = {o: n for n in compute for o in n.output if o}

        def tensor_id(tname: str) -> int:
            if tname not in tensor_ids:
                dims = self.shapes.get(tname)
                if dims is None:
                    maker = made_by.get(tname)
                    where = (
                        f" (output of {maker.op_type} node '{maker.name}')"
                        if maker and maker.name
                        else f" (output of a {maker.op_type} node)"
                        if maker
                        else ""
                    )
                    raise ModelError(
                        f"tensor '{tname}'{where} has a dynamic or unknown shape; export the "
                        "model with static shapes or pass input shapes "
                        "(--input-shape NAME=1x3x224x224)"
                    )
                tensor_ids[tname] = len(tensors)
                tensors.append(Tensor(tname, _chw(dims), -1))
            return tensor_ids[tname]

        graph_inputs = []
        for vi in g.input:
            if vi.name not in self.const_elems:
                graph_inputs.append(tensor_id(vi.name))

        used = {self._resolve(t) for n in compute for t in n.input if t}
        used |= {self._resolve(o.name) for o in g.output}
        names = dict(zip(map(id, g.node), onnx_node_names(g), strict=True))
        nodes = []
        for n in compute:
            if n.op_type not in KNOWN_OPS and self.strict_ops:
                raise ModelError(f"unsupported op '{n.op_type}' (node '{names[id(n)]}')")
            act_in, weights = [], 0
            for pos, t in enumerate(n.input):
                if not t:
                    continue
                if self._is_const(t):
                    if pos == 0 or n.op_type not in PARAM_INPUT_OPS:
                        weights += self.const_elems[self._resolve(t)]
                    continue
                tid = tensor_id(self._resolve(t))
                if tid not in act_in:
                    act_in.append(tid)
            outs = tuple(tensor_id(o) for o in n.output if o and o in used)
            if not outs:
                outs = tuple(tensor_id(o) for o in n.output[:1])
            if id(n) in self.bias_added:
                weights += tensors[outs[0]].shape[0]
            nodes.append(self._make_node(n, names[id(n)], tuple(act_in), outs, weights, tensors))

        graph_outputs = []
        for o in g.output:
            src = self._resolve(o.name)
            if src in tensor_ids and tensor_ids[src] not in graph_outputs:
                graph_outputs.append(tensor_ids[src])
        return OpGraph.build(self.name, nodes, tensors, graph_inputs, graph_outputs)

    def _make_node(self, n, name, inputs, outputs, weights, tensors) -> Node:
        attrs = {a.name: a for a in n.attribute}
        op = n.op_type
        in_shapes = [tensors[t].shape for t in inputs]
        out_c = tensors[outputs[0]].shape[0]
        out_elems = sum(tensors[t].size for t in outputs)
        common = dict(name=name, op_type=op, inputs=inputs, outputs=outputs, weights=weights)

        def ints(key: str, default: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(attrs[key].ints) if key in attrs else default

        if op in CONV_OPS or op in POOL_OPS:
            kernel = ints("kernel_shape", ())
            if not kernel and op in CONV_OPS:
                w = self.shapes.get(self._resolve(n.input[1])) or self._init_dims(n.input[1])
                kernel = tuple(w[2:]) if w else (1, 1)
            kernel = (*kernel, 1, 1)[:2]
            stride = (*ints("strides", (1, 1)), 1, 1)[:2]
            pads = ints("pads", (0, 0, 0, 0))
            # ONNX orders pads as (x1_begin, x2_begin, x1_end, x2_end); 1-D ops pad rows only.
            pads4 = pads[:4] if len(pads) >= 4 else (pads[0], 0, pads[-1], 0)
            groups = attrs["group"].i if "group" in attrs else 1
            dilation = (*ints("dilations", (1, 1)), 1, 1)[:2]
            kk = kernel[0] * kernel[1]
            if op == "Conv":
                cin = in_shapes[0][0] if in_shapes else 0
                macs = out_elems * (cin // max(groups, 1)) * kk
            elif op == "ConvTranspose":
                in_elems = math.prod(in_shapes[0]) if in_shapes else 0
                macs = in_elems * (out_c // max(groups, 1)) * kk
            else:
                macs = out_elems * kk
            kind = "conv" if op in CONV_OPS else "pool"
            return Node(
                kind=kind,
                kernel=kernel,
                stride=stride,
                pads=pads4,
                groups=groups,
                dilation=dilation,
                macs=macs,
                **common,
            )
        if op in MATMUL_OPS:
            k = in_shapes[0][0] * in_shapes[0][1] * in_shapes[0][2] if in_shapes else 0
            if op == "MatMul" and in_shapes:
                # The shape the MatMul itself sees (after any removed Flatten/Reshape).
                first = next((t for t in n.input if t and not self._is_const(t)), "")
                dims = self.shapes.get(first) or self.shapes.get(tensors[inputs[0]].name) or ()
                k = dims[-1] if dims else k
            return Node(kind="matmul", macs=out_elems * k, whole_input=True, **common)
        if op in GLOBAL_OPS or (op in REDUCE_OPS and self._reduces_rows(n, attrs)):
            macs = sum(math.prod(s) for s in in_shapes)
            return Node(kind="global_pool", macs=macs, whole_input=True, **common)
        if op in ELTWISE_OPS:
            return Node(kind="eltwise", macs=out_elems, **common)
        if op in ACT_OPS or op in REDUCE_OPS:
            return Node(kind="act", macs=out_elems, **common)
        if op == "Resize" or op == "Upsample":
            mode = attrs["mode"].s.decode() if "mode" in attrs else "nearest"
            window = 2 if mode in ("linear", "bilinear", "cubic") else 1
            return Node(kind="resize", kernel=(window, window), macs=out_elems, **common)
        if op in ("Softmax", "LogSoftmax"):
            rank = len(self.shapes.get(tensors[inputs[0]].name) or ()) if inputs else 0
            axis = attrs["axis"].i if "axis" in attrs else -1
            axis = axis + rank if axis < 0 else axis
            spatial = rank >= 3 and axis >= 2
            return Node(kind="softmax", macs=out_elems, whole_input=spatial, **common)
        return Node(kind=SIMPLE_KINDS.get(op, "other"), macs=0, **common)

    def _init_dims(self, tname: str) -> tuple[int, ...] | None:
        tname = self._resolve(tname)
        for init in self.model.graph.initializer:
            if init.name == tname:
                return tuple(init.dims)
        return None

    def _reduces_rows(self, n, attrs) -> bool:
        """True if a Reduce* op reduces over the row axis (axis 2 of a rank-4 tensor)."""
        if "axes" in attrs:
            axes = list(attrs["axes"].ints)
        elif len(n.input) > 1 and n.input[1]:
            value = self.const_values.get(self._resolve(n.input[1]))
            if value is None:
                return True  # unknown axes: assume the worst for buffering
            axes = [int(a) for a in value.reshape(-1)]
        else:
            return True  # default: reduce over all axes
        rank = len(self.shapes.get(self._resolve(n.input[0])) or (0, 0, 0, 0))
        return any((a + rank if a < 0 else a) >= 2 for a in axes)
