"""The model IR: an immutable ONNX-level DAG with lazy weights, the graph every pass reads
and writes (docs/design.md, "IR").

:func:`fusionplan.ir.onnx_model.from_onnx` builds it once from an ONNX model (checked,
shapes inferred, constant subgraphs folded into weights); passes rewrite it; the planner
lowers it to its :class:`fusionplan.ir.graph.OpGraph` (:mod:`fusionplan.ir.lowering`), and
ONNX is written back only at the boundary (:func:`fusionplan.ir.onnx_model.to_onnx`).

A search builds thousands of candidate graphs (TASO's budget on ResNet-50 is 5,000), so a
rewrite must be cheap: :meth:`ModelGraph.replace` copies dicts of references, weights are
shared between graphs, and a weight a rule derives (a folded BN, a merged kernel) or the
importer folds is a :class:`Weight` whose array is computed only when it is read. Node and
weight names a rule creates are derived from the rule and the names it matched
(:func:`fresh_name`), so two search paths that reach the same graph name it the same way;
:meth:`ModelGraph.fingerprint`, a hash of the set of nodes, dedupes such graphs in the
searches.

Ops are named by their qualified type: ``"Conv"`` for the default ONNX domain,
``"com.microsoft.FusedConv"`` for onnxruntime's contrib ops (docs/design.md, "Graph
substitution").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from fusionplan.ir.shapes import Dims

AttrValue = Any  # int, float, str, a tuple of those, or a TensorAttr
MS_DOMAIN = "com.microsoft"
SMALL_CONST = 64
"""Int64 constants up to this many elements are part of an op's signature (Split sizes,
Reshape targets): they change what the op does, unlike a weight's values."""


def qualified(op_type: str, domain: str = "") -> str:
    """``"Conv"`` or ``"com.microsoft.FusedConv"``: one string names an op across domains."""
    return f"{domain}.{op_type}" if domain and domain != "ai.onnx" else op_type


def split_qualified(op: str) -> tuple[str, str]:
    """(domain, op_type) of a qualified op name."""
    domain, _, op_type = op.rpartition(".")
    return domain, op_type


def fresh_name(kind: str, *parts: str) -> str:
    """A deterministic new name from what it was made of: equal rewrites name equally."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=6).hexdigest()
    return f"{kind}_{digest}"


class Weight:
    """A constant tensor, materialised on first use (a derived weight is a recipe until then).

    ``shape`` and ``dtype`` are known without computing the array, so costs and shape checks
    never pay for a weight transform the search later discards.
    """

    __slots__ = ("_array", "_make", "dtype", "shape")

    def __init__(
        self,
        shape: Dims,
        dtype: str = "float32",
        *,
        array: np.ndarray | None = None,
        make: Callable[[], np.ndarray] | None = None,
    ) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self._array = array
        self._make = make

    @classmethod
    def of(cls, array: np.ndarray) -> Weight:
        return cls(array.shape, array.dtype.name, array=array)

    @classmethod
    def lazy(cls, shape: Dims, make: Callable[[], np.ndarray], dtype: str = "float32") -> Weight:
        return cls(shape, dtype, make=make)

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            assert self._make is not None
            value = np.asarray(self._make())
            if value.shape != self.shape:  # a rule's declared shape is part of its contract
                raise ValueError(f"weight recipe made shape {value.shape}, declared {self.shape}")
            self._array, self._make = value.astype(self.dtype, copy=False), None
        return self._array

    @property
    def small_value(self) -> tuple[int, ...] | None:
        """The data of a small int64 constant (part of a signature), else None."""
        if self.dtype != "int64" or int(np.prod(self.shape)) > SMALL_CONST:
            return None
        return tuple(int(v) for v in self.array.reshape(-1))


@dataclass(frozen=True)
class ModelNode:
    """One op. ``inputs`` may hold ``""`` for an omitted optional input, as in ONNX."""

    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # hashed once: the searches hash every node of every candidate (caches, dedupe)
        object.__setattr__(
            self, "_hash", hash((self.name, self.op, self.inputs, self.outputs, self.attrs))
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def op_type(self) -> str:
        """The ONNX op type without its domain (``"FusedConv"``)."""
        return self.op.rpartition(".")[2]

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    def with_attrs(self, **changes: AttrValue | None) -> tuple[tuple[str, AttrValue], ...]:
        """This node's attributes with some replaced (a value of None drops the attribute)."""
        merged = dict(self.attrs)
        for key, value in changes.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return tuple(sorted(merged.items()))


