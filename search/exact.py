"""Exact optimum: A* (a memoised DP) over the down-sets of the op graph (docs/design.md, "Search").

``make_search("exact", time_limit_s=60, max_downsets=200_000)`` minimises total DRAM
(the sum of group ``F_D``, unfusable singletons included) over *all* valid plans.

The model
---------
A *down-set* D is a set of nodes closed under predecessors: the ops already executed. The
remaining nodes ``R = V - D`` are closed under successors. From D the next group G may be
any **connected down-set of R** (a weakly connected node set with every predecessor of its
nodes in ``D | G``, so ``D | G`` is again a down-set) made of fusable nodes that fits the
buffer; an unfusable node is only ever a singleton. With ``cost(G)`` the group's ``F_D``,

    f(D) = min over next groups G of cost(G) + f(D | G),      f(V) = 0,

and ``f(empty)`` is the optimum. The search runs A* from the empty set (``g(D)`` = cost of
the best known way to execute D) with the admissible and consistent heuristic ``h`` below,
memoising states by their bitmask.

Exactness. (1) *Every DP path is a valid plan*: each step adds a connected group that fits
the buffer, and the order the steps happen in is a topological order of the quotient graph
(a group's predecessors are all in earlier groups), so the quotient is acyclic. (2) *Every
valid plan is a DP path*: its quotient graph is acyclic, so it has a topological order
G1..Gk; each prefix union ``G1 | ... | Gi`` is a down-set (an edge into Gi comes from Gi
itself or an earlier group), and G(i+1) is connected, valid and a down-set of what
remains, i.e. a transition. (3) Costs are per group, so the total does not depend on the
order. Hence ``f(empty)`` is the optimum over valid plans.

No canonical order is imposed on the next group (e.g. "it contains the lowest unexecuted
node" is *wrong*: that node's group may need an op outside D that another, later-labelled
group produces). Redundant orders of independent groups meet in the same memoised state,
so they cost transitions, not states. Two exact reductions are used instead:

* An unfusable node (more generally an *atom*: an unfusable singleton, or a group frozen by
  the large-neighbourhood search) whose predecessors are all executed is executed at once
  (absorbed into the transition that made it ready). Exact: it is one group in every plan
  of the search space; moving a ready group to the front of a topological order keeps it
  topological (nothing left precedes it) and does not change the sum.
* Candidate groups are grown from a ready node by *closure steps*: add a neighbour x of S
  in R together with every ancestor of x in R (they must all be in the group for it to be a
  down-set of R). Every intermediate set is a connected down-set of R, and every connected
  down-set G of R is reached: start from G's lowest node (ready: its producers are not in
  G, so they are in D), then repeatedly add a neighbour in G (G, a down-set of R, contains
  its closure; G is connected, so a neighbour exists until the set is G). Growth stops at
  a set that does not fit, which is exact
  because for LBDF and BRR the buffer is **monotone over down-sets of R**: for down-sets
  S ⊆ G of R, ``F_beta(S) <= F_beta(G)`` (and BRR's footprint likewise):

  - LBDF: a node v of S has the same in-group producers in S and in G (its predecessors in
    R are all in S), hence the same start and row delay. Paper profile: the same skip term,
    weight and line-buffer terms that do not depend on the group, and G only adds nodes
    with non-negative terms. Default profile: each tensor's ring is a max over its in-group
    readers minus an arrival that is its producer's delay or, for an input from outside
    (made outside R, so outside G too), a min over its readers; G only adds readers and
    rings, and a sink's row becomes a ring of at least as many rows (docs/cost-model.md,
    "LBDF").
  - BRR (checked at start: every tensor has >= 1 row, else no pruning): the rows kept per
    node, ``h(v) = 1`` for a last node and
    ``max over in-group consumers c of min(ceil((h(c)-1)*S_c + K_c), H_out(v))``
    otherwise, are non-decreasing in the group (by induction in reverse topological order:
    more consumers, each term non-decreasing in h(c), and each term >= 1 because
    ``K >= 1`` and ``H_out >= 1``); the external inputs of a down-set of R are produced in
    D or are graph inputs, so they stay external in G, with rows (a max over in-group
    consumers) non-decreasing likewise, and G only adds terms. Validity
    (``footprint < beta``) is therefore monotone. Channel slices and in-place ops keep it
    per parity (an op's slicing depends only on its in-group ancestors, which S and G
    share; G can only take an in-place op's sole reader away), and validity is "some parity
    fits" (docs/cost-model.md, "Channel slices"). Optimus's ``no-local-start`` is monotone
    too: a source of S is a source of G.

  A cost model declares this property with :meth:`CostModel.monotone_over_downsets`
  (LBDF always, BRR when every tensor has >= 1 row); for a scheme that does not, growth
  does not stop at a set that does not fit (still exact, only slower).

Heuristic ``h(D)`` (bytes): :class:`accel_model.bounds.TrafficBound` (docs/cost-model.md,
"Lower bounds"): the exact DRAM of the atoms still to run (unfusable ops; the frozen groups
of a large-neighbourhood window), the weights of the searched ops still to run, and each
tensor's read and write where they are forced (a graph input or output, a tensor between
an atom and a searched op, or between two ops that no valid group can hold together). Each
term is paid by the step that removes it, so h is admissible and consistent
(``h(D) <= cost(G) + h(D | G)``): a state's g is final when it is expanded and ``min f``
over the open states is a **lower bound** on the optimum at any time.

Anytime behaviour. A greedy dive (repeatedly take the transition that adds the least
unavoidable traffic per node) gives an upper bound before A* starts; A* prunes states
whose f reaches it and stops when the smallest open f does (then the best plan is proven
optimal). If the time limit (``time_limit_s``, the whole run) is reached first, the best
complete plan found (dives from the most promising open states, or at worst the all-
singleton plan, always valid) is returned with ``optimal=False`` and the lower bound.

Size and refusal. With N the number of down-sets of the graph, there are at most N
states, and at most N transitions out of a state (``D | G`` is a down-set), so at most
N^2 candidate groups in all, each costed once per state (memoised in the cost model).
Before searching, N is counted (a transfer-matrix count along the topological order,
stopped past ``max_downsets``); above the limit :class:`~fusionplan.ir.errors.ConfigError`
says so in one line. The 12 zoo models have 38-547 down-sets (chains with skips have n+1;
only parallel branches multiply them) and are solved to optimality in under 0.3 s at
128-256 KB and under 5 s up to 16 MB (ResNet-152, 2 CPU cores); a DAG of k parallel
chains of length L has about ``(L+1)^k``.

Budget. The DP does not count its own enumeration as proposals: it proposes exactly one
plan, its answer, through :meth:`FusionProblem.evaluate` (``problem.proposed`` goes up by 1,
whatever the budget, which must leave >= 1 plan). The splitter never splits it (every group
fits). ``SearchResult.exact`` (an :class:`ExactBound`) holds ``optimal``,
``lower_bound_bytes``, ``gap`` (relative gap of the returned plan to the bound), ``states``
(expanded), ``states_generated`` (pushed by A*), ``groups_enumerated`` (candidate sets
visited and costed), ``transitions``, ``downsets`` (N), ``pruned_by_buffer`` (monotone
pruning used), ``status`` and the config.
Ties between optimal plans are broken deterministically (search order), not by MBU.

Other objectives. Under an energy or latency objective (accel_model/objectives.py) the same
states and transitions are searched by :func:`solve_objective`, a lazy A* (below).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from accel_model.bounds import TrafficBound, chain_budget
from accel_model.objectives import Objective, check_additive
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, bits
from fusionplan.planning.result import ExactBound, ObjectiveBound, SearchResult
from fusionplan.search.base import SEARCHES, Progress, build_config, check_start
from fusionplan.search.effort import (
    EXACT_UNITS,
    STOP_CLOCK,
    STOP_OPTIMAL,
    STOP_WORK,
    check_effort,
    check_time_cap,
    check_units,
    clock_end,
    run_units,
)
from fusionplan.search.problem import FusionProblem
from fusionplan.search.result import Recorder

if TYPE_CHECKING:
    from accel_model.base import CostModel
    from fusionplan.ir.graph import OpGraph

FLOOR_UNITS = 4  # work units per unit of the chain relaxation (a buffer floor, about a visit)

# (group of fusable nodes, unfusable nodes absorbed after it, next state, DRAM bytes)
Transition = tuple[Group, Group, Group, int]


@dataclass(frozen=True)
class ExactConfig:
    """Settings of :class:`ExactSearch` (``make_search("exact", **fields)``)."""

    effort: float = 1.0  # work of the whole run, in units of EXACT_UNITS (search/effort.py)
    time_limit_s: float | None = None  # wall-clock safety cap; None: none
    max_downsets: int = 200_000  # refuse graphs with more down-sets than this
    greedy_dive: bool = True  # greedy upper bound before A* (prunes; anytime answer)
    dive_share: float = 0.2  # at most this share of the work for that first dive
    work: int | None = None  # the run's units, overriding effort (auto sets it)
    chain_bound: bool = False  # add the chain relaxation to A*'s bound (accel_model/bounds.py)

    def __post_init__(self) -> None:
        check_effort("exact option", self.effort)
        check_time_cap("exact option", self.time_limit_s)
        m = self.max_downsets
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise ConfigError(f"exact option max_downsets must be an integer >= 1, got {m!r}")
        if not isinstance(self.greedy_dive, bool):
            raise ConfigError(
                f"exact option greedy_dive must be true or false, got {self.greedy_dive!r}"
            )
        s = self.dive_share
        if isinstance(s, bool) or not isinstance(s, int | float) or not 0 <= s <= 1:
            raise ConfigError(f"exact option dive_share must be in [0, 1], got {s!r}")
        check_units("exact option", "work", self.work, optional=True)
        if not isinstance(self.chain_bound, bool):
            raise ConfigError(
                f"exact option chain_bound must be true or false, got {self.chain_bound!r}"
            )

    @property
    def total_work(self) -> int:
        return run_units(self.effort, self.work, EXACT_UNITS)


# ------------------------------------------------------------------------ tractability
def _outside_preds(pred: tuple[Group, ...], group: Group) -> Group:
    """Producers of ``group``'s nodes outside it."""
    out = 0
    for v in bits(group):
        out |= pred[v]
    return out & ~group


