"""Run a dataflow graph in PyTorch: batch by batch over a memory layout, or node by node.

Batched execution is compiled once into a program (per batch: the cell, each operand as an
arena view or a gather index, the output run), so what is timed is the tensor work and the
copies the layout forces, not Python planning. Scheduling and layout time is reported apart
as the per-graph overhead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fusionplan.batching.graph import Batch, DataflowGraph
from fusionplan.batching.layout import MemoryLayout, is_view, member_order, slot_rows


@dataclass(frozen=True)
class Operand:
    arena: int
    start: int  # first row when read in place
    count: int
    index: torch.Tensor | None  # gather rows; None for a view


@dataclass(frozen=True)
class Step:
    kind: str
    operands: tuple[Operand, ...]
    tokens: torch.Tensor
    arena: int  # where the outputs go
    start: int
    count: int


@dataclass(frozen=True)
class Program:
    """A compiled batched run: the steps and the arenas they read and write."""

    steps: tuple[Step, ...]
    layout: MemoryLayout
    kernels: int  # cell calls plus gathers per run


def compile_program(
    graph: DataflowGraph, batches: Sequence[Batch], layout: MemoryLayout
) -> Program:
    """Per batch: its cell, each operand as a view or a gather index, its output run.

    Copied bytes are ``layout.copy_stats``'s business; here only the kernels are counted.
    """
    steps = []
    kernels = 0
    for batch in batches:
        members = member_order(batch, layout)
        first = members[0]
        if not is_view(members, layout):
            rows = [layout.row[n] for n in members]
            raise ValueError(f"layout {layout.name!r} does not give batch rows {rows} a run")
        operands = []
        for j in range(len(graph.nodes[first].args)):
            producers = slot_rows(graph, members, j)
            arena = layout.arena[producers[0]]
            if is_view(producers, layout):
                operands.append(Operand(arena, layout.row[producers[0]], len(producers), None))
                continue
            index = torch.tensor([layout.row[p] for p in producers], dtype=torch.long)
            operands.append(Operand(arena, 0, len(producers), index))
            kernels += 1
        tokens = torch.tensor([graph.nodes[n].token for n in members], dtype=torch.long)
        steps.append(
            Step(
                graph.nodes[first].type,
                tuple(operands),
                tokens,
                layout.arena[first],
                layout.row[first],
                len(members),
            )
        )
        kernels += 1
    return Program(tuple(steps), layout, kernels)


def run_program(program: Program, cells: Mapping[str, torch.nn.Module]) -> list[torch.Tensor]:
    """Execute once; returns the arenas (row ``layout.row[n]`` of arena ``layout.arena[n]``)."""
    layout = program.layout
    arenas = [
        torch.empty(rows, width) for rows, width in zip(layout.sizes, layout.widths, strict=True)
    ]
    with torch.no_grad():
        for step in program.steps:
            operands = [
                arenas[o.arena].narrow(0, o.start, o.count)
                if o.index is None
                else arenas[o.arena].index_select(0, o.index)
                for o in step.operands
            ]
            out = cells[step.kind](operands, step.tokens)
            arenas[step.arena].narrow(0, step.start, step.count).copy_(out)
    return arenas


def node_outputs(program: Program, arenas: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Each node's output row, in node order (for comparing with unbatched execution)."""
    layout = program.layout
    return [arenas[a][r] for a, r in zip(layout.arena, layout.row, strict=True)]


def run_unbatched(graph: DataflowGraph, cells: Mapping[str, torch.nn.Module]) -> list[torch.Tensor]:
    """Every node alone, in id order: the reference, and the no-batching baseline."""
    outputs: list[torch.Tensor] = []
    with torch.no_grad():
        for node in graph.nodes:
            operands = [outputs[a].unsqueeze(0) for a in node.args]
            token = torch.tensor([node.token], dtype=torch.long)
            outputs.append(cells[node.type](operands, token)[0])
    return outputs
