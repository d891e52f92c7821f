"""PQ-tree (fusionplan/batching/pqtree.py) checked against brute force.

Universes of up to 7 leaves are checked exhaustively: after every reduction the orders the
tree admits must be exactly the permutations keeping every accepted subset consecutive, and a
rejected subset must leave the tree as it was. Larger universes take their subsets as
intervals of a hidden permutation, so every reduction must succeed and that permutation must
stay admitted.
"""

from __future__ import annotations

import itertools
import random
import sys
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusionplan.batching.pqtree import PQTree, _Leaf, _PNode, _QNode

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_PERMS: dict[int, list[tuple[int, ...]]] = {}


def _perms(n: int) -> list[tuple[int, ...]]:
    if n not in _PERMS:
        _PERMS[n] = list(itertools.permutations(range(n)))
    return _PERMS[n]


def _consecutive(order: Sequence[int], subset: Sequence[int]) -> bool:
    members = set(subset)
    where = [at for at, x in enumerate(order) if x in members]
    return not where or where[-1] - where[0] + 1 == len(where)


def _check_shape(tree: PQTree[int]) -> None:
    """The normal form, which the public API cannot see: no node with one child, no Q-node
    with two (a two-child P-node stands for it), every child pointing at its parent."""
    root = tree._root
    assert root is None or root.parent is None
    leaves, stack = 0, [] if root is None else [root]
    while stack:
        node = stack.pop()
        if isinstance(node, _Leaf):
            leaves += 1
            continue
        assert isinstance(node, (_PNode, _QNode))
        assert len(node.children) >= (3 if isinstance(node, _QNode) else 2)
        assert all(child.parent is node for child in node.children)
        stack.extend(node.children)
    assert leaves == len(tree)


def _replay(n: int, subsets: list[list[int]], rng: random.Random) -> int:
    """Reduce by each subset in turn, checking every property against brute force; returns
    how many reductions were accepted."""
    universe = list(range(n))
    tree = PQTree(universe)
    valid = _perms(n)  # the permutations keeping every accepted subset consecutive
    accepted_count = 0
    for subset in subsets:
        key = {x: rng.random() for x in universe}.__getitem__
        before = (tree.frontier(), tree.frontier(key), tree.count_orders())
        kept = [p for p in valid if _consecutive(p, subset)]
        accepted = tree.reduce(subset)
        assert accepted == bool(kept), (n, subsets, subset)
        _check_shape(tree)
        if accepted:
            valid = kept
            accepted_count += 1
        else:  # nothing observable changed (the admitted set is compared just below)
            assert (tree.frontier(), tree.frontier(key), tree.count_orders()) == before
        valid_set = set(valid)
        assert {p for p in _perms(n) if tree.admits(p)} == valid_set, (n, subsets, subset)
        assert tree.count_orders() == len(valid)
        assert tuple(tree.frontier()) in valid_set
        steered = tuple(tree.frontier(key))
        assert steered in valid_set
        by_key = tuple(sorted(universe, key=key))
        if by_key in valid_set:
            assert steered == by_key
    return accepted_count


def _random_subsets(rng: random.Random, n: int, count: int) -> list[list[int]]:
    """Mostly small subsets, which are often satisfiable, plus trivial sizes 0, 1 and n."""
    out = []
    for _ in range(count):
        k = rng.choice([0, 1, n, *[rng.randint(2, max(2, n - 1))] * 7])
        out.append(rng.sample(range(n), min(k, n)))
    return out


def test_brute_force_small_universes() -> None:
    rng = random.Random(20240611)
    accepted = rejected = 0
    for n, cases in [(1, 5), (2, 10), (3, 60), (4, 90), (5, 90), (6, 25), (7, 5)]:
        for _ in range(cases):
            subsets = _random_subsets(rng, n, 8)
            ok = _replay(n, subsets, rng)
            accepted += ok
            rejected += len(subsets) - ok
    assert accepted > 500 and rejected > 200  # both outcomes were exercised


