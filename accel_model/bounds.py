"""Model-level facts derived from a cost model: unfusable ops and lower bounds on traffic.

:class:`TrafficBound` is the one admissible bound of the project (docs/cost-model.md,
"Lower bounds"): the exact search's A* heuristic, and the bound every plan reports when no
search proved better.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from weakref import WeakKeyDictionary

from accel_model.base import CostModel
from fusionplan.ir.graph import Group, OpGraph, bits, hull_between, mask_of


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

    With ``chain_budget`` > 0 the :class:`ChainRelaxation` is added (its terms borrow the
    read terms above, "Chains" in docs/cost-model.md proves the sum consistent), built
    within that much work (about one unit per buffer floor: the same terms on every machine).
    """

    def __init__(
        self, cost_model: CostModel, atoms: Sequence[Group], chain_budget: int = 0
    ) -> None:
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
        self.chains = chain_relaxation(cm, self, chain_budget) if chain_budget > 0 else None

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
        if self.chains is not None:
            total += self.chains.remaining(done)
        return total

    def total(self) -> int:
        """The bound on a whole plan's DRAM bytes."""
        return self.remaining(0)


CHAIN_WORK_PER_OP = 96
"""The chain relaxation's work budget per op of the graph, in units of a buffer floor over
eight ops (GoogLeNet needs about 46 per op, Inception-v3 about 40, DenseNet-121 at 128 KB
BRR about 90; the largest take about a second)."""


def chain_budget(graph: OpGraph) -> int:
    """The chain relaxation's work budget on ``graph``."""
    return CHAIN_WORK_PER_OP * len(graph)


def plan_lower_bound(cost_model: CostModel) -> int:
    """:class:`TrafficBound` of the whole model with its chain relaxation, unfusable ops as
    atoms."""
    unf = unfusable_nodes(cost_model)
    atoms = [1 << v for v in bits(unf)]
    return TrafficBound(cost_model, atoms, chain_budget(cost_model.graph)).total()


_CHAINS: WeakKeyDictionary[CostModel, dict[tuple[Group, int], ChainRelaxation]] = (
    WeakKeyDictionary()
)  # per cost model: (atoms' ops, budget) -> relaxation


def chain_relaxation(cm: CostModel, bound: TrafficBound, budget: int) -> ChainRelaxation:
    """The :class:`ChainRelaxation` of ``bound``, built once per cost model, atoms and
    budget (auto's static bound, its second exact run and ``certify`` all ask for it; it
    depends on the atoms only through the ops they cover)."""
    built = _CHAINS.setdefault(cm, {})
    key = (bound.fixed, budget)
    hit = built.get(key)
    if hit is None:
        hit = built[key] = ChainRelaxation(cm, bound, budget)
    return hit


