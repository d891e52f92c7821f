"""ONNX -> :class:`OpGraph`.

What the importer does, in order: load (weights stay on disk when stored externally), check
the graph is a DAG, validate with ``onnx.checker``, infer static shapes (folding the shapes a
model computes inside the graph, :mod:`fusionplan.ir.shapes`), drop constant and shape
subgraphs, remove view ops (reconnecting their edges), fold BatchNormalization into a
preceding Conv, find every tensor's row axis, and turn every remaining op into a
:class:`Node`. Unknown ops are kept as ``other`` nodes with their tensor sizes unless
``strict_ops`` is set, with one :class:`FusionPlanWarning` per unknown op type.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import numpy_helper

from fusionplan.ir.errors import ConfigError, FusionPlanWarning, GraphError, ModelError
from fusionplan.ir.graph import Node, OpGraph, Tensor, _topological_order
from fusionplan.ir.shapes import Dims, chw, resolve_shapes, row_axes

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
    "Gather": "other",
}
# Ops whose constant inputs after the first are settings (sizes, bounds, axes, scales), not
# weights: they are not counted in ``Node.weights``.
PARAM_INPUT_OPS = (
    frozenset({"Clip", "Pad", "Resize", "Upsample", "Slice", "Split", "Gather", "Expand", "Tile"})
    | REDUCE_OPS
)
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
        _check_batch_one(input_shapes)
        fix_input_shapes(model, input_shapes)
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
        shapes = resolve_shapes(model)
    except Exception as exc:
        raise ModelError(f"shape inference failed: {str(exc).splitlines()[0]}") from None
    return _Importer(model, name, strict_ops, shapes).run()


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


def _check_batch_one(input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Refuse a fixed input shape with a batch other than 1: the op graph is one inference
    (:func:`chw` folds leading axes into the channels), so a batch of 2 would be planned as
    one image with twice the channels, not as two images. The batch is the first axis, or
    the second in the sequence-first token layout (T, 1, D)."""
    for name, dims in input_shapes.items():
        dims = tuple(int(d) for d in dims)
        sequence_first = len(dims) == 3 and dims[1] == 1
        if len(dims) >= 2 and dims[0] != 1 and not sequence_first:
            shape = "x".join(map(str, dims))
            fixed = "x".join(map(str, (1, *dims[1:])))
            raise ConfigError(
                f"input shape {name}={shape} has batch {dims[0]}, but the planner plans batch 1 "
                f"(one inference; a batch would be folded into the channels): use {name}={fixed}"
            )


def fix_input_shapes(model, input_shapes: Mapping[str, Sequence[int]]) -> None:
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


def symbolic_input_hint(value_info) -> tuple[str, str]:
    """A graph input's dimensions as declared (``N, 3, 224, 224``) and a static shape to
    suggest for it (``1x3x224x224``: batch 1, other symbols as ``<T>`` placeholders), for
    the errors that ask for ``--input-shape``."""
    dims = value_info.type.tensor_type.shape.dim
    shown = [str(d.dim_value) if d.HasField("dim_value") else d.dim_param for d in dims]
    example = "x".join(
        s if s.isdigit() else "1" if axis == 0 else f"<{s or '?'}>" for axis, s in enumerate(shown)
    )
    return ", ".join(s or "?" for s in shown), example or "1x3x224x224"


def _warn_unmodelled(op_types: Counter[str]) -> None:
    """One warning per op type the importer does not know: such an op is costed by a guess
    (a row-by-row op on its tensor sizes, no compute), which used to shape a plan silently."""
    for op, count in sorted(op_types.items()):
        nodes = f"{count} node{'s' if count > 1 else ''}"
        warnings.warn(
            f"op type {op!r} ({nodes}) is not modelled: costed as a generic op (input + output "
            "traffic row by row, constant inputs as weights); --strict-ops refuses it",
            FusionPlanWarning,
            stacklevel=2,
        )


def _check_acyclic(graph) -> None:
    """ONNX requires topological order, but we report a cycle in words, not a checker dump."""
    producer = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    preds = [[producer[t] for t in node.input if t in producer] for node in graph.node]
    if _topological_order(len(graph.node), preds) is None:
        raise GraphError("the graph has a cycle; a fusion plan needs a DAG")