small_cases = st.integers(1, 7).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.lists(st.integers(0, n - 1), unique=True), max_size=7),
        st.integers(0, 2**32),
    )
)


@PROPS
@given(small_cases)
def test_hypothesis_small_universes(case: tuple[int, list[list[int]], int]) -> None:
    n, subsets, seed = case
    _replay(n, subsets, random.Random(seed))


def _hidden_instance(
    rng: random.Random, n: int, count: int, longest: int
) -> tuple[list[int], list[list[int]]]:
    hidden = list(range(n))
    rng.shuffle(hidden)
    subsets = []
    for _ in range(count):
        length = rng.randint(2, longest)
        start = rng.randrange(n - length + 1)
        subsets.append(hidden[start : start + length])
    return hidden, subsets


def _check_hidden(n: int, hidden: list[int], subsets: list[list[int]], every: int = 1) -> None:
    """Every reduction succeeds and keeps `hidden` admitted (checked every `every` steps)."""
    tree = PQTree(range(n))
    for step, subset in enumerate(subsets, 1):
        assert tree.reduce(subset)
        if step % every == 0 or step == len(subsets):
            assert tree.admits(hidden)
            _check_shape(tree)
    for order in (tree.frontier(), tree.frontier(lambda x: -x)):
        assert sorted(order) == list(range(n))
        assert tree.admits(order)
        assert all(_consecutive(order, subset) for subset in subsets)
    position = {x: at for at, x in enumerate(hidden)}
    assert tree.frontier(position.__getitem__) == hidden


