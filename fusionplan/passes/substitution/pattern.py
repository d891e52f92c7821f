"""Rules as a short source pattern plus a replacement, and the matcher that finds them.

A pattern is a few ONNX-like assignments (docs/design.md, "Graph substitution")::

    "c = Conv(x, $w, $b?) ; y = BatchNormalization(c, $s, $beta, $mean, $var)"

Names are variables: a name used twice binds the same tensor (``"a = Conv(x, $w1) ; b =
Conv(x, $w2)"`` matches two convs that share an input); ``$`` binds only a weight; a
trailing ``?`` marks an optional input (absent or ``""``); ``*xs`` binds the rest of an
argument or output list. A tensor a pattern node produces and another pattern node reads is
*internal*: it must have no reader outside the match and not be a graph output, so a
replacement never has to keep it alive. Why our own matcher and not onnxscript's rewriter:
the search matches thousands of graphs, on its own immutable :class:`ModelGraph`, and needs
matches anchored at changed nodes (incremental re-matching, OCGGS's DPP); both are a few
lines here and awkward through a general ONNX IR.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from fusionplan.ir.model import (
    AttrValue,
    Dims,
    ModelGraph,
    ModelNode,
    Replacement,
    TensorInfo,
    Weight,
    fresh_name,
    make_attrs,
)
from fusionplan.ir.shapes import output_shapes

_STATEMENT = re.compile(r"^\s*(?P<outs>[^=]+?)\s*=\s*(?P<op>[\w.|]+)\s*\((?P<args>.*)\)\s*$")


@dataclass(frozen=True)
class Arg:
    """One variable in a pattern: name, weight-only, optional, variadic."""

    name: str
    const: bool = False
    optional: bool = False
    rest: bool = False

    @classmethod
    def parse(cls, text: str) -> Arg:
        text = text.strip()
        rest = text.startswith("*")
        text = text.lstrip("*")
        const = text.startswith("$")
        text = text.lstrip("$")
        optional = text.endswith("?")
        return cls(text.rstrip("?"), const, optional, rest)


@dataclass(frozen=True)
class PatternNode:
    ops: tuple[str, ...]  # alternatives: "Relu|Sigmoid" matches either
    inputs: tuple[Arg, ...]
    outputs: tuple[Arg, ...]


def parse_pattern(text: str) -> tuple[PatternNode, ...]:
    """Parse ``"y = Op(a, $w, b?) ; z = Op2(y)"``; a malformed pattern is a rule bug."""
    nodes = []
    for statement in filter(str.strip, text.split(";")):
        found = _STATEMENT.match(statement)
        if not found:
            raise ValueError(f"bad pattern statement: {statement!r}")
        args = [Arg.parse(a) for a in found["args"].split(",") if a.strip()]
        outs = [Arg.parse(o) for o in found["outs"].split(",")]
        nodes.append(PatternNode(tuple(found["op"].split("|")), tuple(args), tuple(outs)))
    return tuple(nodes)


@dataclass(frozen=True)
class Match:
    """One occurrence of a rule's pattern: matched nodes (in pattern order) and bindings."""

    rule: Rule
    nodes: tuple[ModelNode, ...]
    binding: dict[str, Any] = field(compare=False, hash=False)

    def __getitem__(self, var: str) -> Any:
        """The tensor name (or tuple of names, for a ``*rest`` variable) bound to ``var``."""
        return self.binding[var]

    def get(self, var: str, default: Any = None) -> Any:
        value = self.binding.get(var, "")
        return value if value else default

    @cached_property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """Identity independent of how the pattern's roles were assigned."""
        return self.rule.name, tuple(sorted(n.name for n in self.nodes))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