def count_downsets(
    graph: OpGraph, limit: int, work_limit: int = 2_000_000, region: Group | None = None
) -> tuple[int, bool]:
    """Number of down-sets of ``graph`` (the empty set and the whole graph included), or of
    the subgraph that ``region`` induces.

    Sweeps nodes in label order keeping, per distinct choice on the *frontier* (decided
    nodes with a consumer still to decide), how many down-sets of the prefix make it. The
    prefix ``0..k`` is itself a down-set, so its count never exceeds the whole graph's:
    the sweep stops once the count passes ``limit`` or the work passes ``work_limit``.
    Returns ``(count, exact)``; when ``exact`` is False the graph has more than ``count``.
    """
    region = graph.all_nodes if region is None else region
    pred, succ = graph.pred_mask, graph.succ_mask
    last = {v: (succ[v] & region).bit_length() - 1 for v in bits(region)}  # -1: no consumer
    states: dict[Group, int] = {0: 1}
    work = 0
    for v in bits(region):
        new: dict[Group, int] = {}
        pv, bit = pred[v] & region, 1 << v
        for chosen, c in states.items():
            new[chosen] = new.get(chosen, 0) + c  # v left out
            if not pv & ~chosen:  # v taken: all its producers taken
                new[chosen | bit] = new.get(chosen | bit, 0) + c
        done = 0 if last[v] >= 0 else bit
        for u in bits(pv):
            if last[u] == v:
                done |= 1 << u
        if done:
            merged: dict[Group, int] = {}
            for chosen, c in new.items():
                k = chosen & ~done
                merged[k] = merged.get(k, 0) + c
            new = merged
        states = new
        work += len(states)
        total = sum(states.values())
        if total > limit or work > work_limit:
            return total, False
    return sum(states.values()), True


