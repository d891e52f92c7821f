"""A new cost model and a new search are one class plus one registration line each.

The toy scheme and the toy search below are registered from this test module, without
editing any product file, and planned with through the Python API and the command line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from accel_model import COST_MODELS, CostModel, GroupCost
from fusionplan.app import api
from fusionplan.app.cli import main
from fusionplan.ir.graph import Group
from fusionplan.planning.result import SearchResult
from fusionplan.search import SEARCHES, FusionProblem, Recorder
from tests.onnx_builders import residual_block, save


class GroupCountScheme(CostModel):
    """Toy scheme: a group of k ops needs k * 100 bytes of buffer and moves its io once."""

    name = "toy"

    def _compute(self, group: Group) -> GroupCost:
        buffer = 100 * group.bit_count()
        return GroupCost(buffer, self.b * self.io_elements(group), buffer < self.beta)


class WholeThenSingletons:
    """Toy search: propose the coarsest plan, then random edge cuts until the budget is spent."""

    name = "toy-search"

    def run(self, problem: FusionProblem, seed: int, progress=None) -> SearchResult:
        rng = random.Random(seed)
        rec = Recorder(problem, progress)
        rec.observe(problem.evaluate(problem.whole_components()))
        while problem.remaining:
            rec.observe(problem.evaluate_cuts(problem.random_cuts(rng)))
        return rec.result(self.name, seed)


@pytest.fixture
def toys():
    with (
        COST_MODELS.registered("toy", GroupCountScheme),
        SEARCHES.registered("toy-search", WholeThenSingletons),
    ):
        yield
    assert "toy" not in COST_MODELS and "toy-search" not in SEARCHES


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(residual_block(), tmp_path_factory.mktemp("plugins"), "res")


def test_toy_plugins_plan_through_the_api(toys, model):
    plan = api.plan(model, "350B", "toy", search="toy-search", budget=7, seed=1)
    plan.validate()
    assert plan.result is not None and plan.result.algorithm == "toy-search"
    assert plan.result.proposed == 7
    # 350 B fits three ops per group: every group has at most 3 ops, and the residual block
    # (5 ops) cannot be one group
    assert max(g.bit_count() for g in plan.groups) <= 3 and len(plan.groups) >= 2
    assert all(plan.cost_model.buffer_bytes(g) == 100 * g.bit_count() for g in plan.groups)
    assert plan.metrics.mbu_bytes <= 300


def test_toy_plugins_plan_through_the_cli(toys, model, capsys):
    main([
        "plan", str(model), "--buffer", "350B", "--scheme", "toy", "--search", "toy-search",
        "--budget", "5", "--json", "-q",
    ])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["accelerator"]["scheme"] == "toy"
    assert data["search"]["search"] == "toy-search" and data["search"]["proposed"] == 5
    assert all(g["buffer_bytes"] == 100 * len(g["nodes"]) for g in data["groups"])


def test_unregistered_names_are_refused_with_the_choices(model, capsys):
    with pytest.raises(SystemExit) as done:
        main(["plan", str(model), "--scheme", "toy"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "unknown fusion scheme 'toy' (choose from lbdf, brr)" in err


def test_broken_lazy_plugin_fails_with_its_own_import_error():
    SEARCHES.register_lazy("ghost", "fusionplan.search.no_such_module:Ghost", help="broken")
    try:
        assert "ghost" in SEARCHES.names()  # listed without importing it ...
        with pytest.raises(ModuleNotFoundError, match=r"search\.no_such_module"):
            SEARCHES.get("ghost")  # ... and its real import error surfaces on use
    finally:
        SEARCHES.unregister("ghost")