class Rule(ABC):
    """A graph substitution: pattern, precondition, replacement (with its weight transform).

    Subclasses set ``name``, ``pattern`` and ``help``, and implement :meth:`check` (shapes
    and attributes the rewrite needs) and :meth:`rewrite` (which builds the replacement
    with a :class:`Builder`). The replacement must compute the same values for every
    tensor the match exposes (every output not internal to it).
    """

    name: ClassVar[str]
    pattern: ClassVar[str]
    help: ClassVar[str] = ""

    @cached_property
    def nodes(self) -> tuple[PatternNode, ...]:
        return parse_pattern(self.pattern)

    @cached_property
    def plans(self) -> tuple[list[int], ...]:
        """For each pattern node as the anchor, the order the matcher extends in."""
        return tuple(_plan(self.nodes, i) for i in range(len(self.nodes)))

    @cached_property
    def produced_vars(self) -> frozenset[str]:
        """Variables some pattern node outputs (the rest are the pattern's inputs)."""
        return frozenset(a.name for p in self.nodes for a in p.outputs)

    def check(self, g: ModelGraph, m: Match) -> bool:
        """Whether the rewrite is valid here (default: always, once the pattern matched)."""
        return True

    @abstractmethod
    def rewrite(self, g: ModelGraph, m: Match, b: Builder) -> None:
        """Emit the replacement through ``b``; outputs must reuse the exposed tensor names."""

    # ------------------------------------------------------------------ matching
    def matches(self, g: ModelGraph, near: Iterable[str] | None = None) -> list[Match]:
        """Every valid match in ``g``; with ``near``, only those using one of those nodes.

        A set of nodes that matches with several valid role assignments (two sibling convs as
        (a, b) and as (b, a)) counts once, in the valid assignment whose node names read
        smallest in pattern order: the same choice in any graph holding those nodes, so a recorded
        substitution replays to the same names.
        """
        if near is None:
            anchors: Iterable[tuple[int, ModelNode]] = (
                (0, n) for op in self.nodes[0].ops for n in g.by_op.get(op, ())
            )
        else:
            chosen = [g.nodes[n] for n in near if n in g.nodes]
            anchors = ((i, n) for i, p in enumerate(self.nodes) for n in chosen if n.op in p.ops)
        best: dict[tuple[str, tuple[str, ...]], Match] = {}
        for index, node in anchors:
            for match in _extend(self, g, index, node):
                held = best.get(match.key)
                if held is not None and held.names <= match.names:
                    continue
                # checked before it competes: an asymmetric rule (enlarge the smaller of two
                # kernels) holds in one assignment only, whichever reads smaller
                if _internal_ok(self, g, match) and self.check(g, match):
                    best[match.key] = match
        return list(best.values())

    def apply(self, g: ModelGraph, m: Match) -> ModelGraph:
        b = Builder(g, m)
        self.rewrite(g, m, b)
        return g.replace(m.names, b.replacement())


# ---------------------------------------------------------------------- the matcher
def _extend(rule: Rule, g: ModelGraph, anchor: int, node: ModelNode) -> Iterator[Match]:
    pattern = rule.nodes
    order = rule.plans[anchor]
    binding: dict[str, Any] = {}
    chosen: dict[int, ModelNode] = {}

    def bind(p: PatternNode, n: ModelNode) -> list[str] | None:
        """Bind ``p``'s variables to ``n``'s tensors; the names newly bound, or None."""
        new: list[str] = []

        def put(arg: Arg, value: Any) -> bool:
            if arg.const and not (value == "" or (isinstance(value, str) and g.is_const(value))):
                return False
            if arg.name in binding:
                return binding[arg.name] == value
            binding[arg.name] = value
            new.append(arg.name)
            return True

        ok = _bind_list(p.inputs, n.inputs, put) and _bind_list(p.outputs, n.outputs, put)
        if not ok:
            for name in new:
                del binding[name]
            return None
        return new

    def search(step: int) -> Iterator[Match]:
        if step == len(order):
            nodes = tuple(chosen[i] for i in range(len(pattern)))
            yield Match(rule, nodes, dict(binding))
            return
        index = order[step]
        p = pattern[index]
        candidates = [node] if step == 0 else _candidates(g, p, binding)
        used = {n.name for n in chosen.values()}
        for n in candidates:
            if n.op not in p.ops or n.name in used:
                continue
            new = bind(p, n)
            if new is None:
                continue
            chosen[index] = n
            yield from search(step + 1)
            del chosen[index]
            for name in new:
                del binding[name]

    yield from search(0)


def _bind_list(args: tuple[Arg, ...], values: tuple[str, ...], put: Callable) -> bool:
    for i, arg in enumerate(args):
        if arg.rest:
            return put(arg, tuple(values[i:]))
        value = values[i] if i < len(values) else ""
        if value == "" and not arg.optional:
            return False
        if not put(arg, value):
            return False
    return len(values) <= len(args) or all(v == "" for v in values[len(args) :])


def _plan(pattern: tuple[PatternNode, ...], anchor: int) -> list[int]:
    """Pattern nodes in an order where each shares a variable with an earlier one."""
    order = [anchor]
    known = {a.name for a in (*pattern[anchor].inputs, *pattern[anchor].outputs)}
    rest = [i for i in range(len(pattern)) if i != anchor]
    while rest:
        for i in rest:
            names = {a.name for a in (*pattern[i].inputs, *pattern[i].outputs) if not a.const}
            if names & known:
                order.append(i)
                known |= {a.name for a in (*pattern[i].inputs, *pattern[i].outputs)}
                rest.remove(i)
                break
        else:
            raise ValueError("pattern is not connected")  # a rule bug
    return order