def make_attrs(**values: AttrValue | None) -> tuple[tuple[str, AttrValue], ...]:
    """Sorted attribute tuple from keywords; None values are left out."""
    return tuple(sorted((k, _freeze(v)) for k, v in values.items() if v is not None))


@dataclass(frozen=True)
class TensorAttr:
    """A tensor-valued attribute (ConstantOfShape's ``value``), held serialized so that a
    node stays hashable; its repr is a digest, so signatures and keys stay short."""

    data: bytes

    def __repr__(self) -> str:
        return f"tensor:{hashlib.blake2b(self.data, digest_size=6).hexdigest()}"


def _freeze(value: Any) -> AttrValue:
    if hasattr(value, "SerializeToString"):  # an onnx.TensorProto
        return TensorAttr(value.SerializeToString())
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass(frozen=True)
class TensorInfo:
    """Shape and element type of a run-time tensor (weights carry their own)."""

    shape: Dims
    dtype: str = "float32"


@dataclass(frozen=True)
class Replacement:
    """What a rule puts in place of the nodes it matched.

    ``aliases`` maps a removed tensor to the tensor that now carries its value (a
    cancellation such as ``Split(Concat(a, b)) -> a, b`` produces no node for it).
    """

    nodes: tuple[ModelNode, ...]
    weights: Mapping[str, Weight] = field(default_factory=dict)
    tensors: Mapping[str, TensorInfo] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)


class ModelGraph:
    """An immutable op DAG: nodes in topological order, tensor infos, weights, graph I/O."""

    def __init__(
        self,
        nodes: Iterable[ModelNode],
        tensors: Mapping[str, TensorInfo],
        weights: Mapping[str, Weight],
        inputs: Sequence[str],
        outputs: Sequence[str],
        *,
        opsets: Mapping[str, int] | None = None,
        name: str = "graph",
    ) -> None:
        self.nodes: dict[str, ModelNode] = {n.name: n for n in _topological(nodes)}
        self.tensors = dict(tensors)
        self.weights = dict(weights)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.opsets = dict(opsets or {"": 17})
        self.name = name

    # ---------------------------------------------------------------- queries
    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def producer(self) -> dict[str, ModelNode]:
        return {t: n for n in self.nodes.values() for t in n.outputs if t}

    @cached_property
    def consumers(self) -> dict[str, tuple[ModelNode, ...]]:
        users: dict[str, list[ModelNode]] = {}
        for node in self.nodes.values():
            for t in dict.fromkeys(node.inputs):
                if t:
                    users.setdefault(t, []).append(node)
        return {t: tuple(ns) for t, ns in users.items()}

    @cached_property
    def by_op(self) -> dict[str, tuple[ModelNode, ...]]:
        groups: dict[str, list[ModelNode]] = {}
        for node in self.nodes.values():
            groups.setdefault(node.op, []).append(node)
        return {op: tuple(ns) for op, ns in groups.items()}

    @cached_property
    def order(self) -> dict[str, int]:
        """ModelNode name -> position in topological order."""
        return {name: i for i, name in enumerate(self.nodes)}

    def shape(self, tensor: str) -> Dims:
        if tensor in self.weights:
            return self.weights[tensor].shape
        return self.tensors[tensor].shape

    def dtype(self, tensor: str) -> str:
        if tensor in self.weights:
            return self.weights[tensor].dtype
        return self.tensors[tensor].dtype

    def is_const(self, tensor: str) -> bool:
        return tensor in self.weights

    def external_users(self, tensor: str, inside: Iterable[str]) -> bool:
        """Whether ``tensor`` is read outside the node names ``inside`` or is a graph output."""
        names = set(inside)
        return tensor in self.outputs or any(
            n.name not in names for n in self.consumers.get(tensor, ())
        )

    @cached_property
    def fingerprint(self) -> int:
        """Identity of the graph for dedupe within a process: a hash of its set of nodes.

        Names are part of a node, and a rule names what it creates from what it matched, so
        the same rewrites applied in any order give equal nodes and an equal fingerprint.
        """
        return hash((sum(hash(n) for n in self.nodes.values()) & _MASK, self.outputs))

    # ---------------------------------------------------------------- rewriting
    def replace(self, removed: Iterable[str], replacement: Replacement) -> ModelGraph:
        """A new graph with the named nodes removed and ``replacement`` put in their place.

        Consumers of an aliased tensor read its alias; an alias of a graph output becomes an
        Identity (the model's interface keeps its names). Nodes left without a consumer are
        dropped, and so are the weights only they read.
        """
        gone = set(removed)
        alias = dict(replacement.aliases)
        extra: list[ModelNode] = []
        for old, new in alias.items():
            if old in self.outputs:
                extra.append(ModelNode(fresh_name("alias", old, new), "Identity", (new,), (old,)))
        alias = {k: v for k, v in alias.items() if k not in self.outputs}
        reached = False
        before: list[ModelNode] = []
        after: list[ModelNode] = []
        for node in self.nodes.values():
            if node.name in gone:
                reached = True  # kept nodes from the first removed one on go after the new ones
                continue
            if alias and any(t in alias for t in node.inputs):
                node = ModelNode(
                    node.name,
                    node.op,
                    tuple(_resolve(alias, t) for t in node.inputs),
                    node.outputs,
                    node.attrs,
                )
            (after if reached else before).append(node)
        # the replacement goes where the first removed node was: in order unless it reads a
        # tensor made later, which the sort below settles
        nodes = [*before, *replacement.nodes, *extra, *after]
        weights = {**self.weights, **replacement.weights}
        tensors = {**self.tensors, **replacement.tensors}
        nodes = _live(_topological(nodes), self.outputs)
        used = {t for n in nodes for t in n.inputs}
        weights = {k: w for k, w in weights.items() if k in used}
        produced = {t for n in nodes for t in n.outputs}
        keep = produced | set(self.inputs)
        tensors = {k: v for k, v in tensors.items() if k in keep}
        return ModelGraph(
            nodes, tensors, weights, self.inputs, self.outputs, opsets=self.opsets, name=self.name
        )

    def subgraph(self, names: Iterable[str]) -> ModelGraph:
        """The named nodes as a graph of their own: tensors entering from outside become
        inputs, tensors read outside (or graph outputs) become outputs."""
        keep = set(names)
        nodes = [n for n in self.nodes.values() if n.name in keep]
        produced = {t for n in nodes for t in n.outputs if t}
        inputs = list(
            dict.fromkeys(
                t
                for n in nodes
                for t in n.inputs
                if t and t not in produced and t not in self.weights
            )
        )
        outputs = [t for t in produced if self.external_users(t, keep)]
        used = {t for n in nodes for t in n.inputs}
        weights = {k: w for k, w in self.weights.items() if k in used}
        tensors = {t: self.tensors[t] for t in (*inputs, *produced)}
        return ModelGraph(
            nodes, tensors, weights, inputs, outputs, opsets=self.opsets, name=self.name
        )


