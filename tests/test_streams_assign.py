"""The stream scheduler's graph side (pure Python, no torch): the op DAG's closure and
reduction against networkx, the minimum chain cover against an independent maximum
antichain, the stream assignment's invariants (topological orders, correct and minimal
events, stream limits) and the makespan simulator against hand arithmetic and its bounds.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import networkx as nx
import pytest

from fusionplan.data.synthetic import randwire
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.onnx_model import from_onnx
from fusionplan.passes.streams.assign import (
    StreamAssignment,
    assign_streams,
    minimum_chain_cover,
    place_events,
)
from fusionplan.passes.streams.dag import OpDag, bits
from fusionplan.passes.streams.simulate import simulate

EPS = 1e-9


# ----------------------------------------------------------------------------- helpers
def random_dag(seed: int, max_nodes: int = 25) -> OpDag:
    """A seeded random DAG on 1..max_nodes nodes: edges ``u < v`` with a random density
    (sparse chains and forks up to near-complete orders)."""
    rng = random.Random(seed)
    n = rng.randint(1, max_nodes)
    p = rng.choice((0.05, 0.12, 0.25, 0.45, 0.7))
    edges = [(u, v) for u in range(n) for v in range(u + 1, n) if rng.random() < p]
    return OpDag.from_edges(n, edges)


def layered_dag(seed: int, layers: int, per_layer: int, fan_in: int = 3) -> OpDag:
    """Layers of ``per_layer`` ops, each op reading ``fan_in`` ops of the layer before."""
    rng = random.Random(seed)
    n = layers * per_layer
    edges = []
    for layer in range(1, layers):
        previous = range((layer - 1) * per_layer, layer * per_layer)
        for v in range(layer * per_layer, (layer + 1) * per_layer):
            edges += [(u, v) for u in rng.sample(previous, min(fan_in, per_layer))]
    return OpDag.from_edges(n, edges)


def as_nx(dag: OpDag) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(len(dag)))
    g.add_edges_from(dag.edges)
    return g


def comparable_pairs(dag: OpDag) -> set[tuple[int, int]]:
    """(u, v) with v reachable from u, computed by networkx (independent of the bitsets)."""
    return set(nx.transitive_closure_dag(as_nx(dag)).edges)


def brute_force_width(dag: OpDag) -> int:
    """Largest set of pairwise incomparable ops, by trying every subset (n <= 12)."""
    n = len(dag)
    assert n <= 12
    closure = comparable_pairs(dag)
    comparable = [[(a, b) in closure or (b, a) in closure for b in range(n)] for a in range(n)]
    best = 0
    for mask in range(1 << n):
        members = [v for v in range(n) if mask >> v & 1]
        if len(members) <= best:
            continue
        if all(not comparable[a][b] for a, b in itertools.combinations(members, 2)):
            best = len(members)
    return best


def matching_width(dag: OpDag) -> int:
    """Dilworth: n - maximum matching of the bipartite graph u -> v over the closure."""
    n = len(dag)
    closure = comparable_pairs(dag)
    if not closure:
        return n
    g = nx.Graph()
    left = {("l", u) for u in range(n)}
    g.add_nodes_from(left)
    g.add_nodes_from(("r", v) for v in range(n))
    g.add_edges_from((("l", u), ("r", v)) for u, v in closure)
    matching = nx.bipartite.hopcroft_karp_matching(g, top_nodes=left)
    return n - len(matching) // 2


def width(dag: OpDag) -> int:
    return brute_force_width(dag) if len(dag) <= 12 else matching_width(dag)


def path_cover_of_reduction(dag: OpDag) -> int:
    """Fewest vertex-disjoint paths of the transitive reduction covering the ops (what a
    matching over the reduction's edges alone gives), by networkx matching."""
    n = len(dag)
    reduction = list(nx.transitive_reduction(as_nx(dag)).edges)
    if not reduction:
        return n
    g = nx.Graph()
    left = {("l", u) for u in range(n)}
    g.add_nodes_from(left)
    g.add_nodes_from(("r", v) for v in range(n))
    g.add_edges_from((("l", u), ("r", v)) for u, v in reduction)
    return n - len(nx.bipartite.hopcroft_karp_matching(g, top_nodes=left)) // 2


def reachable(n: int, edges, u: int, v: int) -> bool:
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        adj[a].append(b)
    seen, stack = {u}, [u]
    while stack:
        x = stack.pop()
        for y in adj[x]:
            if y == v:
                return True
            if y not in seen:
                seen.add(y)
                stack.append(y)
    return False


def sync_edges(a: StreamAssignment, events=None) -> list[tuple[int, int]]:
    """What the runtime orders: consecutive ops of each stream, plus the events."""
    chain = [pair for ops in a.streams for pair in itertools.pairwise(ops)]
    return chain + list(a.events if events is None else events)


def implies_every_edge(dag: OpDag, a: StreamAssignment, events) -> bool:
    edges = sync_edges(a, events)
    return all(reachable(len(dag), edges, u, v) for u, v in dag.edges)


def check_assignment(dag: OpDag, a: StreamAssignment, k: int | None, seed: object) -> None:
    """Every invariant of a stream assignment of ``dag`` with limit ``k``."""
    n = len(dag)
    tag = f"dag {seed}, max_streams={k}"
    assert a.width == width(dag), tag
    if k is None:
        assert a.num_streams == a.width, tag
    else:
        assert 1 <= a.num_streams <= min(k, a.width), tag
    # every op on exactly one stream, and stream_of agrees with the streams
    flat = [v for ops in a.streams for v in ops]
    assert sorted(flat) == list(range(n)), tag
    assert all(ops for ops in a.streams), tag
    for s, ops in enumerate(a.streams):
        assert all(a.stream_of[v] == s for v in ops), tag
    # launch order: a topological permutation; each stream a subsequence of it
    assert sorted(a.order) == list(range(n)), tag
    pos = {v: i for i, v in enumerate(a.order)}
    assert all(pos[u] < pos[v] for u, v in dag.edges), tag
    for ops in a.streams:
        assert [pos[v] for v in ops] == sorted(pos[v] for v in ops), tag
        for x, y in itertools.combinations(ops, 2):  # earlier in a stream: never a descendant
            assert not dag.reaches(y, x), tag
    # events: cross-stream edges of the reduction, no more than there are
    reduced = set(dag.reduced_edges)
    cross = {(u, v) for u, v in reduced if a.stream_of[u] != a.stream_of[v]}
    assert a.reduced_cross_edges == len(cross), tag
    assert len(a.events) <= a.reduced_cross_edges, tag
    assert len(set(a.events)) == len(a.events), tag
    assert set(a.events) <= cross, tag
    # correct: stream order + events imply every dependency
    assert implies_every_edge(dag, a, a.events), tag
    # minimal: without any one event some dependency is no longer implied
    for e in a.events:
        rest = [x for x in a.events if x != e]
        assert not implies_every_edge(dag, a, rest), f"{tag}: event {e} is redundant"
    # waits() is the events grouped by the waiting op
    waits = a.waits()
    assert sorted((u, v) for v, us in waits.items() for u in us) == sorted(a.events), tag


DAGS = [random_dag(seed) for seed in range(60)]


# ----------------------------------------------------------------------------- OpDag
def test_bits_lists_set_bits_lowest_first():
    assert list(bits(0)) == []
    assert list(bits(0b1011001)) == [0, 3, 4, 6]
    assert list(bits(1 << 300)) == [300]


def test_descendants_match_networkx_closure():
    for seed, dag in enumerate(DAGS):
        closure = nx.transitive_closure_dag(as_nx(dag))
        for u in range(len(dag)):
            assert set(bits(dag.descendants[u])) == set(closure.successors(u)), seed
            for v in range(len(dag)):
                assert dag.reaches(u, v) == closure.has_edge(u, v), (seed, u, v)


def test_reduced_edges_match_networkx_reduction():
    for seed, dag in enumerate(DAGS):
        expected = set(nx.transitive_reduction(as_nx(dag)).edges)
        assert set(dag.reduced_edges) == expected, seed
        assert len(dag.reduced_edges) == len(expected), seed


def test_reduction_drops_implied_edge_and_keeps_the_rest():
    dag = OpDag.from_edges(4, [(0, 1), (1, 2), (0, 2), (2, 3), (0, 3)])
    assert set(dag.reduced_edges) == {(0, 1), (1, 2), (2, 3)}
    assert dag.descendants[0] == 0b1110
    assert dag.descendants[3] == 0


def test_from_edges_deduplicates_and_rejects_backward_edges():
    dag = OpDag.from_edges(3, [(0, 2), (0, 2), (1, 2)])
    assert dag.preds == ((), (), (0, 1))
    assert dag.succs == ((2,), (2,), ())
    with pytest.raises(ValueError, match="earlier"):
        OpDag(("a", "b"), ((1,), ()))


def test_critical_path_and_bottom_levels():
    dag = OpDag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    lat = [1.0, 2.0, 3.0, 1.0]
    assert dag.critical_path(lat) == 5.0
    assert dag.bottom_levels(lat) == [5.0, 3.0, 4.0, 1.0]
    assert OpDag.from_edges(0, []).critical_path([]) == 0.0


def test_from_graph_has_one_node_per_onnx_op_and_producer_consumer_edges():
    model = randwire(nodes=12, channels=8, size=8)
    dag = OpDag.from_graph(from_onnx(model))
    protos = list(model.graph.node)
    assert len(dag) == len(protos)
    assert set(dag.names) == {p.name for p in protos}
    producer = {t: p.name for p in protos for t in p.output}
    expected = {(producer[t], p.name) for p in protos for t in p.input if t in producer}
    got = {(dag.names[u], dag.names[v]) for u, v in dag.edges}
    assert got == expected
    assert len(dag.edges) == len(expected)  # an op reading a tensor twice: one edge


# ----------------------------------------------------------------------------- chain cover
def check_cover(dag: OpDag, chains: list[list[int]], tag: object) -> None:
    assert sorted(v for c in chains for v in c) == list(range(len(dag))), tag
    for chain in chains:
        assert chain, tag
        for u, v in itertools.pairwise(chain):
            assert dag.reaches(u, v), (tag, chain)
    assert len(chains) == width(dag), tag


def test_minimum_chain_cover_is_a_partition_into_chains_of_width_many():
    for seed, dag in enumerate(DAGS):
        check_cover(dag, minimum_chain_cover(dag), seed)


def test_minimum_chain_cover_on_larger_dags_matches_dilworth():
    for seed in range(8):
        dag = layered_dag(seed, layers=6, per_layer=6, fan_in=2)
        check_cover(dag, minimum_chain_cover(dag), f"layered {seed}")


@pytest.mark.parametrize(
    ("n", "edges", "expected"),
    [
        (1, [], 1),
        (6, [(i, i + 1) for i in range(5)], 1),  # a chain
        (5, [], 5),  # independent ops
        (4, [(0, 1), (0, 2), (1, 3), (2, 3)], 2),  # diamond
        (6, [(0, v) for v in range(1, 6)], 5),  # fork of 5
        (6, [(u, 5) for u in range(5)], 5),  # join of 5
        (6, [(u, v) for u in range(3) for v in range(3, 6)], 3),  # K_{3,3}
        (5, [(0, 2), (1, 2), (2, 3), (2, 4)], 2),  # bow tie
    ],
    ids=["single", "chain", "independent", "diamond", "fork", "join", "k33", "bowtie"],
)
def test_known_chain_covers(n, edges, expected):
    dag = OpDag.from_edges(n, edges)
    chains = minimum_chain_cover(dag)
    assert len(chains) == expected
    assert brute_force_width(dag) == expected
    check_cover(dag, chains, edges)


def test_closure_augmentation_beats_a_matching_over_the_reduction():
    """The bow tie 0,1 -> 2 -> 3,4: vertex-disjoint paths of the reduction need 3, but
    chains may skip over 2 (0 -> 2 -> 4, 1 -> 3 through 2's order), so 2 suffice."""
    dag = OpDag.from_edges(5, [(0, 2), (1, 2), (2, 3), (2, 4)])
    assert path_cover_of_reduction(dag) == 3
    assert brute_force_width(dag) == 2
    chains = minimum_chain_cover(dag)
    assert len(chains) == 2
    # one chain must jump over an op (a closure edge that is not a reduction edge)
    reduced = set(dag.reduced_edges)
    jumps = [(u, v) for c in chains for u, v in itertools.pairwise(c) if (u, v) not in reduced]
    assert jumps


def test_augmentation_needed_on_random_dags_too():
    """Some random DAGs have a reduction path cover above their width: the cover still
    reaches the width there."""
    gaps = 0
    for seed, dag in enumerate(DAGS):
        if path_cover_of_reduction(dag) > width(dag):
            gaps += 1
            assert len(minimum_chain_cover(dag)) == width(dag), seed
    assert gaps > 0  # the random family does exercise the augmentation


# ----------------------------------------------------------------------------- assignment
@pytest.mark.parametrize("k", [None, 1, 2, 3, 5])
def test_assign_streams_invariants_on_random_dags(k):
    rng = random.Random(7)
    for seed, dag in enumerate(DAGS):
        lat = [rng.uniform(0.1, 5.0) for _ in range(len(dag))]
        check_assignment(dag, assign_streams(dag, lat, k), k, seed)
        check_assignment(dag, assign_streams(dag, None, k), k, f"{seed} unit")


@pytest.mark.parametrize("k", [None, 2, 4])
def test_assign_streams_invariants_on_layered_dags(k):
    for seed in range(5):
        dag = layered_dag(seed, layers=5, per_layer=5, fan_in=2)
        check_assignment(dag, assign_streams(dag, max_streams=k), k, f"layered {seed}")


def test_assign_streams_on_randwire_graph():
    dag = OpDag.from_graph(from_onnx(randwire(nodes=12, channels=8, size=8)))
    for k in (None, 1, 2):
        check_assignment(dag, assign_streams(dag, max_streams=k), k, "randwire")


def test_limit_at_or_above_width_is_the_unlimited_assignment():
    dag = OpDag.from_edges(6, [(u, v) for u in range(3) for v in range(3, 6)])
    free = assign_streams(dag)
    assert free.num_streams == 3
    assert assign_streams(dag, max_streams=3) == free
    assert assign_streams(dag, max_streams=100) == free


def test_one_stream_has_no_events_and_a_topological_order():
    dag = OpDag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    a = assign_streams(dag, max_streams=1)
    assert a.num_streams == 1
    assert a.events == ()
    assert a.stream_of == (0, 0, 0, 0)
    assert a.streams[0] == a.order
    assert a.width == 2


def test_independent_ops_each_get_a_stream_without_events():
    a = assign_streams(OpDag.from_edges(4, []))
    assert a.num_streams == 4
    assert a.events == ()
    assert a.reduced_cross_edges == 0


def test_diamond_needs_exactly_two_events():
    """Whichever branch shares the stream of 0 and 3, the other branch needs a fork and a
    join event; neither is implied by the other."""
    dag = OpDag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    a = assign_streams(dag)
    assert a.num_streams == 2
    assert len(a.events) == 2
    check_assignment(dag, a, None, "diamond")


def test_place_events_drops_edges_implied_by_other_events():
    """Streams A: 0, 2 and B: 1, 3 with cross edges 0->1, 0->3, 2->3: 0->3 is implied by
    0 -> 2 (stream A) -> 3 (event 2->3), so only 0->1 and 2->3 remain."""
    events = place_events(4, [(0, 2), (1, 3)], [0, 1, 2, 3], [(0, 1), (0, 3), (2, 3)])
    assert events == [(0, 1), (2, 3)]
    # 0->1->3 on one stream already orders 0 before 3: the event 0->3 is not needed
    events = place_events(4, [(0, 1, 3), (2,)], [0, 1, 2, 3], [(0, 2), (0, 3)])
    assert events == [(0, 2)]


def test_max_streams_below_one_is_a_config_error():
    dag = OpDag.from_edges(3, [(0, 1)])
    with pytest.raises(ConfigError, match="at least 1"):
        assign_streams(dag, max_streams=0)
    with pytest.raises(ConfigError):
        assign_streams(dag, max_streams=-2)


def test_latencies_must_match_the_ops():
    with pytest.raises(ValueError, match="latencies"):
        assign_streams(OpDag.from_edges(3, []), [1.0, 2.0])


def test_assigning_a_400_op_graph_takes_under_a_second():
    dag = layered_dag(0, layers=20, per_layer=20, fan_in=3)
    assert len(dag) == 400
    rng = random.Random(1)
    lat = [rng.uniform(1e-6, 1e-4) for _ in range(len(dag))]
    for k in (None, 4):
        fresh = OpDag(dag.names, dag.preds)  # closure and reduction not cached yet
        began = time.perf_counter()
        a = assign_streams(fresh, lat, k)
        assert time.perf_counter() - began < 1.0
        assert a.num_streams == (a.width if k is None else min(k, a.width))
    fresh = OpDag(dag.names, dag.preds)
    began = time.perf_counter()
    a = assign_streams(fresh)
    assert time.perf_counter() - began < 1.0
    assert a.width == matching_width(dag)


# ----------------------------------------------------------------------------- simulation
def diamond_assignment() -> tuple[OpDag, StreamAssignment]:
    """Diamond 0 -> {1, 2} -> 3 with stream 0 = (0, 1, 3), stream 1 = (2,)."""
    dag = OpDag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    streams = ((0, 1, 3), (2,))
    order = (0, 1, 2, 3)
    events = place_events(4, streams, order, [(0, 2), (2, 3)])
    a = StreamAssignment(
        stream_of=(0, 0, 1, 0),
        streams=streams,
        order=order,
        events=tuple(events),
        width=2,
        reduced_cross_edges=2,
    )
    return dag, a


def test_simulate_diamond_by_hand():
    dag, a = diamond_assignment()
    assert a.events == ((0, 2), (2, 3))
    sim = simulate(dag, a, [1.0, 2.0, 3.0, 1.0], event_s=0.5)
    # 0: [0, 1]; 1 after 0 on its stream: [1, 3]; 2 waits 0's event: [1.5, 4.5];
    # 3 waits 2's event: [5, 6]
    assert sim.start == (0.0, 1.0, 1.5, 5.0)
    assert sim.finish == (1.0, 3.0, 4.5, 6.0)
    assert sim.makespan == 6.0
    assert sim.critical_path == 5.0
    assert sim.work == 7.0
    assert sim.sequential == 7.0
    assert sim.streams == 2
    assert sim.bound == 5.0
    assert sim.gap == pytest.approx(0.2)
    assert sim.speedup == pytest.approx(7.0 / 6.0)
    assert sim.mixed == pytest.approx(0.25 * 5.0 + 7.0)
    js = sim.to_json()
    assert js["makespan_s"] == 6.0
    assert js["bound_s"] == 5.0


def test_simulate_diamond_with_launch_time():
    dag, a = diamond_assignment()
    sim = simulate(dag, a, [1.0, 2.0, 3.0, 1.0], launch_s=2.0, event_s=0.5)
    # issue times 2, 4, 6, 8: 0 [2, 3]; 1 [4, 6]; 2 [6, 9]; 3 waits 2's event [9.5, 10.5]
    assert sim.start == (2.0, 4.0, 6.0, 9.5)
    assert sim.finish == (3.0, 6.0, 9.0, 10.5)
    assert sim.makespan == 10.5
    # one stream: max(issued, previous finish) + latency: 3, 6, 9, 10
    assert sim.sequential == 10.0
    assert sim.bound == 8.0  # issue time 4 * 2 beats critical path 5 and work/2 = 3.5


def test_simulate_on_one_stream_is_the_sum():
    dag = OpDag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    lat = [1.0, 2.0, 3.0, 1.0]
    sim = simulate(dag, assign_streams(dag, lat, max_streams=1), lat, event_s=0.5)
    assert sim.makespan == 7.0
    assert sim.sequential == 7.0
    assert sim.speedup == 1.0


def test_simulated_schedule_respects_dependencies_and_events():
    rng = random.Random(3)
    for seed, dag in enumerate(DAGS):
        lat = [rng.uniform(0.1, 3.0) for _ in range(len(dag))]
        for k in (None, 1, 2, 4):
            a = assign_streams(dag, lat, k)
            sim = simulate(dag, a, lat, event_s=0.25, launch_s=0.01)
            for u, v in dag.edges:
                assert sim.start[v] >= sim.finish[u] - EPS, (seed, k, u, v)
            for u, v in a.events:
                assert sim.start[v] >= sim.finish[u] + 0.25 - EPS, (seed, k, u, v)
            for ops in a.streams:
                for x, y in itertools.pairwise(ops):
                    assert sim.start[y] >= sim.finish[x] - EPS, (seed, k)
            for v in range(len(dag)):
                assert sim.finish[v] == pytest.approx(sim.start[v] + lat[v])


def test_makespan_never_beats_the_bound():
    rng = random.Random(11)
    for seed, dag in enumerate(DAGS):
        lat = [rng.uniform(0.01, 10.0) for _ in range(len(dag))]
        for k in (None, 1, 2, 3, 6):
            a = assign_streams(dag, lat, k)
            for launch, event in ((0.0, 0.0), (0.0, 0.3), (0.05, 1e-3)):
                sim = simulate(dag, a, lat, launch_s=launch, event_s=event)
                assert sim.makespan >= sim.bound - EPS, (seed, k, launch, event)
                assert sim.makespan >= sim.critical_path - EPS
                assert sim.makespan * a.num_streams >= sim.work - EPS
                assert sim.gap >= -EPS
                if launch == 0.0:
                    assert sim.sequential == pytest.approx(sum(lat)), (seed, k)
                assert sim.sequential >= sim.work - EPS


def test_unlimited_streams_without_event_cost_reach_the_critical_path():
    """Each chain is a stream issued by ASAP start: no op ever waits for its stream."""
    rng = random.Random(5)
    for seed, dag in enumerate(DAGS):
        lat = [rng.uniform(0.01, 10.0) for _ in range(len(dag))]
        a = assign_streams(dag, lat)
        sim = simulate(dag, a, lat, event_s=0.0)
        assert sim.makespan == pytest.approx(dag.critical_path(lat), rel=1e-12), seed
        assert sim.gap == pytest.approx(0.0, abs=1e-12)


def test_launch_time_enters_the_bound():
    dag = OpDag.from_edges(5, [])
    lat = [1e-6] * 5
    a = assign_streams(dag, lat)
    sim = simulate(dag, a, lat, launch_s=1e-3, event_s=0.0)
    assert sim.bound == pytest.approx(5e-3)
    assert sim.makespan >= 5e-3
    assert sim.makespan == pytest.approx(5e-3 + 1e-6)  # the last op issued at 5 ms
    rng = random.Random(2)
    for seed, dag in enumerate(DAGS[:20]):
        lat = [rng.uniform(0.0, 1e-3) for _ in range(len(dag))]
        sim = simulate(dag, assign_streams(dag, lat), lat, launch_s=2e-3)
        assert sim.bound >= len(dag) * 2e-3 - EPS, seed
        assert sim.makespan >= len(dag) * 2e-3 - EPS, seed


@pytest.mark.parametrize("heavy", [1, 2])
def test_the_critical_path_is_one_chain_with_no_event_on_it(heavy: int) -> None:
    # 0 -> {1, 2} -> 3; whichever middle op is heavy, the chain through it must hold 0 and 3
    dag = OpDag.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
    latency = [1.0, 1.0, 1.0, 1.0]
    latency[heavy] = 10.0
    chains = minimum_chain_cover(dag, latency)
    assert [0, heavy, 3] in chains
    assignment = assign_streams(dag, latency)
    sim = simulate(dag, assignment, latency, event_s=0.5)
    assert sim.makespan == pytest.approx(dag.critical_path(latency))  # events off the path


def test_assignment_does_not_depend_on_the_hash_seed() -> None:
    """Two processes with different string hash seeds assign the same streams."""
    script = (
        "from fusionplan.data.synthetic import nasnet_cells\n"
        "from fusionplan.passes.streams.assign import assign_streams\n"
        "from fusionplan.passes.streams.dag import OpDag\n"
        "from fusionplan.ir.onnx_model import from_onnx\n"
        "dag = OpDag.from_graph(from_onnx(nasnet_cells(cells=2, channels=8, size=8)))\n"
        "a = assign_streams(dag)\n"
        "print(a.stream_of, a.events)\n"
    )
    root = Path(__file__).resolve().parents[1]
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(root)},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