def _candidates(g: ModelGraph, p: PatternNode, binding: dict[str, Any]) -> Iterable[ModelNode]:
    """Graph nodes that could match ``p`` given the bound variables: the producer of a
    bound output, else the readers of a bound input."""
    for arg in p.outputs:
        value = binding.get(arg.name)
        if arg.rest and value:
            value = value[0]
        if isinstance(value, str) and value:
            node = g.producer.get(value)
            return (node,) if node is not None else ()
    for arg in p.inputs:
        value = binding.get(arg.name)
        if arg.rest and value:
            value = value[0]
        if isinstance(value, str) and value and not arg.const:
            return g.consumers.get(value, ())
    return ()


def _internal_ok(rule: Rule, g: ModelGraph, m: Match) -> bool:
    """Tensors produced and read inside the match have no reader outside it, and a pattern
    input (a variable no pattern node produces) is not produced by a matched node: in
    ``a = Conv(x1) ; c = Conv(x2) ; y = Concat(a, c)`` ``x1`` must not be ``c``, else the
    replacement would read a tensor it removes."""
    produced = {t for n in m.nodes for t in n.outputs}
    read = {t for n in m.nodes for t in n.inputs}
    names = m.names
    if any(g.external_users(t, names) for t in produced & read):
        return False
    for var, value in m.binding.items():
        if var in rule.produced_vars:
            continue
        for t in value if isinstance(value, tuple) else (value,):
            if t in produced:
                return False
    return True


# ---------------------------------------------------------------------- building
class Builder:
    """Emits a replacement: new nodes (shapes inferred), derived weights, aliases."""

    def __init__(self, g: ModelGraph, m: Match) -> None:
        self.g = g
        self.m = m
        self._nodes: list[ModelNode] = []
        self._weights: dict[str, Weight] = {}
        self._tensors: dict[str, TensorInfo] = {}
        self._aliases: dict[str, str] = {}
        self._counter = 0

    def _fresh(self, kind: str) -> str:
        self._counter += 1
        return fresh_name(kind, self.m.rule.name, *self.m.names, str(self._counter))

    def shape(self, tensor: str) -> Dims:
        if tensor in self._weights:
            return self._weights[tensor].shape
        if tensor in self._tensors:
            return self._tensors[tensor].shape
        return self.g.shape(tensor)

    def array(self, tensor: str) -> np.ndarray:
        """The value of a weight (matched or derived here): call only inside a recipe."""
        if tensor in self._weights:
            return self._weights[tensor].array
        return self.g.weights[tensor].array

    def weight(self, shape: Dims, make: Callable[[], np.ndarray], dtype: str = "float32") -> str:
        """A derived weight computed by ``make`` when the graph is written out."""
        name = self._fresh("w")
        self._weights[name] = Weight.lazy(tuple(shape), make, dtype)
        return name

    def constant(self, array: np.ndarray) -> str:
        """A small constant known now (Split sizes, a shape vector)."""
        name = self._fresh("c")
        self._weights[name] = Weight.of(np.asarray(array))
        return name

    def op(
        self,
        op: str,
        inputs: Iterable[str],
        outputs: Iterable[str] | int = 1,
        **attrs: AttrValue | None,
    ) -> tuple[str, ...]:
        """Emit one node; ``outputs`` names the exposed tensors it produces, or an int asks
        for that many fresh ones. Returns the output names."""
        inputs = tuple(inputs)
        if isinstance(outputs, int):
            outputs = tuple(self._fresh("t") for _ in range(outputs))
        outputs = tuple(outputs)
        frozen = make_attrs(**attrs)
        node = ModelNode(self._fresh("n"), op, inputs, outputs, frozen)
        shapes = output_shapes(node, self.shape, self._value)
        for tensor, dims in zip(outputs, shapes, strict=True):
            self._tensors[tensor] = TensorInfo(dims, self._dtype(inputs))
        self._nodes.append(node)
        return outputs

    def alias(self, old: str, new: str) -> None:
        """``old`` is now computed by ``new`` (no node needed)."""
        self._aliases[old] = new

    def _value(self, tensor: str) -> tuple[int, ...] | None:
        weight = self._weights.get(tensor) or self.g.weights.get(tensor)
        return weight.small_value if weight is not None else None

    def _dtype(self, inputs: tuple[str, ...]) -> str:
        for t in inputs:
            if t and t not in self._weights and t not in self.g.weights:
                return self._tensors[t].dtype if t in self._tensors else self.g.dtype(t)
        return "float32"

    def replacement(self) -> Replacement:
        return Replacement(tuple(self._nodes), self._weights, self._tensors, self._aliases)
