"""Model-level facts derived from a cost model: unfusable ops and lower bounds on traffic.

:class:`TrafficBound` is the one admissible bound of the project (docs/cost-model.md,
"Lower bounds"): the exact search's A* heuristic, and the bound every plan reports when no
search proved better.
"""

from __future__ import annotations

from collections.abc import Sequence

from accel_model.base import CostModel
from fusionplan.ir.graph import Group, OpGraph, bits


def unfusable_nodes(model: CostModel) -> Group:
    """Nodes whose singleton group does not fit: they run layer by layer, outside the search."""
    mask = 0
    for v in range(len(model.graph)):
        if not model.is_valid(1 << v):
            mask |= 1 << v
    return mask


def compulsory_traffic(
    graph: OpGraph, bytes_per_element: int = 1, weights: Sequence[int] | None = None
) -> int:
    """Bytes every plan must move: graph inputs, graph outputs and all weights, once each
    (``weights``: per op, those the cost model counts; default every node's)."""
    t = graph.tensors
    io = sum(t[i].size for i in set(graph.inputs) | set(graph.outputs))
    counted = [n.weights for n in graph.nodes] if weights is None else weights
    return bytes_per_element * (io + sum(counted))


class TrafficBound:
    """A lower bound on the DRAM bytes of running the ops not yet executed.

    *Atoms* are groups the bound takes as given (unfusable singletons; the frozen groups of a
    large-neighbourhood search): each costs exactly its own DRAM. Every other op is
    *searched*: it will run in some valid group G, which costs at least ``b * (io(G) +
    W(G))`` (BRR reads weights ``tiles >= 1`` times; a singleton's tiled cost never falls
    below its io + weights). For ``done`` (a down-set: the ops executed) the bound is

    * the DRAM of every atom still to run, plus the weights of every searched op still to run;
    * per tensor whose producer is a searched op still to run: its size if it must be
      written (a graph output, read by an atom, or read by a *separated* consumer: one whose
      hull with the producer, the ops on any path between them, contains an atom or needs at
      least the whole buffer by :meth:`CostModel.buffer_floor`, so no valid group holds
      both), plus its size once more if a separated consumer must read it back;
    * per other tensor (produced by an executed op or an atom, or a graph input): its size
      if a searched op still to run reads it.

    An op the cost model runs for free on its own (``CostModel.free_alone``, Optimus's
    unfused local layers) pays nothing when alone, so it contributes no weight, no write of
    its outputs while it is still to run, and no read: the terms above count only the other
    searched ops as producers and readers.

    Each term is paid by the group or atom that makes it disappear when it runs (the proof
    is in docs/cost-model.md), so the bound is admissible and consistent:
    ``bound(D) <= cost(step) + bound(D + step)`` for every step of a plan.
    """

    def __init__(self, cost_model: CostModel, atoms: Sequence[Group]) -> None:
        cm, g = cost_model, cost_model.graph
        self.all = g.all_nodes
        self.atoms = list(atoms)
        self.atom_of: dict[int, Group] = {v: a for a in self.atoms for v in bits(a)}
        self.fixed = sum(self.atoms)  # atoms are disjoint
        self.searched = self.all & ~self.fixed
        self.atom_dram = {a: cm.cost(a).dram for a in self.atoms}
        b, free_alone = cm.b, cm.free_alone
        self.paying = self.searched & ~free_alone  # searched ops that pay io + weights
        self.weight = [0 if free_alone >> v & 1 else b * w for v, w in enumerate(cm.node_weights)]
        hulls = cm.tensor_hulls
        outs, cons = g.graph_output_set, g.consumer_mask
        searched, fixed, paying = self.searched, self.fixed, self.paying
        # per used tensor: (bytes, producer bit (0: graph input), producer searched,
        # consumers, must be written, separated consumers)
        self.tensors: list[tuple[int, Group, bool, Group, bool, Group]] = []
        for ti, t in enumerate(g.tensors):
            if not (cons[ti] or ti in outs):
                continue
            p = t.producer
            prod = (1 << p) if p >= 0 else 0
            free = bool(prod & searched)
            sep = 0
            if prod & paying:
                for c, hull, too_big in hulls[ti]:
                    if paying >> c & 1 and (too_big or hull & fixed):
                        sep |= 1 << c
            written = bool(prod & paying) and (ti in outs or bool(cons[ti] & fixed) or bool(sep))
            self.tensors.append((b * t.size, prod, free, cons[ti] & ~free_alone, written, sep))
        self.separated_tensors = sum(1 for *_, sep in self.tensors if sep)

    def atoms_in(self, mask: Group) -> list[Group]:
        """The atoms whose nodes make up ``mask`` (a union of whole atoms)."""
        out = []
        while mask:
            a = self.atom_of[(mask & -mask).bit_length() - 1]
            out.append(a)
            mask &= ~a
        return out

    def atoms_dram(self, mask: Group) -> int:
        return sum(self.atom_dram[a] for a in self.atoms_in(mask))

    def remaining(self, done: Group) -> int:
        """The bound on the DRAM bytes of running every op outside ``done``."""
        rest = self.all & ~done
        todo = rest & self.searched
        weight = self.weight
        total = self.atoms_dram(rest & self.fixed) + sum(weight[v] for v in bits(todo))
        for size, prod, free, cons, written, sep in self.tensors:
            if free and prod & rest:  # its producer's group is still to run
                if written:
                    total += size
                if sep:
                    total += size  # read back by a separated consumer's group
            elif cons & todo:
                total += size  # read from DRAM by a searched group still to run
        return total

    def total(self) -> int:
        """The bound on a whole plan's DRAM bytes."""
        return self.remaining(0)


def plan_lower_bound(cost_model: CostModel) -> int:
    """:class:`TrafficBound` of the whole model, unfusable ops as atoms."""
    unf = unfusable_nodes(cost_model)
    return TrafficBound(cost_model, [1 << v for v in bits(unf)]).total()
