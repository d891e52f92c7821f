"""Torch cells for the dynamic workloads: one module per node type (docs/design.md, "Batching").

A batched call runs k nodes of one type as one kernel: ``forward(operands, tokens)`` gets
operand j as a ``[k, operand_width[j]]`` matrix (the producers' outputs gathered in batch
order) and the nodes' tokens as a ``[k]`` LongTensor, and returns ``[k, output_width]``.
Every cell is row-wise (affine maps and element-wise gates, no statistics over rows), so a
row's result does not depend on which nodes share its batch: any schedule a batching policy
picks computes the same values, and schedules differ only in speed.

Weights are random: the batching experiments time kernels and move bytes, so they need real
cell arithmetic at real shapes, not trained values. Each type's weights come from its own
generator seeded by ``(seed, type name)``, so a type keeps its weights when other types are
added, and a type two workloads share (``classify`` in the tree workloads) agrees across them.
LSTM states are ``h || c`` and GRU states ``h`` (see :class:`CellSpec`).
"""

from __future__ import annotations

import hashlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fusionplan.batching.workloads import CellSpec, Workload, get_workload
from fusionplan.ir.errors import ConfigError


class _Init:
    """Draws one cell's parameters from one seeded generator (float32, CPU, no grad)."""

    def __init__(self, seed: int, name: str) -> None:
        digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
        self.gen = torch.Generator().manual_seed(int.from_bytes(digest[:7], "little"))

    def uniform(self, shape: tuple[int, ...], fan_in: int) -> nn.Parameter:
        """PyTorch's default Linear init: uniform in +-1/sqrt(fan_in)."""
        bound = 1 / math.sqrt(fan_in)
        t = torch.empty(shape).uniform_(-bound, bound, generator=self.gen)
        return nn.Parameter(t, requires_grad=False)

    def table(self, rows: int, dim: int) -> nn.Parameter:
        """An embedding table, N(0, 1) like ``nn.Embedding``."""
        return nn.Parameter(torch.randn(rows, dim, generator=self.gen), requires_grad=False)


class _Affine(nn.Module):
    """``x @ W.T (+ b)``: the one matrix product every gate is built from."""

    def __init__(self, init: _Init, fan_in: int, out: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = init.uniform((out, fan_in), fan_in)
        self.bias = init.uniform((out,), fan_in) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class _LSTMStep(nn.Module):
    """One ``torch.nn.LSTMCell`` step (gate order i, f, g, o), written out so leaves can reuse
    it with a zero state."""

    def __init__(self, init: _Init, in_x: int, hidden: int) -> None:
        super().__init__()
        self.x = _Affine(init, in_x, 4 * hidden)
        self.h = _Affine(init, hidden, 4 * hidden, bias=False)

    def forward(self, x: Tensor, h: Tensor, c: Tensor) -> Tensor:
        i, f, g, o = (self.x(x) + self.h(h)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], dim=1)