@PROPS
@given(st.integers(30, 200), st.integers(0, 2**32), st.integers(1, 60))
def test_hypothesis_hidden_intervals(n: int, seed: int, count: int) -> None:
    rng = random.Random(seed)
    hidden, subsets = _hidden_instance(rng, n, count, rng.choice([4, 10, n // 2, n]))
    _check_hidden(n, hidden, subsets)


@pytest.mark.parametrize("seed", range(3))
def test_hidden_intervals_large(seed: int) -> None:
    rng = random.Random(seed)
    hidden, subsets = _hidden_instance(rng, 3000, 400, 60)
    _check_hidden(3000, hidden, subsets, every=40)


def test_benchmark_shape_stays_admitted() -> None:
    """The module docstring's timing scenario: 20,000 leaves, 2,000 intervals of 50."""
    rng = random.Random(0)
    n = 20000
    hidden = list(range(n))
    rng.shuffle(hidden)
    tree = PQTree(range(n))
    for _ in range(2000):
        start = rng.randrange(n - 50)
        assert tree.reduce(hidden[start : start + 50])
    position = {x: at for at, x in enumerate(hidden)}
    assert tree.frontier(position.__getitem__) == hidden
    assert tree.admits(hidden)


def test_frontier_key_returns_the_admitted_key_order() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(2, 12)
        hidden, subsets = _hidden_instance(rng, n, rng.randint(1, 6), n)
        tree = PQTree(range(n))
        for subset in subsets:
            assert tree.reduce(subset)
        rank = {x: at for at, x in enumerate(hidden)}
        assert tree.frontier(rank.__getitem__) == hidden
        assert tree.frontier(lambda x, rank=rank: -rank[x]) == hidden[::-1]


def test_frontier_key_steers_p_and_q_nodes() -> None:
    tree = PQTree("abcdef")
    assert tree.reduce("bc") and tree.reduce("cd")  # Q-node b-c-d inside the root P-node
    assert tree.count_orders() == 2 * 4 * 3 * 2
    order = "ebdcfa"  # not admitted: c is not between b and d
    rank = {x: at for at, x in enumerate(order)}
    steered = tree.frontier(rank.__getitem__)
    assert steered == list("ebcdfa")  # Q-node read forward since b precedes d; P by min key
    assert tree.frontier(lambda x: -rank[x]) == list("afdcbe")


def test_classic_triangle_is_rejected() -> None:
    tree = PQTree([0, 1, 2])
    assert tree.reduce([0, 1]) and tree.reduce([1, 2])
    assert tree.count_orders() == 2
    assert not tree.reduce([0, 2])
    assert tree.count_orders() == 2
    assert tree.frontier() in ([0, 1, 2], [2, 1, 0])


def test_failed_reduce_keeps_everything() -> None:
    rng = random.Random(3)
    tree = PQTree(range(12))
    for subset in ([0, 1, 2], [2, 3], [3, 4, 5], [7, 8], [8, 9, 10]):
        assert tree.reduce(subset)
    key = {x: rng.random() for x in range(12)}.__getitem__
    before = (tree.frontier(), tree.frontier(key), tree.count_orders())
    for bad in ([0, 4], [2, 7], [0, 1, 2, 4], [9, 5, 3], [7, 9]):
        assert not tree.reduce(bad)
        assert (tree.frontier(), tree.frontier(key), tree.count_orders()) == before


def test_trivial_subsets_and_errors() -> None:
    tree = PQTree(range(5))
    assert len(tree) == 5 and tree.count_orders() == 120
    for subset in ([], [3], [3, 3], range(5), [4, 3, 2, 1, 0, 0]):
        assert tree.reduce(subset)
        assert tree.count_orders() == 120
    with pytest.raises(ValueError):
        tree.reduce([1, 9])
    with pytest.raises(ValueError):
        tree.reduce([9])
    with pytest.raises(ValueError):
        PQTree([1, 2, 1])
    assert tree.count_orders() == 120


def test_small_universes_and_admits_rejects_non_permutations() -> None:
    empty: PQTree[int] = PQTree([])
    assert len(empty) == 0 and empty.frontier() == [] and empty.count_orders() == 1
    assert empty.admits([]) and not empty.admits([0])
    one = PQTree(["x"])
    assert one.frontier() == ["x"] and one.count_orders() == 1 and one.admits(["x"])
    tree = PQTree(range(4))
    assert tree.admits([3, 1, 0, 2])
    for bad in ([0, 1, 2], [0, 1, 2, 2], [0, 1, 2, 5], [0, 1, 2, 3, 4]):
        assert not tree.admits(bad)


def test_same_calls_give_same_frontier() -> None:
    rng = random.Random(11)
    hidden, subsets = _hidden_instance(rng, 300, 80, 30)
    first, second = PQTree(range(300)), PQTree(range(300))
    for subset in subsets:
        assert first.reduce(subset) and second.reduce(iter(subset))
    assert first.frontier() == second.frontier()
    assert first.admits(hidden) and first.admits(first.frontier())


def _frame_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def test_deep_trees_need_no_recursion() -> None:
    """Nested prefixes give a tree as deep as the universe; with the recursion limit just
    above the current stack, any recursive traversal would raise RecursionError."""
    n = 600
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_frame_depth() + 40)
    try:
        tree = PQTree(range(n))
        nested = [tree.reduce(range(k)) for k in range(2, n)]
        counted = tree.count_orders()
        plain, backwards = tree.frontier(), tree.frontier(lambda x: -x)
        admitted = tree.admits(plain) and tree.admits(backwards)
        joined = tree.reduce([0, n - 1])  # merges the whole chain into one Q-node
        after = tree.count_orders(), tree.frontier(), tree.reduce([1, n - 1])
    finally:
        sys.setrecursionlimit(limit)
    assert all(nested) and admitted
    _check_shape(tree)
    assert counted == 2 ** (n - 1)
    assert backwards == list(range(n - 1, -1, -1))
    assert joined
    assert after[0] == 2 and after[2] is False
    assert after[1] in ([n - 1, *range(n - 1)], [*range(n - 2, -1, -1), n - 1])
