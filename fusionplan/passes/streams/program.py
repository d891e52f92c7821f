"""An ONNX graph as a list of PyTorch kernels, run op by op (docs/design.md, "Stream
scheduling").

Each op becomes its :mod:`accel_model.latency.torch_ops` kernel, so the executor runs the
same torch calls the latency tables were measured with. Before that, :func:`fold_constants`
evaluates every op whose inputs are all constant, ``Shape`` of a statically shaped tensor
included (DeepLabV3's ``Shape -> Slice -> Concat -> Resize`` sizes): those ops are not part
of the model's run time, would need host syncs inside a CUDA Graph capture, and would add
fake branches to the stream schedule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel_model.latency.torch_ops import Kernel, supports, torch_kernel
from fusionplan.ir.errors import ConfigError
from fusionplan.passes.substitution.graph import Node, SubGraph, Weight


def fold_constants(g: SubGraph) -> SubGraph:
    """``g`` with every op computable before the run replaced by its value."""
    import torch  # heavy: 2 s; folding evaluates ops with their torch kernels

    weights = dict(g.weights)
    kept: list[Node] = []
    for node in g.nodes.values():
        static = node.op == "Shape"  # shapes are static: its value is known
        if not static and not all(t == "" or t in weights for t in node.inputs):
            kept.append(node)
            continue
        values = _evaluate(g, node, weights, torch)
        for name, value in zip(node.outputs, values, strict=True):
            weights[name] = Weight.of(value)
    if len(kept) == len(g):
        return g
    outputs = set(g.outputs)
    if any(t in outputs for n in g.nodes.values() if n not in kept for t in n.outputs):
        raise ConfigError(f"{g.name}: a graph output is a constant; nothing to schedule")
    used = {t for n in kept for t in n.inputs} | outputs
    tensors = {t: info for t, info in g.tensors.items() if t not in weights}
    live = {t: w for t, w in weights.items() if t in used}
    return SubGraph(kept, tensors, live, g.inputs, g.outputs, opsets=g.opsets, name=g.name)


def _evaluate(g: SubGraph, node: Node, weights: Mapping[str, Weight], torch: Any) -> list:
    """Output arrays of ``node`` from constant inputs."""
    if node.op == "Shape":
        shape = g.shape(node.inputs[0])
        start, end = int(node.attr("start", 0)), node.attr("end")
        return [np.asarray(shape[start : None if end is None else int(end)], dtype=np.int64)]
    if not supports(node.op):
        raise ConfigError(f"{g.name}: cannot fold constant op {node.op} ({node.name})")
    arrays = [weights[t].array if t else None for t in node.inputs]
    kernel = torch_kernel(g.signature(node), arrays, torch)
    with torch.inference_mode():
        out = kernel([None if a is None else torch.from_numpy(np.array(a)) for a in arrays])
    outs = out if isinstance(out, tuple | list) else (out,)
    return [o.numpy().copy() for o in outs]


@contextmanager
def intra_op_threads(torch: Any, n: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` for the calling thread, then restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class TorchOp:
    name: str
    op: str
    kernel: Kernel
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


class TorchProgram:
    """The ops of a (folded) graph as torch kernels on one device, in the graph's order;
    ``ops[i]`` is op ``i`` of :meth:`OpDag.from_graph` on the same graph."""

    def __init__(self, g: SubGraph, device: str = "cpu") -> None:
        import torch  # heavy: 2 s, only executing needs it

        self.torch = torch
        self.graph = g
        self.device = device
        self.consts = {
            name: torch.from_numpy(np.array(w.array)).to(device) for name, w in g.weights.items()
        }
        self.ops: list[TorchOp] = []
        for node in g.nodes.values():
            if not supports(node.op):
                raise ConfigError(f"{g.name}: the torch executor has no kernel for {node.op}")
            arrays = [g.weights[t].array if t in g.weights else None for t in node.inputs]
            kernel = torch_kernel(g.signature(node), arrays, torch)
            self.ops.append(TorchOp(node.name, node.op, kernel, node.inputs, node.outputs))

    def environment(self, feeds: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Tensor name -> value before the run: the constants and the inputs."""
        missing = [name for name in self.graph.inputs if name not in feeds]
        if missing:
            raise ConfigError(f"missing input(s) {', '.join(missing)}")
        env: dict[str, Any] = dict(self.consts)
        for name in self.graph.inputs:
            env[name] = self.torch.from_numpy(np.asarray(feeds[name])).to(self.device)
        return env

    def run_op(self, i: int, env: dict[str, Any]) -> None:
        """Run op ``i`` reading and writing ``env``."""
        op = self.ops[i]
        out = op.kernel([env[t] if t else None for t in op.inputs])
        if isinstance(out, tuple | list):
            for name, value in zip(op.outputs, out, strict=True):
                env[name] = value
        else:
            env[op.outputs[0]] = out

    def run(self, feeds: Mapping[str, np.ndarray], order: Sequence[int] | None = None) -> dict:
        """One sequential run in ``order`` (graph order if None); output name -> array."""
        env = self.environment(feeds)
        with self.torch.inference_mode():
            for i in order if order is not None else range(len(self.ops)):
                self.run_op(i, env)
        return self.outputs(env)

    def outputs(self, env: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return {name: env[name].detach().cpu().numpy() for name in self.graph.outputs}
