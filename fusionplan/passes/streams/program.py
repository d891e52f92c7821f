"""An ONNX graph as a list of PyTorch kernels, run op by op (docs/design.md, "Stream
scheduling").

Each op becomes its :mod:`accel_model.latency.torch_ops` kernel, so the executor runs the
same torch calls the latency tables were measured with. The model IR has no op whose
inputs are all constant (the importer folds them, ``Shape`` of a statically shaped tensor
included: DeepLabV3's ``Shape -> Slice -> Concat -> Resize`` sizes): those ops are not part
of the model's run time, would need host syncs inside a CUDA Graph capture, and would add
fake branches to the stream schedule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from accel_model.latency.graph import node_signature
from accel_model.latency.torch_ops import Kernel, supports, torch_kernel
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.model import ModelGraph


def check_schedulable(g: ModelGraph) -> ModelGraph:
    """``g`` if every op runs at run time. The importer folds every op computable before
    the run (:func:`fusionplan.ir.onnx_model.from_onnx`) except one that makes a graph
    output: such a model's output is a constant, and there is nothing to schedule for it."""
    outputs = set(g.outputs)
    for node in g.nodes.values():
        static = node.op_type in ("Shape", "Size")
        constant = static or all(t == "" or t in g.weights for t in node.inputs)
        if constant and outputs.intersection(node.outputs):
            raise ConfigError(f"{g.name}: a graph output is a constant; nothing to schedule")
    return g


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

    def __init__(self, g: ModelGraph, device: str = "cpu") -> None:
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
            kernel = torch_kernel(node_signature(g, node), arrays, torch)
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
