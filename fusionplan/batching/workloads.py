"""The dynamic workloads of ED-Batch (Chen et al., ICML 2023): chains, trees and lattices.

Each workload turns a mini-batch of generated inputs (sentences, parse trees, character
lattices) into one :class:`~fusionplan.batching.graph.DataflowGraph`, the union of the
inputs' graphs, and says what each node type computes (:class:`CellSpec`); the torch cells
live in :mod:`fusionplan.batching.cells` so that planning never imports torch.

The inputs are random but shaped like real data, because batching quality depends only on
the *shape* of the graphs (lengths, tree balance, link density), never on token values:

* sentence lengths are lognormal with mean 23 and sd 11 tokens (rounded, clipped to
  [2, 80] for the BiLSTM and [2, 50] for the trees): roughly the moments of English newswire
  such as the Penn Treebank WSJ text, whose length histogram is right-skewed like a
  lognormal (the lognormal is matched to these two moments, not fitted to a corpus);
* parse trees split a span at a uniformly drawn point, recursively: random bracketing
  gives the mix of deep and bushy trees that makes tree batching hard;
* lattice sentences have lognormal(35, 15) characters clipped to [4, 100], and every span
  of 2, 3 or 4 characters is a lexicon word with probability 0.25, independently: chosen
  values (not fitted to a corpus) for Chinese character sentences with a dense lexicon,
  giving each character ~0.75 outgoing word links (slightly fewer near the sentence end);
* tokens and word ids are uniform over a 1000-entry vocabulary; there are 10 tag classes.

The same seed always gives the same graph; the tree workloads draw the same trees for the
same seed (the 2-type TreeLSTM draws its node types from a separate stream), and so do the
two lattice workloads, so their schedules compare on identical inputs.

Generation is linear in the number of nodes. ``graph(batch_size=256, seed=0)``, measured
(best / worst of 7, Python 3.11, a shared 2-core VM): bilstm 51 / 81 ms (23.7k nodes);
treelstm, treegru 30 / 58 ms and treelstm2 38 / 64 ms (11.5k nodes); latticelstm,
latticegru 135 / 224 ms (46.4k nodes).
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from fusionplan.batching.graph import CellNode, DataflowGraph
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.registry import Registry

VOCAB = 1000
"""Token / word ids are drawn from ``range(VOCAB)``; every embedding table has this many rows."""
CLASSES = 10
"""Tag / class count: the width of every readout."""


class Width(NamedTuple):
    """Floats per row, ``per_hidden * hidden + fixed``: states scale with the hidden size,
    class logits do not."""

    per_hidden: int
    fixed: int = 0

    def at(self, hidden: int) -> int:
        return self.per_hidden * hidden + self.fixed


@dataclass(frozen=True)
class CellSpec:
    """What the nodes of one type compute, and the row widths the executor moves for them.

    LSTM states are ``h || c`` (width 2H, ``h`` first) and GRU states ``h`` (width H), so a
    readout always reads the first H floats of each operand.
    """

    kind: str  # the cell to build (a key of cells._KINDS)
    output: Width
    slots: tuple[str, ...] = ()  # what each operand slot holds, e.g. ("x", "state")
    operands: tuple[Width, ...] = ()  # the width of each slot
    reads_token: bool = False  # whether the cell looks up the node's token

    def __post_init__(self) -> None:
        if len(self.slots) != len(self.operands):
            raise ValueError(f"cell {self.kind!r}: one width per operand slot is needed")

    def operand_width(self, hidden: int) -> tuple[int, ...]:
        return tuple(w.at(hidden) for w in self.operands)

    def output_width(self, hidden: int) -> int:
        return self.output.at(hidden)


@dataclass(frozen=True)
class LengthDist:
    """A lognormal length distribution given by its mean and sd, rounded and clipped."""

    mean: float
    sd: float
    low: int
    high: int

    def draw(self, rng: random.Random) -> int:
        sigma2 = math.log1p((self.sd / self.mean) ** 2)  # lognormal moment matching
        mu = math.log(self.mean) - sigma2 / 2
        return min(self.high, max(self.low, round(rng.lognormvariate(mu, math.sqrt(sigma2)))))


SENTENCE = LengthDist(23, 11, 2, 80)
TREE_SENTENCE = LengthDist(23, 11, 2, 50)
LATTICE_SENTENCE = LengthDist(35, 15, 4, 100)


@dataclass(frozen=True)
class Sentence:
    """A chain input: its tokens."""

    tokens: tuple[int, ...]


class Branch(NamedTuple):
    """An internal tree node; ``variant`` picks among the workload's internal node types."""

    left: Tree
    right: Tree
    variant: int = 0


Tree = int | Branch
"""A binary tree whose leaves are token ids."""


@dataclass(frozen=True)
class Word:
    """A lexicon word linking characters ``start .. start + length - 1`` of a lattice."""

    start: int
    length: int
    token: int

    @property
    def end(self) -> int:
        return self.start + self.length - 1