class ChainRelaxation:
    """Where buffer-forced cuts and weight re-streaming fall along chains of ops, as an extra
    term of :class:`TrafficBound` (docs/cost-model.md, "Chains").

    *Chains* are paths along edges between the searched ops that pay, heaviest first, no
    two carrying the same tensor; each op's weights are *owned* by the first chain through
    it. In any plan each chain meets each group in a contiguous run (groups are convex), and
    the runs left to execute from a state are a suffix of the chain. A run costs nothing
    beyond the traffic bound's terms unless its hull cannot fit (no group holds it) or every
    group holding it reads its weights more than once (:meth:`CostModel.weight_reads_floor`:
    the weights the run owns, per read beyond the first); a cut between two consecutive ops
    writes the tensor between them and reads it back, beyond what the traffic bound already
    charges for it. Per chain, a DP over where the cuts fall gives the least cost of every
    suffix; the relaxation is their sum over the chains' remaining suffixes. Runs longer
    than ``MAX_RUN`` ops are not tested (possible; read as often as their first ops), and
    once the work budget is spent the remaining chains count 0. ``work`` is what building
    it took, in units of a buffer floor.
    """

    MAX_RUN = 16

    def __init__(self, cost_model: CostModel, bound: TrafficBound, budget: int) -> None:
        cm, g = cost_model, cost_model.graph
        paying, fixed = bound.paying, bound.fixed
        # per edge between paying ops: what a cut there adds to the traffic bound's terms,
        # and the tensors it carries (a cut writes and reads back one of them)
        cut_cost: dict[tuple[int, int], int] = {}
        carried: dict[tuple[int, int], list[int]] = {}
        for ti, (size, prod, free, cons, written, sep) in enumerate(bound.tensors):
            if not (free and prod & paying):
                continue
            p = prod.bit_length() - 1
            extra = 0 if sep else size if written else 2 * size  # separated: charged already
            for c in bits(cons & paying):
                cut_cost[(p, c)] = max(cut_cost.get((p, c), 0), extra)
                carried.setdefault((p, c), []).append(ti)
        scan = max(len(g.edges) // 32, 1)  # the work of one search for a chain
        self.work = 0
        self.suffixes: list[tuple[Group, list[int]]] = []
        for path, owned in heaviest_chains(g.pred_mask, paying, bound.weight, cut_cost, carried):
            self.work += scan
            cuts = [cut_cost[(path[j], path[j + 1])] for j in range(len(path) - 1)]
            f = self._suffix_costs(cm, path, cuts, owned, fixed, budget)
            if f is None:
                break  # the budget is spent: this chain and the rest count 0
            self.suffixes.append((mask_of(path), f))
            if self.work >= budget:
                break

    def _suffix_costs(
        self,
        cm: CostModel,
        path: list[int],
        cuts: list[int],
        owned: list[int],
        fixed: Group,
        budget: int,
    ) -> list[int] | None:
        """``f[i]``: the least extra cost of running ``path[i:]`` (``f[len(path)]`` = 0);
        None once the work passes the budget. A run longer than ``MAX_RUN`` is not tested
        for its floor: it is taken as possible unless its hull holds an atom, its weights
        read as often as its first ``MAX_RUN`` ops' (it holds them)."""
        graph, n, beta = cm.graph, len(path), cm.beta
        cuts = [*cuts, 0]  # no cut after the chain's last op
        f = [0] * (n + 1)
        for i in range(n - 1, -1, -1):
            best, reads, run_weight = None, 1, 0
            for j in range(i, n):
                run_weight += owned[j]
                hull = hull_between(graph, path[i], path[j])
                if hull & fixed:
                    break  # no group holds an atom's op: nor any longer run
                if j < i + self.MAX_RUN:
                    floor = cm.buffer_floor(hull)
                    per_floor = 1 + hull.bit_count() // 8  # a floor reads every op of the hull
                    self.work += per_floor
                    if floor >= beta:
                        break  # no group holds this run, nor a longer one (it holds this one)
                    if run_weight:  # a longer run holds this one: at least as many reads
                        more, floors = cm.weight_reads_floor(hull, floor)
                        reads, self.work = max(reads, more), self.work + floors * per_floor
                c = (reads - 1) * run_weight + cuts[j] + f[j + 1]
                if best is None or c < best:
                    best = c
            assert best is not None, "a paying op always runs alone"
            f[i] = best
            if self.work > budget:
                return None
        return f

    def remaining(self, done: Group) -> int:
        """The chains' share of the bound once ``done`` (a down-set) has run."""
        return sum(f[(done & mask).bit_count()] for mask, f in self.suffixes)


def heaviest_chains(
    pred: Sequence[Group],
    nodes: Group,
    weight: Sequence[int],
    edge: dict[tuple[int, int], int],
    carried: dict[tuple[int, int], list[int]],
) -> Iterator[tuple[list[int], list[int]]]:
    """Paths of ``nodes`` along edges (two ops or more), each with the weights it *owns* per
    op: taken one at a time as the path of the largest owned weights plus edge costs, where
    an edge whose tensors an earlier path carries is not used again and an op's weight
    belongs to the first path through it (ties: the lowest labels). Stops when no path of
    two ops or more is worth > 0."""
    left = list(weight)
    used: set[int] = set()
    while True:
        best: dict[int, int] = {}
        prev: dict[int, int] = {}
        for v in bits(nodes):
            value, back = left[v], -1
            for u in bits(pred[v] & nodes):
                if any(t in used for t in carried.get((u, v), ())):
                    continue
                c = best[u] + left[v] + edge.get((u, v), 0)
                if c > value:
                    value, back = c, u
            best[v], prev[v] = value, back
        ends = [v for v in best if prev[v] >= 0 and best[v] > 0]
        if not ends:
            return
        v = max(ends, key=lambda x: (best[x], -x))
        path = [v]
        while prev[path[-1]] >= 0:
            path.append(prev[path[-1]])
        path.reverse()
        owned = [left[u] for u in path]
        for u in path:
            left[u] = 0
        for a, b in pairwise(path):
            used.update(carried.get((a, b), ()))
        yield path, owned
