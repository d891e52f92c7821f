"""Model IR -> :class:`OpGraph`: the planner's view of a model.

What lowering does, in order: drop constant and shape subgraphs the importer could not fold,
remove view ops (reconnecting their edges), fold BatchNormalization into a preceding Conv,
find every tensor's row axis, and turn every remaining op into a :class:`Node` with its
(C, H, W) tensors. Unknown ops are kept as ``other`` nodes with their tensor sizes unless
``strict_ops`` is set, with one :class:`FusionPlanWarning` per unknown op type.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from fusionplan.ir.errors import FusionPlanWarning, GraphError, ModelError
from fusionplan.ir.graph import Node, OpGraph, Tensor
from fusionplan.ir.model import ModelGraph, ModelNode
from fusionplan.ir.shapes import Dims, chw, row_axes

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


def lower(model: ModelGraph, *, name: str = "model", strict_ops: bool = False) -> OpGraph:
    """The planner's op graph of ``model`` (see the module docstring)."""
    return Lowering(model, name, strict_ops).run()


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


@dataclass
class Lowering:
    """One lowering of a model graph; the numeric replay reads its row axes, view aliases
    and constants after :meth:`run`."""

    model: ModelGraph
    name: str
    strict_ops: bool
    shapes: dict[str, Dims] = field(default_factory=dict)  # static dims by tensor name
    alias: dict[str, str] = field(default_factory=dict)
    const_elems: dict[str, int] = field(default_factory=dict)
    const_values: dict[str, np.ndarray] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # row axis per activation tensor
    bias_added: set[str] = field(default_factory=set)  # convs a folded BN gives a bias

    def run(self) -> OpGraph:
        g = self.model
        self.shapes = {t: info.shape for t, info in g.tensors.items()}
        for wname, weight in g.weights.items():
            self.shapes[wname] = weight.shape
            self.const_elems[wname] = math.prod(weight.shape)
            if math.prod(weight.shape) <= 64:
                self.const_values[wname] = weight.array

        compute = []
        for node in g.nodes.values():
            if self._absorb_constant(node) or self._absorb_view(node):
                continue
            compute.append(node)
        nodes = list(g.nodes.values())
        self.rows = row_axes(
            nodes, self.shapes, self.const_elems, list(g.inputs), self.const_values
        )
        compute = self._fold_batchnorm(compute)
        if not compute:
            raise GraphError(f"model '{self.name}' has no compute ops")
        return self._build(compute)

    # -- constant and view handling ---------------------------------------------------
    def resolve(self, tensor: str) -> str:
        """The tensor ``tensor`` reads as the op graph sees it (a removed view's source)."""
        while tensor in self.alias:
            tensor = self.alias[tensor]
        return tensor

    def _is_const(self, tensor: str) -> bool:
        return self.resolve(tensor) in self.const_elems

    def _absorb_constant(self, node: ModelNode) -> bool:
        """Record outputs of constant and shape subgraphs the importer left (ops it could
        not evaluate); True if ``node`` is one of them."""
        ins = [t for t in node.inputs if t]
        if node.op_type in SHAPE_OPS or all(self._is_const(t) for t in ins):
            for out in node.outputs:
                dims = self.shapes.get(out)
                self.const_elems[out] = math.prod(dims) if dims is not None else 0
            return True
        return False

    def _absorb_view(self, node: ModelNode) -> bool:
        if node.op_type not in VIEW_OPS:
            return False
        self.alias[node.outputs[0]] = self.resolve(node.inputs[0])
        return True

    def _fold_batchnorm(self, nodes: list[ModelNode]) -> list[ModelNode]:
        """Drop a BatchNormalization that directly follows a Conv whose output feeds only it."""
        producer = {self.resolve(o): n for n in nodes for o in n.outputs}
        readers: dict[str, int] = {}
        for n in nodes:
            for t in n.inputs:
                if t and not self._is_const(t):
                    readers[self.resolve(t)] = readers.get(self.resolve(t), 0) + 1
        outputs = {self.resolve(o) for o in self.model.outputs}
        kept = []
        for n in nodes:
            src = self.resolve(n.inputs[0]) if n.inputs else ""
            conv = producer.get(src)
            if (
                n.op_type == "BatchNormalization"
                and conv is not None
                and conv.op_type in CONV_OPS
                and readers.get(src) == 1
                and src not in outputs
            ):
                self.alias[n.outputs[0]] = src
                if len(conv.inputs) < 3 or not conv.inputs[2]:
                    self.bias_added.add(conv.name)
                continue
            kept.append(n)
        return kept

    # -- node construction ------------------------------------------------------------
    def _build(self, compute: list[ModelNode]) -> OpGraph:
        tensor_ids: dict[str, int] = {}
        tensors: list[Tensor] = []
        made_by = {o: n for n in compute for o in n.outputs if o}

        def tensor_id(tname: str) -> int:
            if tname not in tensor_ids:
                dims = self.shapes.get(tname)
                if dims is None or 0 in dims:
                    raise self._unknown_shape(tname, made_by.get(tname))
                tensor_ids[tname] = len(tensors)
                tensors.append(Tensor(tname, chw(dims, self.rows.get(tname)), -1))
            return tensor_ids[tname]

        graph_inputs = [tensor_id(t) for t in self.model.inputs]
        used = {self.resolve(t) for n in compute for t in n.inputs if t}
        used |= {self.resolve(o) for o in self.model.outputs}
        nodes = []
        for n in compute:
            if n.op_type not in KNOWN_OPS and self.strict_ops:
                raise ModelError(f"unsupported op '{n.op_type}' (node '{n.name}')")
            act_in, weights = [], 0
            for pos, t in enumerate(n.inputs):
                if not t:
                    continue
                if self._is_const(t):
                    if pos == 0 or n.op_type not in PARAM_INPUT_OPS:
                        weights += self.const_elems[self.resolve(t)]
                    continue
                tid = tensor_id(self.resolve(t))
                if tid not in act_in:
                    act_in.append(tid)
            outs = tuple(tensor_id(o) for o in n.outputs if o and o in used)
            if not outs:
                outs = tuple(tensor_id(o) for o in n.outputs[:1])
            if n.name in self.bias_added:
                weights += tensors[outs[0]].shape[0]
            nodes.append(self._make_node(n, tuple(act_in), outs, weights, tensors))
        _warn_unmodelled(Counter(n.op_type for n in compute if n.op_type not in KNOWN_OPS))

        graph_outputs = []
        for o in self.model.outputs:
            src = self.resolve(o)
            if src in tensor_ids and tensor_ids[src] not in graph_outputs:
                graph_outputs.append(tensor_ids[src])
        return OpGraph.build(self.name, nodes, tensors, graph_inputs, graph_outputs)

    def _unknown_shape(self, tname: str, maker: ModelNode | None) -> ModelError:
        """A tensor without a static shape although every graph input is static (the
        importer refuses symbolic inputs): say what the user can do about it."""
        where = f" (output of {maker.op_type} node '{maker.name}')" if maker is not None else ""
        return ModelError(
            f"tensor '{tname}'{where} has a dynamic or unknown shape although every graph "
            "input is static: neither shape inference nor constant folding could resolve it; "
            "declare its shape in the model's value_info, or report the model"
        )

    def _make_node(self, n: ModelNode, inputs, outputs, weights, tensors) -> Node:
        attrs = dict(n.attrs)
        op = n.op_type
        in_shapes = [tensors[t].shape for t in inputs]
        out_c = tensors[outputs[0]].shape[0]
        out_elems = sum(tensors[t].size for t in outputs)
        common = dict(name=n.name, op_type=op, inputs=inputs, outputs=outputs, weights=weights)

        def ints(key: str, default: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(attrs[key]) if key in attrs else default

        if op in CONV_OPS or op in POOL_OPS:
            kernel = ints("kernel_shape", ())
            if not kernel and op in CONV_OPS:
                w = self.shapes.get(self.resolve(n.inputs[1]))
                kernel = tuple(w[2:]) if w else (1, 1)
            kernel = (*kernel, 1, 1)[:2]
            stride = (*ints("strides", (1, 1)), 1, 1)[:2]
            pads = ints("pads", (0, 0, 0, 0))
            # ONNX orders pads as (x1_begin, x2_begin, x1_end, x2_end); 1-D ops pad rows only.
            pads4 = pads[:4] if len(pads) >= 4 else (pads[0], 0, pads[-1], 0)
            groups = attrs.get("group", 1)
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
            first = attrs.get("axis", -1)
            over_rows = self._row_axis_in(n.inputs[0], first, None)
            return Node(kind="act", macs=out_elems, whole_input=over_rows, **common)
        if op in ACT_OPS or op in REDUCE_OPS:
            return Node(kind="act", macs=out_elems, **common)
        if op == "Resize" or op == "Upsample":
            mode = attrs.get("mode", "nearest")
            window = 2 if mode in ("linear", "bilinear", "cubic") else 1
            return Node(kind="resize", kernel=(window, window), macs=out_elems, **common)
        if op in ("Softmax", "LogSoftmax"):
            # opset 13 normalises along `axis` (default -1); earlier opsets over every axis
            # from `axis` (default 1) on
            legacy = self.opset() < 13
            axis = attrs.get("axis", 1 if legacy else -1)
            over_rows = self._row_axis_in(n.inputs[0], axis, None if legacy else axis)
            return Node(kind="softmax", macs=out_elems, whole_input=over_rows, **common)
        return Node(kind=SIMPLE_KINDS.get(op, "other"), macs=0, **common)

    def opset(self) -> int:
        """The model's default-domain opset."""
        opsets = self.model.opsets
        return opsets.get("", opsets.get("ai.onnx", 1))

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
        a = n.inputs[0]
        if self._is_const(a) or len(n.inputs) < 2 or not self._is_const(n.inputs[1]):
            return False
        dims, row = self.shapes.get(a), self.rows.get(a)
        if not dims or row is None or len(dims) < 2:
            return False
        gemm_axis = 0 if attrs.get("transA", 0) else 1
        contracted = gemm_axis if n.op_type == "Gemm" else len(dims) - 1
        source = self.resolve(a)
        streamed = chw(self.shapes[source], self.rows.get(source))[1]
        return row != contracted and dims[row] > 1 and dims[row] == streamed

    def _contracted_length(self, n, attrs, in_shapes) -> int:
        """K of a MatMul/Gemm: the length of the contracted axis as the op sees its operands
        (after any removed Flatten/Reshape), MACs being output elements times K."""
        a, b = (n.inputs[0], n.inputs[1]) if len(n.inputs) > 1 else (n.inputs[0], "")
        trans_a = attrs.get("transA", 0)
        trans_b = attrs.get("transB", 0)
        if not self._is_const(a) and self.shapes.get(a):
            dims = self.shapes[a]
            return dims[(0 if trans_a else 1) if n.op_type == "Gemm" else -1]
        if b and not self._is_const(b) and self.shapes.get(b):
            dims = self.shapes[b]
            return dims[(1 if trans_b else 0) if n.op_type == "Gemm" else max(len(dims) - 2, 0)]
        return math.prod(in_shapes[0]) if in_shapes else 0

    def _reduces_rows(self, n, attrs) -> bool:
        """True if a Reduce* op reduces over its input's row axis (or over unknown axes)."""
        if "axes" in attrs:
            axes = list(attrs["axes"])
        elif len(n.inputs) > 1 and n.inputs[1]:
            value = self.const_values.get(self.resolve(n.inputs[1]))
            if value is None:
                return True  # unknown axes: assume the worst for buffering
            axes = [int(a) for a in value.reshape(-1)]
        else:
            return True  # default: reduce over all axes
        return any(self._row_axis_in(n.inputs[0], a, a) for a in axes)