class _GRUStep(nn.Module):
    """One ``torch.nn.GRUCell`` step (gate order r, z, n; the reset gate scales ``W_hn h +
    b_hn``)."""

    def __init__(self, init: _Init, in_x: int, hidden: int) -> None:
        super().__init__()
        self.x = _Affine(init, in_x, 3 * hidden)
        self.h = _Affine(init, hidden, 3 * hidden)

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        xr, xz, xn = self.x(x).chunk(3, dim=1)
        hr, hz, hn = self.h(h).chunk(3, dim=1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        return (1 - z) * n + z * h


class Cell(nn.Module):
    """One node type's computation over a batch of rows; inference only."""

    def __init__(self, spec: CellSpec, hidden: int) -> None:
        super().__init__()
        self.spec = spec
        self.hidden = hidden

    def forward(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        with torch.no_grad():  # no autograd graph: the executor only times inference
            return self.compute(operands, tokens)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        raise NotImplementedError


class Embed(Cell):
    """Token id -> embedding row."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.table = init.table(vocab, hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        return F.embedding(tokens, self.table)


class Zero(Cell):
    """The zero initial state: a node of its own so chains start like every other step."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.width = spec.output_width(hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        return torch.zeros(tokens.shape[0], self.width, device=tokens.device)


class LSTM(Cell):
    """An LSTM step: operands (x, h||c) -> h'||c'."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.step = _LSTMStep(init, spec.operand_width(hidden)[0], hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        x, state = operands
        return self.step(x, state[:, : self.hidden], state[:, self.hidden :])


class GRU(Cell):
    """A GRU step: operands (x, h) -> h'."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.step = _GRUStep(init, spec.operand_width(hidden)[0], hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        x, h = operands
        return self.step(x, h)


class LeafLSTM(Cell):
    """A tree leaf: embedding, then an LSTM step with zero children (Tai et al.'s leaf)."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.table = init.table(vocab, hidden)
        self.step = _LSTMStep(init, hidden, hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        x = F.embedding(tokens, self.table)
        zero = x.new_zeros(x.shape[0], self.hidden)
        return self.step(x, zero, zero)


class LeafGRU(Cell):
    """A tree leaf: embedding, then a GRU step from the zero state."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.table = init.table(vocab, hidden)
        self.step = _GRUStep(init, hidden, hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        x = F.embedding(tokens, self.table)
        return self.step(x, x.new_zeros(x.shape[0], self.hidden))


class NaryLSTM(Cell):
    """Binary N-ary TreeLSTM node (Tai et al. 2015, eq. 9-14, no input at internal nodes).

    Each child has its own forget gate, computed from both children's ``h`` with its own
    weights, so the cell tells left from right (unlike the Child-Sum variant).
    """

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.gates = _Affine(init, 2 * hidden, 5 * hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        (hl, cl), (hr, cr) = (s.split(self.hidden, dim=1) for s in operands)
        i, fl, fr, o, u = self.gates(torch.cat([hl, hr], dim=1)).chunk(5, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.cat([torch.sigmoid(o) * torch.tanh(c), c], dim=1)


class TreeGRU(Cell):
    """Binary TreeGRU node: a GRU step whose previous state is the children's mean, with a
    reset gate per child so the candidate can drop either subtree."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.gates = _Affine(init, 2 * hidden, 3 * hidden)  # r_left, r_right, z
        self.candidate = _Affine(init, 2 * hidden, hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        hl, hr = operands
        children = torch.cat([hl, hr], dim=1)
        g = torch.sigmoid(self.gates(children))
        r, z = g[:, : 2 * self.hidden], g[:, 2 * self.hidden :]
        n = torch.tanh(self.candidate(r * children))
        return (1 - z) * n + z * (hl + hr) / 2


class WordLSTM(Cell):
    """Lattice word cell (Zhang & Yang 2018, eq. 13-14): operands (word x, char h||c at the
    word's start) -> the word's cell state c^w; it has no output gate, no h."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.x = _Affine(init, spec.operand_width(hidden)[0], 3 * hidden)
        self.h = _Affine(init, hidden, 3 * hidden, bias=False)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        x, state = operands
        h, c = state.split(self.hidden, dim=1)
        i, f, g = (self.x(x) + self.h(h)).chunk(3, dim=1)
        return torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)


class MergeLSTM(Cell):
    """Folds one word ending here into the char state: operands (h||c, c^w) -> h'||c'.

    A sigmoid gate computed from both mixes the two cell states (Zhang & Yang's normalised
    word gate, one word at a time); the output gate is recomputed from the same inputs, as
    the char cell's own is not an operand.
    """

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.gates = _Affine(init, 3 * hidden, 2 * hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        state, cw = operands
        c = state[:, self.hidden :]
        g, o = torch.sigmoid(self.gates(torch.cat([state, cw], dim=1))).chunk(2, dim=1)
        c = g * c + (1 - g) * cw
        return torch.cat([o * torch.tanh(c), c], dim=1)


class MergeGRU(Cell):
    """Folds one word ending here into the char state: operands (h, h^w) -> a gated mix."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.gate = _Affine(init, 2 * hidden, hidden)

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        h, hw = operands
        g = torch.sigmoid(self.gate(torch.cat([h, hw], dim=1)))
        return g * h + (1 - g) * hw


class Readout(Cell):
    """Class logits from the ``h`` (first H floats) of each operand state."""

    def __init__(self, spec: CellSpec, hidden: int, vocab: int, init: _Init) -> None:
        super().__init__(spec, hidden)
        self.out = _Affine(init, len(spec.slots) * hidden, spec.output_width(hidden))

    def compute(self, operands: list[Tensor], tokens: Tensor) -> Tensor:
        return self.out(torch.cat([s[:, : self.hidden] for s in operands], dim=1))


_KINDS: dict[str, type[Cell]] = {
    "embed": Embed,
    "zero": Zero,
    "lstm": LSTM,
    "gru": GRU,
    "leaf_lstm": LeafLSTM,
    "leaf_gru": LeafGRU,
    "nary_lstm": NaryLSTM,
    "tree_gru": TreeGRU,
    "word_lstm": WordLSTM,
    "merge_lstm": MergeLSTM,
    "merge_gru": MergeGRU,
    "readout": Readout,
}


def build_cells(workload: Workload | str, hidden: int, seed: int = 0) -> dict[str, Cell]:
    """One eval-mode float32 cell per node type of ``workload``, weights drawn from ``seed``."""
    if isinstance(workload, str):
        workload = get_workload(workload)
    if hidden < 1:
        raise ConfigError(f"hidden size must be at least 1, got {hidden}")
    cells: dict[str, Cell] = {}
    for name, spec in workload.cell_types().items():
        cell = _KINDS[spec.kind](spec, hidden, workload.vocab, _Init(seed, name))
        cells[name] = cell.eval()
    return cells