@dataclass(frozen=True)
class Lattice:
    """A lattice input: the character tokens and the word links over them."""

    chars: tuple[int, ...]
    words: tuple[Word, ...]


In = TypeVar("In")


class _Builder:
    """Appends nodes in creation order, which every workload makes topological."""

    def __init__(self) -> None:
        self.nodes: list[CellNode] = []
        self.instance: list[int] = []
        self.input = 0

    def add(self, type: str, args: tuple[int, ...] = (), token: int = -1) -> int:
        self.nodes.append(CellNode(type, args, token))
        self.instance.append(self.input)
        return len(self.nodes) - 1


@dataclass(frozen=True)
class Workload(ABC, Generic[In]):
    """A dynamic workload: how to draw inputs and how each input unrolls into cell calls."""

    name: str
    family: str  # "chain" | "tree" | "lattice"
    description: str

    vocab = VOCAB
    classes = CLASSES

    def graph(self, batch_size: int, seed: int) -> DataflowGraph:
        """The union graph of ``batch_size`` inputs drawn with ``seed``."""
        return self.graph_of(self.inputs(batch_size, seed))

    def graph_of(self, inputs: Sequence[In]) -> DataflowGraph:
        """The union graph of given inputs; ``instance`` is each node's index in ``inputs``."""
        builder = _Builder()
        for i, x in enumerate(inputs):
            builder.input = i
            self._unroll(builder, x)
        return DataflowGraph(tuple(builder.nodes), tuple(builder.instance), self.name)

    def inputs(self, batch_size: int, seed: int) -> list[In]:
        """``batch_size`` inputs drawn from ``random.Random(seed)``."""
        if batch_size < 1:
            raise ConfigError(f"batch size must be at least 1, got {batch_size}")
        return self._draw(batch_size, random.Random(seed), seed)

    @abstractmethod
    def cell_types(self) -> dict[str, CellSpec]:
        """Node type -> what it computes, for every type the workload can emit."""

    @abstractmethod
    def _draw(self, batch_size: int, rng: random.Random, seed: int) -> list[In]: ...

    @abstractmethod
    def _unroll(self, builder: _Builder, x: In) -> None: ...


def _tokens(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(VOCAB) for _ in range(n))


def _readout(*slots: tuple[str, Width]) -> CellSpec:
    """Class logits from some states: ``tag`` and ``classify``."""
    return CellSpec(
        "readout", Width(0, CLASSES), tuple(s for s, _ in slots), tuple(w for _, w in slots)
    )


_EMBED = CellSpec("embed", Width(1), reads_token=True)


@dataclass(frozen=True)
class ChainWorkload(Workload[Sentence]):
    """BiLSTM tagger: a forward and a backward LSTM chain per sentence, a tag per token."""

    def cell_types(self) -> dict[str, CellSpec]:
        lstm = CellSpec("lstm", Width(2), ("x", "state"), (Width(1), Width(2)))
        return {
            "embed": _EMBED,
            "zero": CellSpec("zero", Width(2)),
            "lstm_fwd": lstm,
            "lstm_bwd": lstm,
            "tag": _readout(("fwd", Width(2)), ("bwd", Width(2))),
        }

    def _draw(self, batch_size: int, rng: random.Random, seed: int) -> list[Sentence]:
        return [Sentence(_tokens(rng, SENTENCE.draw(rng))) for _ in range(batch_size)]

    def _unroll(self, builder: _Builder, x: Sentence) -> None:
        add = builder.add
        embeds = [add("embed", (), t) for t in x.tokens]
        zero = add("zero")
        fwd, bwd = [], [0] * len(embeds)
        state = zero
        for e in embeds:
            state = add("lstm_fwd", (e, state))
            fwd.append(state)
        state = zero
        for i in reversed(range(len(embeds))):
            state = bwd[i] = add("lstm_bwd", (embeds[i], state))
        for f, b in zip(fwd, bwd, strict=True):
            add("tag", (f, b))