# ------------------------------------------------------------------------ the solver
class _Timeout(Exception):
    pass


class ExactSolver:
    """A* over down-sets for one cost model; see the module docstring.

    ``unfusable`` nodes run alone; ``fixed`` groups (disjoint sets of fusable nodes, the
    large-neighbourhood search's frozen part) run as they are. Both are *atoms*: never
    searched, executed as soon as every producer they need has run. ``chains`` adds the
    chain relaxation to the heuristic (still consistent; its floors count as work).
    """

    def __init__(
        self,
        cost_model: CostModel,
        unfusable: Group,
        fixed: Sequence[Group] = (),
        chains: bool = False,
    ) -> None:
        cm = self.cm = cost_model
        g = self.graph = cm.graph
        self.all = g.all_nodes
        self.pred, self.succ, self.nbr = g.pred_mask, g.succ_mask, g.neighbour_mask
        bound = self.bound = TrafficBound(
            cm,
            [1 << u for u in bits(unfusable)] + [grp for grp in fixed if grp],
            chain_budget(g) if chains else 0,
        )
        self.atom_of, self.atom_dram = bound.atom_of, bound.atom_dram
        self.atoms_in, self.atoms_dram = bound.atoms_in, bound.atoms_dram
        self.unf = bound.fixed  # nodes the search never groups
        self.fus = bound.searched
        self.atom_pred = {a: _outside_preds(self.pred, a) for a in bound.atoms}
        self.anc = g.ancestor_mask
        self.prune = cm.monotone_over_downsets()  # module docstring: why pruning is exact
        self._h: dict[Group, int] = {}
        self._expanded: dict[Group, list[Transition]] = {}
        # a state's bound reads every op and tensor, and every chain's suffix
        chained = len(bound.chains.suffixes) if bound.chains else 0
        self._bound_work = max((len(g) + chained) // 8, 1)
        # this solver's own units: groups visited, states bounded, the chains' floors (work)
        self._units = FLOOR_UNITS * bound.chains.work if bound.chains else 0
        self._cost_work0 = cm.stats.work  # the cost model's count when this solver began
        self.work_end = math.inf  # stop once ``work`` passes this
        self.clock_end = math.inf  # the wall-clock safety cap (perf_counter reading)
        self.stopped_by: str | None = None  # STOP_WORK or STOP_CLOCK once a limit is hit
        self.states = 0  # complete expansions
        self.groups_enumerated = 0  # candidate sets visited (costed)
        self.transitions = 0

    # -- work -------------------------------------------------------------------------
    @property
    def work(self) -> int:
        """Units spent (search/effort.py): one per candidate group visited, the cost
        model's ``work_per_op`` per op of each group costed from scratch, and ops / 8 per
        new state bounded (that is where the time goes)."""
        return self._units + self.cm.stats.work - self._cost_work0

    def steps_to(
        self, state: Group, start: Group, parent: dict[Group, tuple[Group, Group, Group]]
    ) -> list[Group]:
        """The groups (absorbed atoms included) of the path A* recorded in ``parent``
        (state -> (previous state, group, atoms absorbed)) from ``start`` to ``state``."""
        steps: list[Group] = []
        while state != start:
            prev, group, absorbed = parent[state]
            steps.extend(reversed(self.atoms_in(absorbed)))
            steps.append(group)
            state = prev
        return steps[::-1]

    def charge(self, units: int) -> None:
        """Count ``units`` of work done outside the enumeration (a schedule built to price
        a group under another objective, :func:`solve_objective`)."""
        self._units += units

    def spend(self) -> bool:
        """Count a visit; True when the run must stop (its units are spent, checked every
        16 units, or, every 256, the clock is past the safety cap)."""
        self._units += 1
        if self._units & 15:
            return False  # the limits are read every 16 units (still the same every run)
        if self.work > self.work_end:
            self.stopped_by = STOP_WORK
            return True
        if not self._units & 255 and time.perf_counter() > self.clock_end:
            self.stopped_by = STOP_CLOCK
            return True
        return False

    def exhausted(self) -> bool:
        """Whether the current limit is reached, without spending."""
        if self.work >= self.work_end:
            self.stopped_by = STOP_WORK
            return True
        if time.perf_counter() > self.clock_end:
            self.stopped_by = STOP_CLOCK
            return True
        return False

    # -- bounds -----------------------------------------------------------------------
    def h(self, done: Group) -> int:
        """Admissible, consistent lower bound on the DRAM of running ``all - done``."""
        hit = self._h.get(done)
        if hit is None:
            hit = self._h[done] = self.bound.remaining(done)
            self._units += self._bound_work
        return hit

    def absorb(self, done: Group, new: Group) -> Group:
        """Atoms that become ready (transitively) once ``new`` is executed."""
        succ, unf, atom_of, atom_pred = self.succ, self.unf, self.atom_of, self.atom_pred
        if not unf:
            return 0  # no atoms (everything fits alone): most branchy BRR cases
        absorbed = 0
        while new:
            cand = 0
            for v in bits(new):
                cand |= succ[v]
            cand &= unf & ~done
            new = 0
            while cand:
                a = atom_of[(cand & -cand).bit_length() - 1]
                cand &= ~a
                if not atom_pred[a] & ~done:
                    done |= a
                    new |= a
            absorbed |= new
        return absorbed

    def start_state(self) -> tuple[Group, int]:
        """The initial state (ready atoms executed) and its DRAM."""
        ready = 0
        for a, preds in self.atom_pred.items():
            if not preds:
                ready |= a
        state = ready | self.absorb(ready, ready)
        return state, self.atoms_dram(state)

    # -- transitions ------------------------------------------------------------------
    def expand(self, done: Group, dive: bool = False) -> list[Transition]:
        """Every connected, valid down-set of the remaining graph as a transition.

        A* calls it once per state; it raises :class:`_Timeout` when the work is spent
        (each candidate visited is one unit, :meth:`spend`). A greedy
        dive (``dive``) gets the transitions found so far instead (the ready singletons
        come first), and a complete list is kept for A* to take over (A*'s own are not
        kept: it never asks twice).
        """
        hit = self._expanded.get(done) if dive else self._expanded.pop(done, None)
        if hit is not None:
            return hit
        rest = self.all & ~done
        fus_rest = rest & self.fus
        pred, anc, nbr, unf = self.pred, self.anc, self.nbr, self.unf
        cost, prune, atoms_dram = self.cm.cost, self.prune, self.atoms_dram
        out: list[Transition] = []
        ready = [v for v in bits(fus_rest) if not pred[v] & rest]
        stack = [(1 << v, nbr[v]) for v in reversed(ready)]
        seen: set[Group] = set()
        complete, visited = True, 0
        while stack:
            group, near = stack.pop()
            if group in seen:
                continue
            seen.add(group)
            visited += 1
            if self.spend():
                if not dive:
                    self.groups_enumerated += visited
                    raise _Timeout
                complete = False
                break
            c = cost(group)
            if c.valid:
                absorbed = self.absorb(done | group, group)
                dram = c.dram + atoms_dram(absorbed) if absorbed else c.dram
                out.append((group, absorbed, done | group | absorbed, dram))
            elif prune:
                continue
            ext = near & fus_rest & ~group
            while ext:
                low = ext & -ext
                ext ^= low
                x = low.bit_length() - 1
                closure = (anc[x] | low) & rest
                if closure & unf:
                    continue  # x needs an unexecuted unfusable op inside its group
                bigger = group | closure
                if bigger in seen:
                    continue
                grow = near
                for v in bits(closure & ~group):
                    grow |= nbr[v]
                stack.append((bigger, grow))
        self.groups_enumerated += visited
        if complete:
            self.states += 1
            self.transitions += len(out)
            if dive:
                self._expanded[done] = out
        return out

    def dive(self, state: Group, g: int, path: list[Group]) -> tuple[int, list[Group]]:
        """Greedy completion of ``path`` (which executes ``state`` at DRAM ``g``): take the
        transition with the least traffic beyond ``h`` per node added (larger first on
        ties). Once the work is spent it finishes with singletons (always valid)."""
        path = list(path)
        h = self.h
        while state != self.all:
            if self.exhausted():
                return self._finish_singletons(state, g, path)
            options = self.expand(state, dive=True)
            h0 = h(state)
            best = None
            for group, absorbed, nxt, dram in options:
                excess = dram + h(nxt) - h0
                size = (nxt & ~state).bit_count()
                key = (excess / size, -size)
                if best is None or key < best[0]:
                    best = (key, group, absorbed, nxt, dram)
            assert best is not None, "a ready fusable op always fits alone"
            _, group, absorbed, state, dram = best
            g += dram
            path.append(group)
            path.extend(self.atoms_in(absorbed))
        return g, path

    def _finish_singletons(
        self, state: Group, g: int, path: list[Group]
    ) -> tuple[int, list[Group]]:
        cost, rest = self.cm.cost, self.all & ~state
        for v in bits(rest & self.fus):
            path.append(1 << v)
            g += cost(1 << v).dram
        atoms = self.atoms_in(rest & self.unf)
        path.extend(atoms)
        return g + sum(self.atom_dram[a] for a in atoms), path


@dataclass
class ExactOutcome:
    groups: list[Group]  # every group of the plan, unfusable singletons included
    dram: int
    lower_bound: int
    optimal: bool
    states: int  # expanded completely (by A* or a greedy dive)
    states_generated: int
    stopped_by: str = STOP_OPTIMAL  # or STOP_WORK / STOP_CLOCK (search/effort.py)


@dataclass(frozen=True)
class SolveLimits:
    """How much work one :func:`solve` may do, in units counted from its start: the first
    greedy dive stops at ``dive``, A* at ``search``, the dives after A* stops at ``total``
    (the 5 % or so between them). ``clock_end`` is the wall-clock safety cap."""

    dive: int
    search: int
    total: int
    clock_end: float = math.inf

    @classmethod
    def of(cls, work: int, dive_share: float = 0.0, clock_end: float = math.inf) -> SolveLimits:
        """``work`` units: ``dive_share`` of them for the first dive, 95 % in all for A*."""
        search = max(1, int(0.95 * work))
        return cls(int(dive_share * work), search, max(work, search), clock_end)


def solve(
    solver: ExactSolver,
    limits: SolveLimits,
    incumbent: tuple[int, list[Group]] | None = None,
) -> ExactOutcome:
    """A* from the start state within ``limits``; see the module docstring. ``incumbent``
    ``(dram, groups)``, a known valid plan (atoms included), is the first upper bound: A*
    then proves it optimal or finds better."""
    base = solver.work
    solver.clock_end = limits.clock_end
    solver.stopped_by = None
    start, g0 = solver.start_state()
    h = solver.h
    # upper bound: the all-singleton plan, then a greedy dive
    start_path = solver.atoms_in(start)
    ub, ub_path = solver._finish_singletons(start, g0, list(start_path))
    if limits.dive > 0:
        solver.work_end = base + limits.dive
        d_ub, d_path = solver.dive(start, g0, start_path)
        if d_ub < ub:
            ub, ub_path = d_ub, d_path
    if incumbent is not None and incumbent[0] < ub:
        ub, ub_path = incumbent[0], list(incumbent[1])
    solver.work_end = base + limits.search
    solver.stopped_by = None  # the dive's own stop is not the run's

    if start == solver.all:
        return ExactOutcome(ub_path, ub, ub, True, 0, 1)
    best_g: dict[Group, int] = {start: g0}
    parent: dict[Group, tuple[Group, Group, Group]] = {}
    closed: set[Group] = set()
    heap = [(g0 + h(start), -g0, 0, start)]
    seq = 0
    generated = 1
    interrupted_f: int | None = None

    def path_to(state: Group) -> list[Group]:
        return start_path + solver.steps_to(state, start, parent)

    try:
        while heap:
            f, neg_g, _, state = heap[0]
            if f >= ub:
                break  # nothing open can beat the best plan: it is optimal
            if solver.exhausted():
                raise _Timeout
            heapq.heappop(heap)
            g = -neg_g
            if state in closed or g > best_g[state]:
                continue
            interrupted_f = f
            transitions = solver.expand(state)
            interrupted_f = None
            closed.add(state)
            for group, absorbed, nxt, dram in transitions:
                g2 = g + dram
                if nxt == solver.all:
                    if g2 < ub:
                        ub = g2
                        ub_path = [*path_to(state), group, *solver.atoms_in(absorbed)]
                    continue
                if g2 >= best_g.get(nxt, ub):
                    continue
                f2 = g2 + h(nxt)
                if f2 >= ub:
                    continue
                best_g[nxt] = g2
                parent[nxt] = (state, group, absorbed)
                seq += 1
                generated += 1
                heapq.heappush(heap, (f2, -g2, seq, nxt))
    except _Timeout:
        pass
    else:
        return ExactOutcome(ub_path, ub, ub, True, solver.states, generated)

    # the work is spent: bound, then dives from the most promising open states
    stopped_by = solver.stopped_by or STOP_WORK
    lower = min(ub, heap[0][0] if heap else ub)
    if interrupted_f is not None:
        lower = min(lower, interrupted_f)
    solver.work_end = base + limits.total
    tried = 0
    for f, neg_g, _, state in sorted(heap):
        if tried >= 8 or f >= ub or solver.exhausted():
            break
        if state in closed or -neg_g > best_g[state]:
            continue
        tried += 1
        d_ub, d_path = solver.dive(state, -neg_g, path_to(state))
        if d_ub < ub:
            ub, ub_path = d_ub, d_path
    optimal = lower >= ub
    return ExactOutcome(
        ub_path, ub, lower, optimal, solver.states, generated,
        STOP_OPTIMAL if optimal else stopped_by,
    )  # fmt: skip


# ------------------------------------------------------------------------ other objectives
# A* over down-sets for an additive objective other than DRAM: energy or latency
# (docs/design.md, "Search"; accel_model/objectives.py).
#
# The state space, the transitions and the traffic bound are :class:`ExactSolver`'s: only the
# price of a transition changes. A group's energy or latency comes from its schedule, which
# costs about a millisecond per op to build, and a state has hundreds of transitions, so A*
# is *lazy*: a transition is first pushed at a floor of its score computed from the DRAM bytes
# the cost model already knows (:meth:`Objective.group_floor`), and its schedule is built only
# when that entry reaches the top of the queue. Exact because the floor is never above the
# score (an entry popped at its floor is re-pushed at its true f), and the heuristic
# ``rest_floor(ops left, traffic bound)`` is consistent wherever the traffic bound is, since
# each group pays at least its DRAM bytes' and its MACs' share of it.


@dataclass
class ObjectiveOutcome:
    groups: list[Group]  # every group of the plan, unfusable singletons included
    score: int
    lower_bound: int
    optimal: bool
    states: int
    stopped_by: str = STOP_OPTIMAL


def solve_objective(
    solver: ExactSolver,
    objective: Objective,
    limits: SolveLimits,
    incumbent: list[Group] | None = None,
) -> ObjectiveOutcome:
    """The plan of least ``objective`` score within ``limits`` (its ``search`` units; no
    greedy dive: ``incumbent``, a valid plan with atoms, is the first upper bound, else the
    all-singleton plan)."""
    base = solver.work
    charged = objective.work  # the objective's schedule work already counted
    solver.work_end = base + limits.search
    solver.clock_end = limits.clock_end
    solver.stopped_by = None
    every = solver.all
    floors: dict[Group, int] = {}  # the heuristic per state (it walks every op left)

    def h(done: Group) -> int:
        hit = floors.get(done)
        if hit is None:
            hit = floors[done] = objective.rest_floor(every & ~done, solver.h(done))
        return hit

    def exact(group: Group, absorbed: Group) -> int:
        nonlocal charged
        score = objective.group(group)
        for atom in solver.atoms_in(absorbed):
            score += objective.group(atom)
        solver.charge(objective.work - charged)  # the schedules it built are work
        charged = objective.work
        return score

    start, _ = solver.start_state()
    start_path = solver.atoms_in(start)
    g0 = sum(objective.group(a) for a in start_path)
    _, singles = solver._finish_singletons(start, 0, list(start_path))
    ub_path = list(incumbent) if incumbent is not None else singles
    ub = objective.plan(ub_path)
    if incumbent is not None and objective.plan(singles) < ub:
        ub, ub_path = objective.plan(singles), singles
    if start == every:
        return ObjectiveOutcome(ub_path, ub, ub, True, 0)

    best_g: dict[Group, int] = {start: g0}
    parent: dict[Group, tuple[Group, Group, Group]] = {}
    closed: set[Group] = set()
    # (f, tie, state, g, pending): pending (previous state, group, absorbed) is a transition
    # pushed at its floor whose exact score is still unknown
    heap: list[tuple[int, int, Group, int, tuple[Group, Group, Group] | None]] = [
        (g0 + h(start), 0, start, g0, None)
    ]
    seq = 0

    def path_to(state: Group) -> list[Group]:
        return start_path + solver.steps_to(state, start, parent)

    def push(f: int, state: Group, g: int, pending: tuple[Group, Group, Group] | None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (f, seq, state, g, pending))

    current: int | None = None  # f of the entry being worked on (the bound if stopped there)
    try:
        while heap and heap[0][0] < ub:
            if solver.exhausted():
                raise _Timeout
            f, _, state, g, pending = heapq.heappop(heap)
            current = f
            if pending is not None:  # price the transition's schedule now
                prev, group, absorbed = pending
                g2 = best_g[prev] + exact(group, absorbed)
                if state == every:
                    if g2 < ub:
                        ub, ub_path = g2, [*path_to(prev), group, *solver.atoms_in(absorbed)]
                    current = None
                    continue
                if g2 < best_g.get(state, ub) and state not in closed:
                    best_g[state] = g2
                    parent[state] = pending
                    f2 = g2 + h(state)
                    if f2 < ub:
                        push(f2, state, g2, None)
                current = None
                continue
            if state in closed or g > best_g[state]:
                continue
            transitions = solver.expand(state)
            closed.add(state)
            for group, absorbed, nxt, _ in transitions:
                floor = g + objective.group_floor(group, solver.cm.cost(group).dram)
                if absorbed:
                    floor += sum(objective.group_floor(a, solver.atom_dram[a])
                                 for a in solver.atoms_in(absorbed))  # fmt: skip
                f2 = floor + (h(nxt) if nxt != every else 0)
                if f2 < ub and nxt not in closed:
                    push(f2, nxt, floor, (state, group, absorbed))
            current = None
    except _Timeout:
        lower = min(ub, heap[0][0]) if heap else ub
        if current is not None:
            lower = min(lower, current)
        return ObjectiveOutcome(ub_path, ub, lower, lower >= ub, solver.states,
                                solver.stopped_by or STOP_WORK)  # fmt: skip
    return ObjectiveOutcome(ub_path, ub, ub, True, solver.states)


# ------------------------------------------------------------------------ the search
def check_tractable(graph: OpGraph, max_downsets: int) -> int:
    """The number of down-sets of ``graph``; ConfigError (one line) above ``max_downsets``."""
    count, exact = count_downsets(graph, max_downsets)
    if not exact:
        about = f"more than {count:,}" if count > max_downsets else "too many to count"
        raise ConfigError(
            f"exact search refused: model {graph.name} has {about} down-sets "
            f"(limit {max_downsets:,}); use --search auto, lns, ls or nsga2"
        )
    return count


class ExactSearch:
    name = "exact"

    def __init__(self, config: ExactConfig | None = None, **options: object) -> None:
        self.config = build_config(ExactConfig, config, options, self.name)

    def run(self, problem: FusionProblem, seed: int, progress: Progress | None = None
            ) -> SearchResult:  # fmt: skip
        check_start(problem)
        cfg = self.config
        end = clock_end(cfg.time_limit_s)
        rec = Recorder(problem, progress)
        count = check_tractable(problem.graph, cfg.max_downsets)
        if problem.objective.name != "dram":
            found = objective_optimum(problem, rec, cfg.total_work, end)
            return rec.result(self.name, seed, config=asdict(cfg), objective_bound=found)
        solver = ExactSolver(problem.cost_model, problem.unfusable, chains=cfg.chain_bound)
        dive = cfg.dive_share if cfg.greedy_dive else 0.0
        warm = rec.best  # a warm-start plan is the first upper bound
        incumbent = (warm.dram, list(warm.groups)) if warm is not None else None
        out = solve(solver, SolveLimits.of(cfg.total_work, dive, end), incumbent)
        unf = problem.unfusable
        cand = problem.evaluate([grp for grp in out.groups if not grp & unf])
        if cand.dram != out.dram:  # the plan is costed twice, by the DP and by the problem
            raise RuntimeError(
                f"exact search: DP cost {out.dram} B != evaluated plan {cand.dram} B"
            )
        rec.observe(cand)
        best = rec.best  # a warm-start plan (FusionProblem.warm_start) may beat a timed-out run
        assert best is not None
        lb = out.lower_bound
        gap = (best.dram - lb) / lb if lb else 0.0
        bound = ExactBound(
            optimal=out.optimal,
            lower_bound_bytes=out.lower_bound,
            gap=gap,
            states=out.states,
            states_generated=out.states_generated,
            groups_enumerated=solver.groups_enumerated,
            transitions=solver.transitions,
            downsets=count,
            pruned_by_buffer=solver.prune,
            stopped_by=out.stopped_by,
            work=solver.work,
        )
        return rec.result(self.name, seed, config=asdict(cfg), exact=bound)


def objective_optimum(
    problem: FusionProblem, rec: Recorder, work: int, end: float = math.inf
) -> ObjectiveBound:
    """A* under ``problem``'s objective (:func:`solve_objective`) on ``work`` units, from
    the best plan ``rec`` holds; its plan goes to ``rec`` and its bound is returned."""
    objective = problem.objective
    check_additive(objective.name)
    solver = ExactSolver(problem.cost_model, problem.unfusable)
    best = rec.best
    incumbent = list(best.groups) if best is not None else None
    out = solve_objective(solver, objective, SolveLimits.of(work, 0.0, end), incumbent)
    unf = problem.unfusable
    cand = rec.observe(problem.evaluate([grp for grp in out.groups if not grp & unf]))
    if cand.score != out.score:  # the plan is scored twice, by A* and by the problem
        raise RuntimeError(
            f"exact search: A* {objective.name} {out.score} != evaluated plan {cand.score}"
        )
    best = rec.best
    assert best is not None
    return ObjectiveBound(
        objective.name, objective.unit, best.score, min(out.lower_bound, best.score),
        out.optimal or out.lower_bound >= best.score, out.states, out.stopped_by,
    )  # fmt: skip


SEARCHES.register("exact", ExactSearch, help="proven optimum, A* over down-sets")
