"""NSGA-II gives the same plans on every CPU: no result depends on how a sort orders ties.

numpy's ``argsort(kind="quicksort")`` is not stable and numpy picks its implementation by
CPU: on AVX-512 machines an AVX-512 sort orders equal keys differently from the introsort
used elsewhere. pymoo's NSGA-II survival sorts the last front's crowding distances (often
several ``inf``) that way, so seeded runs used to give other plans on AVX-512 CPUs. These
tests stand in for such a CPU by replacing ``np.argsort`` with a sort that is still correct
but orders every tie the other way round (:func:`tie_reversed_argsort`), and check that
nothing changes, while pymoo's own survival does change under it (so the test can fail).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import fusionplan.search.nsga2 as nsga2_module
from fusionplan.search.nsga2 import NSGA2Search, stable_rank_and_crowding
from fusionplan.search.operators import stable_randomized_argsort
from tests.onnx_builders import to_graph
from tests.test_search import make_problem, mini_net

ARGSORT = np.argsort
STABLE_KINDS = ("stable", "mergesort")


def tie_reversed_argsort(a, axis=-1, kind=None, order=None):
    """An ascending argsort that keeps equal keys in *reverse* index order for the unstable
    kinds (what another CPU's quicksort may legally return); stable kinds are left alone."""
    if kind in STABLE_KINDS or order is not None:
        return ARGSORT(a, axis=axis, kind=kind, order=order)
    a = np.asarray(a)
    if axis is None:
        a, axis = a.ravel(), -1
    n = a.shape[axis]
    return n - 1 - ARGSORT(np.flip(a, axis=axis), axis=axis, kind="stable")


def stable_argsort(a, axis=-1, kind=None, order=None):
    """numpy's argsort with every kind made stable (pymoo's sorts, as on a CPU whose
    quicksort keeps ties in order)."""
    if order is not None:
        return ARGSORT(a, axis=axis, kind=kind, order=order)
    return ARGSORT(a, axis=axis, kind="stable")


def test_the_stand_in_sort_is_a_sort_that_reverses_ties():
    a = np.array([3.0, np.inf, 1.0, np.inf, 1.0, 2.0, np.inf])
    got = tie_reversed_argsort(a)
    assert list(a[got]) == sorted(a)
    assert list(got) == [4, 2, 5, 0, 6, 3, 1]
    m = np.array([[1, 0], [1, 0], [0, 0]])
    assert tie_reversed_argsort(m, axis=0).tolist() == [[2, 2], [1, 1], [0, 0]]


# ------------------------------------------------------------------- the sort itself
def test_stable_randomized_argsort_keeps_ties_in_shuffled_order():
    values = np.array([np.inf, 0.5, np.inf, 0.25, 0.5, np.inf, 0.0, 0.5])
    perm = np.random.default_rng(3).permutation(len(values))
    up = stable_randomized_argsort(values, np.random.default_rng(3))
    assert list(values[up]) == sorted(values)
    rank = {int(i): r for r, i in enumerate(perm)}  # position in the shuffle
    for x, y in itertools.pairwise(up):
        if values[x] == values[y]:
            assert rank[int(x)] < rank[int(y)]
    down = stable_randomized_argsort(values, np.random.default_rng(3), descending=True)
    assert list(down) == list(up[::-1])


@pytest.mark.parametrize("n", [3, 10, 17, 18, 20, 40])
def test_stable_randomized_argsort_is_pymoos_sort_made_stable(n, monkeypatch):
    from pymoo.util.randomized_argsort import randomized_argsort

    rng = np.random.default_rng(n)
    values = rng.choice([0.0, 0.5, 1.0, np.inf], size=n)
    ours = stable_randomized_argsort(values, np.random.default_rng(7), descending=True)
    monkeypatch.setattr(np, "argsort", stable_argsort)
    theirs = randomized_argsort(
        values, order="descending", method="numpy", random_state=np.random.default_rng(7)
    )
    assert ours.tolist() == theirs.tolist()
    monkeypatch.setattr(np, "argsort", tie_reversed_argsort)
    again = stable_randomized_argsort(values, np.random.default_rng(7), descending=True)
    assert again.tolist() == ours.tolist()


# ------------------------------------------------------------------- the survival
class _Problem:
    """What pymoo's survival asks of a problem (no constraints)."""

    n_constr = 0

    def has_constraints(self) -> bool:
        return False


def _population(F):
    from pymoo.core.population import Population

    return Population.new("X", np.arange(len(F))[:, None], "F", np.asarray(F, dtype=float))


def tied_fronts(n: int, seed: int) -> np.ndarray:
    """Objective rows on a few fronts with many equal crowding distances: equally spaced
    points on lines (equal interior distances), repeated points and the ``inf`` ends."""
    rng = np.random.default_rng(seed)
    rows = []
    for level in range(3):
        k = int(rng.integers(3, 9))
        rows += [(level + i, level + k - 1 - i) for i in range(k)]
    rows += [rows[int(i)] for i in rng.integers(0, len(rows), size=max(0, n - len(rows)))]
    return np.array(rows[:n], dtype=float)


def _survive(survival, F, n_survive, seed):
    pop = _population(F)
    out = survival.do(
        _Problem(), pop, n_survive=n_survive, random_state=np.random.default_rng(seed)
    )
    return out.get("X")[:, 0].tolist(), out.get("rank").tolist(), out.get("crowding").tolist()


@pytest.mark.parametrize("n", [12, 17, 20, 30])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_survival_is_pymoos_rank_and_crowding_with_a_stable_sort(n, seed, monkeypatch):
    from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

    F = tied_fronts(n, seed)
    n_survive = n // 2
    ours = _survive(stable_rank_and_crowding(), F, n_survive, seed)
    monkeypatch.setattr(np, "argsort", stable_argsort)
    assert _survive(RankAndCrowding(), F, n_survive, seed) == ours
    # on a CPU whose quicksort orders ties the other way: still the same survivors
    monkeypatch.setattr(np, "argsort", tie_reversed_argsort)
    assert _survive(stable_rank_and_crowding(), F, n_survive, seed) == ours


def test_pymoos_survival_depends_on_the_tie_order_and_ours_does_not():
    from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

    F = tied_fronts(20, 4)
    n_survive = 10
    base, _, _ = _survive(stable_rank_and_crowding(), F, n_survive, 0)
    assert len(set(base)) == n_survive

    theirs = _survive(RankAndCrowding(), F, n_survive, 0)[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(np, "argsort", tie_reversed_argsort)
        theirs_other_cpu = _survive(RankAndCrowding(), F, n_survive, 0)[0]
        ours_other_cpu = _survive(stable_rank_and_crowding(), F, n_survive, 0)[0]
    assert theirs_other_cpu != theirs
    assert ours_other_cpu == base


# ------------------------------------------------------------------- a whole run
def _plans(graph, pop_size: int, seeds=(0, 1, 2)):
    out = []
    for seed in seeds:
        problem = make_problem(graph, budget=300, seed=seed)
        res = NSGA2Search(pop_size=pop_size).run(problem, seed)
        # every plan proposed, in order: any change in any generation shows
        out.append((res.best.groups, res.trace, list(problem.seen)))
    return out


@pytest.fixture(scope="module")
def graph():
    return to_graph(mini_net())


@pytest.mark.parametrize("pop_size", [10, 12])
def test_nsga2_plans_do_not_depend_on_the_cpus_quicksort(graph, pop_size, monkeypatch):
    here = _plans(graph, pop_size)
    monkeypatch.setattr(np, "argsort", tie_reversed_argsort)
    assert _plans(graph, pop_size) == here


def test_pymoos_own_survival_would_depend_on_it(graph, monkeypatch):
    """The check above can fail: with pymoo's survival the stand-in CPU changes plans."""
    from pymoo.operators.survival.rank_and_crowding import RankAndCrowding

    monkeypatch.setattr(nsga2_module, "stable_rank_and_crowding", RankAndCrowding)
    here = _plans(graph, 10)
    monkeypatch.setattr(np, "argsort", tie_reversed_argsort)
    assert _plans(graph, 10) != here