_MASK = (1 << 64) - 1


def _resolve(alias: Mapping[str, str], tensor: str) -> str:
    while tensor in alias:
        tensor = alias[tensor]
    return tensor


def _live(nodes: list[ModelNode], outputs: Sequence[str]) -> list[ModelNode]:
    """Drop nodes none of whose outputs is read (dead code after a rewrite); ``nodes`` in
    topological order."""
    needed = set(outputs)
    keep: list[ModelNode] = []
    for node in reversed(nodes):
        if any(t in needed for t in node.outputs):
            keep.append(node)
            needed.update(t for t in node.inputs if t)
    keep.reverse()
    return keep


def _topological(nodes: Iterable[ModelNode]) -> list[ModelNode]:
    """Kahn's order, stable: nodes keep their given order wherever dependencies allow."""
    pending = list(nodes)
    producer = {t: n.name for n in pending for t in n.outputs if t}
    seen: set[str] = set()
    for node in pending:  # fast path: already ordered (every graph a rewrite did not reorder)
        if any(t in producer and t not in seen for t in node.inputs):
            break
        seen.update(node.outputs)
    else:
        return pending
    indegree: dict[str, int] = {}
    users: dict[str, list[int]] = {}
    for i, node in enumerate(pending):
        deps = {producer[t] for t in node.inputs if t in producer}
        indegree[node.name] = len(deps)
        for dep in deps:
            users.setdefault(dep, []).append(i)
    ready = [i for i, n in enumerate(pending) if indegree[n.name] == 0]
    ready.sort(reverse=True)
    order: list[ModelNode] = []
    while ready:
        i = ready.pop()
        node = pending[i]
        order.append(node)
        released = []
        for j in users.get(node.name, ()):
            name = pending[j].name
            indegree[name] -= 1
            if indegree[name] == 0:
                released.append(j)
        if released:
            ready.extend(released)
            ready.sort(reverse=True)
    if len(order) != len(pending):
        raise ValueError("a rewrite produced a cycle")  # a rule bug, not user input
    return order
