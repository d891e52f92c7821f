"""Property tests over random DAGs (tests/random_dags.py): searches, soundness, splitting.

* every search, with each splitter, returns a plan ``Plan.validate()`` accepts, spends the
  budget exactly and repeats exactly for a seed;
* ``make_sound`` turns any partition into a sound refinement of it (connected groups,
  acyclic quotient, checked with the graph module's own primitives);
* a splitter's output covers the group exactly with connected parts that fit the buffer
  (a part may be a single op that fits nowhere: it becomes unfusable).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accel_model import Accelerator
from accel_model.registry import cost_model_class
from fusionplan.ir.graph import bits, is_weakly_connected, quotient_order
from fusionplan.ir.partition import make_sound
from fusionplan.planning.split import make_splitter
from fusionplan.search import FusionProblem, make_search
from tests.random_dags import random_dag, small_buffer

PROPS = settings(max_examples=25, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
CHEAP = settings(PROPS, max_examples=60)

graphs = st.builds(random_dag, st.integers(0, 10**6), max_nodes=st.integers(3, 14))
schemes = st.sampled_from(["lbdf", "brr"])
splitters = st.sampled_from(["random", "tree"])


def problem_for(graph, scheme: str, splitter: str, budget: int, seed: int) -> FusionProblem:
    cls = cost_model_class(scheme)
    cm = cls(graph, Accelerator(small_buffer(cls, graph, seed), scheme))
    return FusionProblem(cm, make_splitter(splitter, cm, seed), budget)


def run_twice(name, graph, scheme, splitter, budget, seed):
    out = []
    for _ in range(2):
        problem = problem_for(graph, scheme, splitter, budget, seed)
        result = make_search(name).run(problem, seed)
        assert problem.proposed == budget == result.proposed
        problem.to_plan(result.best).validate()
        for cand in result.pareto:
            problem.to_plan(cand).validate()
        out.append((result.best.groups, result.trace, [c.key for c in result.pareto]))
    assert out[0] == out[1], "same seed, different result"


@pytest.mark.parametrize("name", ["rs", "ls", "nsga2"])
@PROPS
@given(graph=graphs, scheme=schemes, splitter=splitters, budget=st.integers(1, 30),
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_search_valid_exact_deterministic(name, graph, scheme, splitter, budget, seed):
    run_twice(name, graph, scheme, splitter, budget, seed)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs, scheme=schemes, splitter=splitters, budget=st.integers(1, 25),
       seed=st.integers(0, 2**31 - 1))  # fmt: skip
def test_openbox_valid_exact_deterministic(graph, scheme, splitter, budget, seed):
    pytest.importorskip("openbox")
    run_twice("nsga2-openbox", graph, scheme, splitter, budget, seed)


@CHEAP
@given(graph=graphs, n_labels=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_make_sound_is_a_sound_refinement(graph, n_labels, seed):
    rng = random.Random(seed)
    groups = [0] * n_labels
    for v in range(len(graph)):
        groups[rng.randrange(n_labels)] |= 1 << v
    groups = [g for g in groups if g]
    sound = make_sound(graph, groups)
    union = 0
    for g in sound:
        assert g and not union & g, "groups overlap or are empty"
        union |= g
        assert is_weakly_connected(graph, g), f"group {sorted(bits(g))} is not connected"
        assert any(g & ~c == 0 for c in groups), "not a refinement of the input"
    assert union == graph.all_nodes
    assert quotient_order(graph, sound) is not None, "quotient graph has a cycle"


@CHEAP
@given(graph=graphs, scheme=schemes, splitter=splitters, seed=st.integers(0, 2**31 - 1),
       density=st.floats(0.0, 1.0))  # fmt: skip
def test_split_covers_group_with_valid_parts(graph, scheme, splitter, seed, density):
    cls = cost_model_class(scheme)
    cm = cls(graph, Accelerator(small_buffer(cls, graph, seed), scheme))
    sp = make_splitter(splitter, cm, seed)
    rng = random.Random(seed)
    nodes = 0
    for v in range(len(graph)):
        if rng.random() < max(density, 0.05):
            nodes |= 1 << v
    for group in make_sound(graph, [nodes or 1]):
        parts = sp.split(group)
        union = 0
        for p in parts:
            assert p and not union & p, "parts overlap or are empty"
            union |= p
            assert is_weakly_connected(graph, p)
            assert cm.is_valid(p) or p.bit_count() == 1, "a multi-op part does not fit"
        assert union == group, "parts do not cover the group"
        assert quotient_order(graph, parts) is not None
        assert sp.split(group) == parts  # memoised, stable
