"""Batching policies, the batch-count lower bound and the FSM's Q-learning (issue 13)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionplan.batching.bounds import lower_bound, optimal_batches, type_path_counts
from fusionplan.batching.frontier import Frontier
from fusionplan.batching.fsm import FSMPolicy, QLearningConfig, QTable, train_fsm
from fusionplan.batching.graph import CellNode, DataflowGraph, check_schedule
from fusionplan.batching.policies import AgendaPolicy, DepthPolicy
from fusionplan.batching.workloads import get_workload
from fusionplan.ir.errors import ConfigError


def chains(lengths: list[int]) -> DataflowGraph:
    """A BiLSTM-shaped graph: embed, a shared zero state, forward and backward chains, tags."""
    nodes: list[CellNode] = []
    inst: list[int] = []

    def add(node: CellNode, s: int) -> int:
        nodes.append(node)
        inst.append(s)
        return len(nodes) - 1

    for s, length in enumerate(lengths):
        emb = [add(CellNode("embed", (), 1), s) for _ in range(length)]
        zero = add(CellNode("zero"), s)
        fwd, prev = [], zero
        for i in range(length):
            prev = add(CellNode("fwd", (emb[i], prev)), s)
            fwd.append(prev)
        bwd: list[int] = [0] * length
        prev = zero
        for i in reversed(range(length)):
            prev = add(CellNode("bwd", (emb[i], prev)), s)
            bwd[i] = prev
        for i in range(length):
            add(CellNode("tag", (fwd[i], bwd[i])), s)
    return DataflowGraph(tuple(nodes), tuple(inst))


def random_typed_dag(rng: random.Random, n: int, kinds: int) -> DataflowGraph:
    """Random DAG: each node reads 0-2 earlier nodes; arity fixed per type by the type name."""
    nodes: list[CellNode] = []
    for i in range(n):
        arity = min(rng.randint(0, 2), i)
        kind = f"t{arity}{rng.randrange(kinds)}"
        nodes.append(CellNode(kind, tuple(rng.sample(range(i), arity))))
    return DataflowGraph(tuple(nodes), tuple([0] * n))


@st.composite
def small_dags(draw: st.DrawFn) -> DataflowGraph:
    seed = draw(st.integers(0, 10**6))
    return random_typed_dag(random.Random(seed), draw(st.integers(1, 11)), draw(st.integers(1, 3)))


def test_lower_bound_by_hand_on_two_chains():
    graph = chains([2, 3])
    # one embed batch, one zero batch, 3 forward steps, 3 backward steps, one tag batch
    assert type_path_counts(graph) == {"embed": 1, "zero": 1, "fwd": 3, "bwd": 3, "tag": 1}
    assert lower_bound(graph) == 9
    assert optimal_batches(graph) == 9


@settings(max_examples=120, deadline=None)
@given(small_dags())
def test_lower_bound_never_exceeds_the_brute_force_optimum(graph):
    best = optimal_batches(graph)
    assert lower_bound(graph) <= best
    for policy in (DepthPolicy(), AgendaPolicy()):
        batches = policy.schedule(graph)
        check_schedule(graph, batches)
        assert len(batches) >= best


def test_optimum_can_exceed_the_bound():
    """Two types in opposite orders on two paths from one source: s-a-b and s-b-a."""
    nodes = (
        CellNode("s"),
        CellNode("a", (0,)),
        CellNode("b", (0,)),
        CellNode("b", (1,)),
        CellNode("a", (2,)),
    )
    graph = DataflowGraph(nodes, (0,) * 5)
    assert lower_bound(graph) == 3
    assert optimal_batches(graph) == 4


def test_check_schedule_rejects_bad_schedules():
    graph = chains([2])
    good = DepthPolicy().schedule(graph)
    check_schedule(graph, good)
    with pytest.raises(ValueError, match="never runs"):
        check_schedule(graph, good[:-1])
    with pytest.raises(ValueError, match="runs before its input"):
        check_schedule(graph, list(reversed(good)))
    with pytest.raises(ValueError, match="mixes types"):
        check_schedule(graph, [good[0] + good[1], *good[2:]])


def test_largest_batch_counts_nodes_with_no_pending_same_type_ancestor():
    with pytest.raises(ValueError, match="track_largest"):
        Frontier(chains([2])).largest_batch("fwd")
    frontier = Frontier(chains([2, 3]), track_largest=True)
    assert frontier.largest_batch("fwd") == 2  # the first step of each sentence
    assert frontier.largest_batch("tag") == 5  # tags never depend on tags
    frontier.run("embed")
    frontier.run("zero")
    frontier.run("fwd")
    assert frontier.largest_batch("fwd") == 2
    frontier.run("fwd")
    assert frontier.largest_batch("fwd") == 1


def test_depth_and_agenda_miss_the_bound_on_uneven_chains_and_fsm_meets_it():
    rng = random.Random(3)
    train = [chains([rng.randint(2, 30) for _ in range(16)]) for _ in range(3)]
    table, report = train_fsm(train, QLearningConfig(seed=1))
    assert report.stopped_at_bound
    unseen = chains([rng.randint(2, 30) for _ in range(24)])
    fsm = FSMPolicy(table)
    batches = fsm.schedule(unseen)
    check_schedule(unseen, batches)
    assert len(batches) == lower_bound(unseen)
    assert len(DepthPolicy().schedule(unseen)) > lower_bound(unseen)
    assert len(AgendaPolicy().schedule(unseen)) > lower_bound(unseen)


def test_q_table_round_trips_through_json_and_rejects_other_files(tmp_path):
    table, _ = train_fsm([chains([3, 5])], QLearningConfig(episodes=20, seed=0), "toy")
    path = tmp_path / "fsm.json"
    table.save(path)
    again = QTable.load(path)
    assert again.values == table.values and again.encoding == table.encoding
    graph = chains([4, 2, 6])
    assert FSMPolicy(again).schedule(graph) == FSMPolicy(table).schedule(graph)
    (tmp_path / "bad.json").write_text('{"format": 1, "values": [1]}')
    with pytest.raises(ConfigError, match="not a fusionplan FSM table"):
        QTable.load(tmp_path / "bad.json")


def test_unknown_encoding_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown state encoding"):
        QLearningConfig(encoding="nope")


def test_crit_encoding_keeps_lattices_near_the_bound_where_the_papers_encoding_does_not():
    lattice = get_workload("latticelstm")
    train = [lattice.graph(16, 1000 + i) for i in range(3)]
    unseen = lattice.graph(16, 5)
    counts = {}
    for encoding in ("sort", "crit"):
        table, _ = train_fsm(train, QLearningConfig(encoding=encoding, episodes=150, seed=0))
        batches = FSMPolicy(table).schedule(unseen)
        check_schedule(unseen, batches)
        counts[encoding] = len(batches)
    assert counts["crit"] <= 1.25 * lower_bound(unseen) < counts["sort"]


def test_height_is_the_longest_path_to_a_sink():
    graph = chains([3])
    # the forward chain's first step feeds two more steps and then a tag
    first_fwd = next(i for i, n in enumerate(graph.nodes) if n.type == "fwd")
    assert graph.height[first_fwd] == 3
    assert all(graph.height[i] == 0 for i, n in enumerate(graph.nodes) if n.type == "tag")