@dataclass
class _Importer:
    model: onnx.ModelProto
    name: str
    strict_ops: bool
    shapes: dict[str, Dims | None]  # every tensor's static dims (resolve_shapes)
    alias: dict[str, str] = field(default_factory=dict)
    const_elems: dict[str, int] = field(default_factory=dict)
    const_values: dict[str, object] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # row axis per activation tensor

    def run(self) -> OpGraph:
        g = self.model.graph
        for init in g.initializer:
            self.const_elems[init.name] = math.prod(init.dims)
            if math.prod(init.dims) <= 64 and not init.external_data:
                self.const_values[init.name] = numpy_helper.to_array(init)

        compute = []
        for node in g.node:
            if self._absorb_constant(node) or self._absorb_view(node):
                continue
            compute.append(node)
        inputs = [vi.name for vi in g.input]
        self.rows = row_axes(list(g.node), self.shapes, self.const_elems, inputs, self.const_values)
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

        names = dict(zip(map(id, g.node), onnx_node_names(g), strict=True))
        made_by = {o: n for n in compute for o in n.output if o}

        def tensor_id(tname: str) -> int:
            if tname not in tensor_ids:
                dims = self.shapes.get(tname)
                if dims is None or 0 in dims:
                    maker = made_by.get(tname)
                    raise self._unknown_shape(tname, maker, maker and names[id(maker)])
                tensor_ids[tname] = len(tensors)
                tensors.append(Tensor(tname, chw(dims, self.rows.get(tname)), -1))
            return tensor_ids[tname]

        graph_inputs = []
        for vi in g.input:
            if vi.name not in self.const_elems:
                graph_inputs.append(tensor_id(vi.name))

        used = {self._resolve(t) for n in compute for t in n.input if t}
        used |= {self._resolve(o.name) for o in g.output}
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
        _warn_unmodelled(Counter(n.op_type for n in compute if n.op_type not in KNOWN_OPS))

        graph_outputs = []
        for o in g.output:
            src = self._resolve(o.name)
            if src in tensor_ids and tensor_ids[src] not in graph_outputs:
                graph_outputs.append(tensor_ids[src])
        return OpGraph.build(self.name, nodes, tensors, graph_inputs, graph_outputs)

    def _unknown_shape(self, tname: str, maker, maker_name: str | None) -> ModelError:
        """Say what the user can do about a tensor without a static shape: fix a symbolic
        graph input (inputs are checked first, so any later tensor has static inputs), or
        declare a shape that neither inference nor constant folding could find."""
        inputs = {vi.name: vi for vi in self.model.graph.input}
        if tname in inputs:
            shown, example = symbolic_input_hint(inputs[tname])
            return ModelError(
                f"tensor '{tname}' has a dynamic or unknown shape: it is a graph input with "
                f"symbolic dimensions ({shown}); give it a static shape, e.g. --input-shape "
                f"{tname}={example} (API: input_shapes={{'{tname}': (...)}})"
            )
        where = f" (output of {maker.op_type} node '{maker_name}')" if maker is not None else ""
        return ModelError(
            f"tensor '{tname}'{where} has a dynamic or unknown shape although every graph "
            "input is static: neither shape inference nor constant folding could resolve it; "
            "declare its shape in the model's value_info, or report the model"
        )

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
            return Node(
                kind="matmul",
                macs=out_elems * self._contracted_length(n, attrs, in_shapes),
                whole_input=not self._row_local_linear(n, attrs),
                **common,
            )
        if op in GLOBAL_OPS or (op in REDUCE_OPS and self._reduces_rows(n, attrs)):
            macs = sum(math.prod(s) for s in in_shapes)
            return Node(kind="global_pool", macs=macs, whole_input=True, **common)
        if op in ELTWISE_OPS:
            return Node(kind="eltwise", macs=out_elems, **common)
        if op == "LayerNormalization":
            first = attrs["axis"].i if "axis" in attrs else -1
            over_rows = self._row_axis_in(n.input[0], first, None)
            return Node(kind="act", macs=out_elems, whole_input=over_rows, **common)
        if op in ACT_OPS or op in REDUCE_OPS:
            return Node(kind="act", macs=out_elems, **common)
        if op == "Resize" or op == "Upsample":
            mode = attrs["mode"].s.decode() if "mode" in attrs else "nearest"
            window = 2 if mode in ("linear", "bilinear", "cubic") else 1
            return Node(kind="resize", kernel=(window, window), macs=out_elems, **common)
        if op in ("Softmax", "LogSoftmax"):
            # opset 13 normalises along `axis` (default -1); earlier opsets over every axis
            # from `axis` (default 1) on
            legacy = self._opset() < 13
            axis = attrs["axis"].i if "axis" in attrs else 1 if legacy else -1
            over_rows = self._row_axis_in(n.input[0], axis, None if legacy else axis)
            return Node(kind="softmax", macs=out_elems, whole_input=over_rows, **common)
        return Node(kind=SIMPLE_KINDS.get(op, "other"), macs=0, **common)

    def _opset(self) -> int:
        return next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def _row_axis_in(self, tname: str, first: int, last: int | None) -> bool:
        """True if axes ``first..last`` (``last`` None: to the end; negative counts from the
        end) of the tensor ``tname``, as the op sees it, include its row axis."""
        dims, row = self.shapes.get(tname), self.rows.get(tname)
        if not dims or row is None:
            return False
        rank = len(dims)
        last = rank - 1 if last is None else last % rank
        return first % rank <= row <= last

    def _row_local_linear(self, n, attrs) -> bool:
        """A linear layer (activation times constant weight) whose contracted axis lies inside
        a row: each output row needs one input row (docs/cost-model.md, "Transformers").

        Not when the weight is not a constant (attention's Q.K^T and P.V need every row of
        their second operand), when the activation's row axis is the contracted one (a
        classifier over a flattened map), when the activation has a single row, or when the
        op sees other rows than the tensor the cost model streams (a view that splits or
        merges rows)."""
        a = n.input[0]
        if self._is_const(a) or len(n.input) < 2 or not self._is_const(n.input[1]):
            return False
        dims, row = self.shapes.get(a), self.rows.get(a)
        if not dims or row is None or len(dims) < 2:
            return False
        if n.op_type == "Gemm":
            contracted = 0 if "transA" in attrs and attrs["transA"].i else 1
        else:
            contracted = len(dims) - 1
        source = self._resolve(a)
        streamed = chw(self.shapes[source], self.rows.get(source))[1]
        return row != contracted and dims[row] > 1 and dims[row] == streamed

    def _contracted_length(self, n, attrs, in_shapes) -> int:
        """K of a MatMul/Gemm: the length of the contracted axis as the op sees its operands
        (after any removed Flatten/Reshape), MACs being output elements times K."""
        a, b = (n.input[0], n.input[1]) if len(n.input) > 1 else (n.input[0], "")
        trans_a = "transA" in attrs and attrs["transA"].i
        trans_b = "transB" in attrs and attrs["transB"].i
        if not self._is_const(a) and self.shapes.get(a):
            dims = self.shapes[a]
            return dims[(0 if trans_a else 1) if n.op_type == "Gemm" else -1]
        if b and not self._is_const(b) and self.shapes.get(b):
            dims = self.shapes[b]
            return dims[(1 if trans_b else 0) if n.op_type == "Gemm" else max(len(dims) - 2, 0)]
        return math.prod(in_shapes[0]) if in_shapes else 0

    def _init_dims(self, tname: str) -> tuple[int, ...] | None:
        tname = self._resolve(tname)
        for init in self.model.graph.initializer:
            if init.name == tname:
                return tuple(init.dims)
        return None

    def _reduces_rows(self, n, attrs) -> bool:
        """True if a Reduce* op reduces over its input's row axis (or over unknown axes)."""
        if "axes" in attrs:
            axes = list(attrs["axes"].ints)
        elif len(n.input) > 1 and n.input[1]:
            value = self.const_values.get(self._resolve(n.input[1]))
            if value is None:
                return True  # unknown axes: assume the worst for buffering
            axes = [int(a) for a in value.reshape(-1)]
        else:
            return True  # default: reduce over all axes
        return any(self._row_axis_in(n.input[0], a, a) for a in axes)
