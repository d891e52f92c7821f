"""Output shapes of the ops a rule emits, so a replacement's tensors are known without
re-running onnx's shape inference on every candidate graph (a search makes thousands).

Only the ops rules produce are covered; another op is a rule bug, reported as such.
"""

from __future__ import annotations

from collections.abc import Callable

from fusionplan.passes.substitution.graph import Dims, Node

UNARY = frozenset(
    {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Erf"}
)


def infer_shapes(
    node: Node,
    shape: Callable[[str], Dims],
    value: Callable[[str], tuple[int, ...] | None],
) -> list[Dims]:
    """The shape of each output of ``node``; ``shape`` and ``value`` read its inputs."""
    op = node.op.rpartition(".")[2]
    ins = [shape(t) if t else () for t in node.inputs]
    if op in UNARY:
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


def conv_shape(node: Node, x: Dims, w: Dims) -> Dims:
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