@dataclass(frozen=True)
class TreeWorkload(Workload[Tree]):
    """Sentence classification over binary parse trees (Tai et al. 2015)."""

    cell: str = "lstm"  # "lstm" (state h||c) or "gru" (state h)
    internal: tuple[str, ...] = ("tree_lstm",)  # internal node types, drawn uniformly

    def cell_types(self) -> dict[str, CellSpec]:
        state = Width(2) if self.cell == "lstm" else Width(1)
        kind = "nary_lstm" if self.cell == "lstm" else "tree_gru"
        node = CellSpec(kind, state, ("left", "right"), (state, state))
        return {
            f"leaf_{self.cell}": CellSpec(f"leaf_{self.cell}", state, reads_token=True),
            **dict.fromkeys(self.internal, node),
            "classify": _readout(("root", state)),
        }

    def _draw(self, batch_size: int, rng: random.Random, seed: int) -> list[Tree]:
        variants = random.Random(f"{seed}/variant")  # own stream: same trees as 1-type runs
        n_types = len(self.internal)

        def split(tokens: Sequence[int], lo: int, hi: int) -> Tree:
            if hi - lo == 1:
                return tokens[lo]
            mid = rng.randint(lo + 1, hi - 1)
            left, right = split(tokens, lo, mid), split(tokens, mid, hi)
            return Branch(left, right, variants.randrange(n_types) if n_types > 1 else 0)

        trees = []
        for _ in range(batch_size):
            tokens = _tokens(rng, TREE_SENTENCE.draw(rng))
            trees.append(split(tokens, 0, len(tokens)))
        return trees

    def _unroll(self, builder: _Builder, x: Tree) -> None:
        add, leaf, internal = builder.add, f"leaf_{self.cell}", self.internal

        def visit(t: Tree) -> int:  # post-order: children get smaller ids
            if isinstance(t, int):
                return add(leaf, (), t)
            return add(internal[t.variant], (visit(t.left), visit(t.right)))

        add("classify", (visit(x),))


@dataclass(frozen=True)
class LatticeWorkload(Workload[Lattice]):
    """Lattice tagger (Zhang & Yang 2018): a character chain plus word cells that skip ahead."""

    cell: str = "lstm"  # "lstm" (state h||c) or "gru" (state h)
    word_lengths: tuple[int, ...] = (2, 3, 4)
    link_prob: float = 0.25  # chance that a given (start, length) span is a lexicon word

    def cell_types(self) -> dict[str, CellSpec]:
        # A word's state is H wide either way: an LSTM word cell keeps only its cell state
        # c^w (Zhang & Yang), a GRU word cell its h.
        if self.cell == "lstm":
            state, step, word_cell, merge = Width(2), "lstm", "word_lstm", "merge_lstm"
        else:
            state, step, word_cell, merge = Width(1), "gru", "gru", "merge_gru"
        return {
            "zero": CellSpec("zero", state),
            "char_embed": _EMBED,
            "char_cell": CellSpec(step, state, ("x", "state"), (Width(1), state)),
            "word_embed": _EMBED,
            "word_cell": CellSpec(word_cell, Width(1), ("x", "state"), (Width(1), state)),
            "merge": CellSpec(merge, state, ("state", "word"), (state, Width(1))),
            "tag": _readout(("state", state)),
        }

    def _draw(self, batch_size: int, rng: random.Random, seed: int) -> list[Lattice]:
        lattices = []
        for _ in range(batch_size):
            n = LATTICE_SENTENCE.draw(rng)
            words = tuple(
                Word(b, length, rng.randrange(VOCAB))
                for b in range(n)
                for length in self.word_lengths
                if b + length <= n and rng.random() < self.link_prob
            )
            lattices.append(Lattice(_tokens(rng, n), words))
        return lattices

    def _unroll(self, builder: _Builder, x: Lattice) -> None:
        add, n = builder.add, len(x.chars)
        ending: list[list[int]] = [[] for _ in range(n)]
        starting: list[list[int]] = [[] for _ in range(n)]
        for k, w in enumerate(x.words):
            if w.start < 0 or w.length < 2 or w.end >= n:
                raise ConfigError(f"lattice word {w} does not fit {n} characters")
            ending[w.end].append(k)
            starting[w.start].append(k)
        word_state = [0] * len(x.words)
        state = add("zero")
        for t, ch in enumerate(x.chars):
            state = add("char_cell", (add("char_embed", (), ch), state))
            for k in sorted(ending[t], key=lambda k: x.words[k].length):
                state = add("merge", (state, word_state[k]))  # shorter words merge first
            add("tag", (state,))
            for k in starting[t]:  # words read the final (merged) state at their start
                word_state[k] = add("word_cell", (add("word_embed", (), x.words[k].token), state))


WORKLOADS: Registry[Workload] = Registry("workload")
"""Workload name -> :class:`Workload`; the bench and the CLI list these."""


def _register(w: Workload) -> None:
    WORKLOADS.register(w.name, w, help=w.description)


_register(ChainWorkload("bilstm", "chain", "BiLSTM tagger over sentences"))
_register(TreeWorkload("treelstm", "tree", "binary TreeLSTM over random parse trees"))
_register(
    TreeWorkload("treegru", "tree", "binary TreeGRU over random parse trees", "gru", ("tree_gru",))
)
_register(
    TreeWorkload(
        "treelstm2",
        "tree",
        "TreeLSTM with two internal node types drawn 50/50",
        internal=("tree_lstm_a", "tree_lstm_b"),
    )
)
_register(LatticeWorkload("latticelstm", "lattice", "lattice LSTM tagger over character lattices"))
_register(
    LatticeWorkload("latticegru", "lattice", "lattice GRU tagger over character lattices", "gru")
)


def get_workload(name: str) -> Workload:
    """The workload registered as ``name``; a one-line :class:`ConfigError` if there is none."""
    return WORKLOADS.get(name)
