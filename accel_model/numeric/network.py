"""An ONNX model as the numeric replay sees it: the imported :class:`OpGraph`, every graph
tensor's ``(C, H, W)`` layout, the constants, and one evaluation per graph op.

The replay addresses tensors as the cost models do (docs/cost-model.md, "Units and scope"),
but computes each op by its ONNX definition, so this module undoes what the importer did
to the graph ("What the importer does to the graph"): an op reads a removed view's source
tensor and reshapes it to the view's dims, a conv with a folded BatchNormalization applies
it to its output, and constant subgraphs are evaluated once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from accel_model.numeric.kernels import run_onnx_op
from accel_model.numeric.layout import Layout
from fusionplan.ir.errors import ModelError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.lowering import PARAM_INPUT_OPS, Lowering
from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import from_onnx, node_proto
from fusionplan.ir.shapes import Dims

Chw = np.ndarray
"""A float64 array of one tensor in its ``(C, H, W)`` layout."""


@dataclass(frozen=True)
class NumericGraph:
    """``graph`` as the importer builds it from ``model``, with what evaluating it needs.

    ``layouts``: per graph tensor id. ``onnx_nodes``: per graph op, its ONNX node.
    ``folded``: per conv op, the BatchNormalization nodes folded into it. ``sources``: ONNX
    name -> the graph tensor name it reads (a removed view's source; itself otherwise).
    ``constants``: the value of every constant an op reads. ``shapes``: ONNX dims by name.
    """

    graph: OpGraph
    layouts: tuple[Layout, ...]
    onnx_nodes: tuple[onnx.NodeProto, ...]
    folded: Mapping[int, tuple[onnx.NodeProto, ...]]
    sources: Mapping[str, str]
    constants: Mapping[str, np.ndarray]
    shapes: Mapping[str, Dims | None]
    opset: int
    _dependence: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @staticmethod
    def from_model(model: onnx.ModelProto, name: str = "model") -> NumericGraph:
        """Import ``model`` (static shapes, batch 1) as :func:`graph_from_proto` does and
        keep the row axes, view sources and folds the lowering decided."""
        ir = from_onnx(model, require_shapes=False)
        lowering = Lowering(ir, name, False)
        graph = lowering.run()
        shapes = lowering.shapes
        layouts = []
        for t in graph.tensors:
            layout = Layout.of(shapes[t.name], lowering.rows.get(t.name))
            if layout.shape != t.shape:
                raise ModelError(f"tensor '{t.name}': layout {layout.shape} is not {t.shape}")
            layouts.append(layout)
        onnx_nodes = tuple(node_proto(ir.nodes[n.name]) for n in graph.nodes)
        tensor_index = {t.name: i for i, t in enumerate(graph.tensors)}
        kept = {n.name for n in graph.nodes}
        folded: dict[int, list[onnx.NodeProto]] = {}
        for node in ir.nodes.values():
            if node.op_type == "BatchNormalization" and node.name not in kept:
                source = lowering.resolve(node.inputs[0])
                if source in tensor_index and node.outputs[0] in lowering.alias:
                    producer = graph.tensors[tensor_index[source]].producer
                    folded.setdefault(producer, []).append(node_proto(node))
        names = {t for n in ir.nodes.values() for t in [*n.inputs, *n.outputs] if t}
        sources = {t: lowering.resolve(t) for t in names | set(ir.inputs)}
        opset = lowering.opset()
        constants = _constants(ir, lowering.const_elems, shapes)
        return NumericGraph(
            graph,
            tuple(layouts),
            onnx_nodes,
            {v: tuple(ns) for v, ns in folded.items()},
            sources,
            constants,
            shapes,
            opset,
        )

    # -- tensors ------------------------------------------------------------------------
    @cached_property
    def tensor_index(self) -> dict[str, int]:
        return {t.name: i for i, t in enumerate(self.graph.tensors)}

    def feeds_chw(self, feeds: Mapping[str, np.ndarray]) -> dict[int, Chw]:
        """Graph-input arrays (ONNX shapes, by name) in their ``(C, H, W)`` layouts."""
        out = {}
        for t in self.graph.inputs:
            name = self.graph.tensors[t].name
            if name not in feeds:
                raise ModelError(f"no value given for graph input '{name}'")
            out[t] = self.layouts[t].to_chw(np.asarray(feeds[name], np.float64))
        return out

    def to_onnx(self, tensor: int, value: Chw) -> np.ndarray:
        return self.layouts[tensor].to_onnx(value)

    # -- ops ----------------------------------------------------------------------------
    def evaluate(
        self, v: int, inputs: Mapping[int, Chw], rows: tuple[int, int] | None = None
    ) -> list[Chw]:
        """Op ``v``'s outputs (in the order of ``graph.nodes[v].outputs``, each ``(C, H,
        W)``) from its activation inputs (by tensor id, ``(C, H, W)``), by the ONNX
        definition of its node and of any BatchNormalization folded into it. ``rows``: a
        conv may compute only those output rows (the rest NaN)."""
        node = self.onnx_nodes[v]
        args: list[np.ndarray | None] = []
        for name in node.input:
            if not name:
                args.append(None)
            elif name in self.constants:
                args.append(self.constants[name])
            else:
                t = self.tensor_index[self.sources[name]]
                args.append(self.layouts[t].to_onnx(inputs[t]).reshape(self.shapes[name]))
        outs = dict(zip(node.output, run_onnx_op(node, args, self.opset, rows), strict=False))
        for bn in self.folded.get(v, ()):
            params = [self.constants[p] for p in bn.input[1:]]
            source = self.sources[bn.input[0]]
            outs[source] = run_onnx_op(bn, [outs[source], *params], self.opset)[0]
        result = []
        for t in self.graph.nodes[v].outputs:
            layout, value = self.layouts[t], outs[self.graph.tensors[t].name]
            if tuple(value.shape) != layout.dims:
                raise ModelError(
                    f"op '{node.name}' gave {tuple(value.shape)} for '{self.graph.tensors[t].name}'"
                    f", not {layout.dims}"
                )
            result.append(layout.to_chw(value))
        return result

    def forward(self, feeds: Mapping[str, np.ndarray]) -> dict[int, Chw]:
        """Every tensor of the graph, op by op in topological order: the unscheduled
        reference a replay must reproduce."""
        values = self.feeds_chw(feeds)
        for v, node in enumerate(self.graph.nodes):
            for t, value in zip(node.outputs, self.evaluate(v, values), strict=True):
                values[t] = value
        return values

    def dependence(self, v: int, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which elements of op ``v``'s ``i``-th input its outputs read, axis by axis: input
        channels per output channel (several outputs stacked), input rows per output row,
        input columns per output column (boolean matrices, output x input). Found by
        poisoning one input channel, row or column at a time with NaN on a zero input, so it
        is the op's own dependence, not a formula's; exact for ops whose dependence is a
        product over the axes (windows, channel groups, broadcasts), a superset otherwise."""
        if (v, i) in self._dependence:
            return self._dependence[v, i]
        node, tensors = self.graph.nodes[v], self.graph.tensors
        t = node.inputs[i]
        zeros = {u: np.zeros(tensors[u].shape) for u in node.inputs}

        def reached(axis: int, lane: int) -> np.ndarray:
            probe = dict(zeros)
            probe[t] = zeros[t].copy()
            np.moveaxis(probe[t], axis, 0)[lane] = np.nan
            outs = self.evaluate(v, probe)
            if axis == 0:
                hit = np.concatenate([np.isnan(o).any(axis=(1, 2)) for o in outs])
            else:
                other = (0, 2) if axis == 1 else (0, 1)
                hit = np.any([np.isnan(o).any(axis=other) for o in outs], axis=0)
            return hit

        found = tuple(
            np.stack([reached(axis, k) for k in range(size)], axis=1)
            for axis, size in enumerate(tensors[t].shape)
        )
        self._dependence[v, i] = found  # type: ignore[assignment]
        return found  # type: ignore[return-value]

    def weight_elements(self, v: int, channels: tuple[int, int]) -> int:
        """Weight elements op ``v`` needs to produce output ``channels``: its constant
        inputs (settings excluded, as the importer counts ``Node.weights``) restricted to
        those channels, plus the bias a folded BatchNormalization adds to a bias-less conv.
        A constant's channel is its output-channel axis for Conv, Gemm and MatMul, and
        where it broadcasts to the output otherwise (one shared scalar counts for any
        slice)."""
        node, out = self.onnx_nodes[v], self.graph.nodes[v].outputs[0]
        c0, c1 = channels
        total = 0
        for pos, name in enumerate(node.input):
            if not name or name not in self.constants:
                continue
            if pos > 0 and node.op_type in PARAM_INPUT_OPS:
                continue
            total += self._slice_elements(node, pos, self.constants[name], out, c0, c1)
        if self.folded.get(v) and (len(node.input) < 3 or not node.input[2]):
            total += c1 - c0
        return total

    def _slice_elements(
        self, node: onnx.NodeProto, pos: int, value: np.ndarray, out: int, c0: int, c1: int
    ) -> int:
        attrs = {a.name: a.i for a in node.attribute if a.type == onnx.AttributeProto.INT}
        if node.op_type == "Conv" and pos in (1, 2):
            return value.size // value.shape[0] * (c1 - c0)
        if node.op_type == "MatMul" and pos == 1 and value.ndim >= 2:
            return value.size // value.shape[-1] * (c1 - c0)
        if node.op_type == "Gemm" and pos == 1:
            axis = 0 if attrs.get("transB", 0) else 1
            return value.size // value.shape[axis] * (c1 - c0)
        layout = self.layouts[out]
        index = np.arange(value.size).reshape(value.shape)
        spread = layout.to_chw(np.broadcast_to(index, layout.dims))
        return int(np.unique(spread[c0:c1]).size)


def _constants(
    ir: ModelGraph,
    const_names: Mapping[str, int],
    shapes: Mapping[str, Dims],
) -> dict[str, np.ndarray]:
    """Every constant of the model by name: its weights (folded constants included) and the
    outputs of the constant and shape subgraphs the importer could not fold and lowering
    removed, evaluated in graph order (a Shape or Size from its input's static dims)."""
    values = {name: w.array for name, w in ir.weights.items()}
    opsets = dict(ir.opsets)
    for node in ir.nodes.values():
        outs = [o for o in node.outputs if o]
        if not outs or not all(o in const_names for o in outs):
            continue
        if node.op_type in ("Shape", "Size"):
            dims = shapes[node.inputs[0]]
            if node.op_type == "Size":
                values[outs[0]] = np.array(math.prod(dims), np.int64)
            else:
                window = dims[node.attr("start", 0) : node.attr("end", len(dims))]
                values[outs[0]] = np.array(window, np.int64)
            continue
        feeds = {i: values[i] for i in node.inputs if i}
        results = ReferenceEvaluator(node_proto(node), opsets=opsets).run(None, feeds)
        values.update((o, np.asarray(r)) for o, r in zip(node.outputs, results, strict=False) if o)
    return values
