"""The Python API: ``fp.plan``, ``fp.sweep`` and a cheap ``import fusionplan``.

The search is ``rs`` with a small budget: these tests are about the API contract.

``fp.plan`` is resolved lazily to :func:`fusionplan.app.api.plan`: ``import fusionplan``
loads nothing but the facade.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fusionplan as fp
from fusionplan.app import api
from fusionplan.ir.errors import ConfigError
from fusionplan.planning.plan import Plan
from tests.onnx_builders import residual_block, save, to_graph

FAST = {"search": "rs", "budget": 12}


@pytest.fixture(scope="module")
def res_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(residual_block(), tmp_path_factory.mktemp("api"), "res")


@pytest.fixture
def no_model_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionplan.data import zoo

    def fail(*args, **kwargs):
        raise AssertionError("the model was loaded before the settings were checked")

    monkeypatch.setattr(zoo, "resolve_model", fail)
    monkeypatch.setattr(api, "resolve_model", fail)
    monkeypatch.setattr(zoo, "zoo_path", fail)


def test_plan_returns_a_validated_plan(res_path: Path):
    plan = api.plan(res_path, "500B", "lbdf", seed=3, **FAST)
    assert isinstance(plan, Plan)
    assert plan.problems() == []
    assert plan.validate() is plan
    assert plan.cost_model.beta == 500 and plan.cost_model.name == "lbdf"
    assert plan.graph.name == "res"
    info = plan.info
    assert info["search"] == "rs"
    assert info["budget"] == info["proposed"] == 12
    assert info["seed"] == 3
    assert info["splitter"] == "tree"
    m = plan.metrics
    assert m.lower_bound_bytes <= m.dram_bytes
    assert m.mbu_bytes < 500
    assert "DRAM" in plan.summary() and plan.to_json().startswith("{")


@pytest.mark.parametrize("splitter", ["tree", "random"])
def test_same_seed_same_plan(res_path: Path, splitter: str):
    a = api.plan(res_path, "300B", seed=11, splitter=splitter, **FAST)
    b = api.plan(res_path, "300B", seed=11, splitter=splitter, **FAST)
    assert a.groups == b.groups
    assert a.metrics == b.metrics
    assert a.info["trace"] == b.info["trace"]


def test_plan_accepts_a_graph(no_model_loading):
    graph = to_graph(residual_block())
    plan = api.plan(graph, 2048, scheme="brr", **FAST)
    assert plan.graph is graph and plan.cost_model.accel.scheme == "brr"


def test_sweep_one_point_per_buffer_sorted(res_path: Path):
    points = api.sweep(res_path, ["2KB", 300, "600B"], **FAST)
    assert [p.buffer_bytes for p in points] == [300, 600, 2048]
    for p in points:
        assert p.plan.cost_model.beta == p.buffer_bytes
        assert p.plan.info["budget"] == 12
        p.plan.validate()
    # the same graph object is shared by every point (the model is loaded once)
    assert len({id(p.plan.graph) for p in points}) == 1


BAD_SETTINGS = {
    "buffer with unknown unit": (api.plan, {"buffer": "12XB"}, "unknown unit 'XB'"),
    "buffer 0": (api.plan, {"buffer": 0}, "must be positive"),
    "fractional bytes": (api.plan, {"buffer": "0.5B"}, "whole number of bytes"),
    "unknown scheme": (api.plan, {"scheme": "xyz"}, "unknown fusion scheme 'xyz'"),
    "bytes per element": (api.plan, {"bytes_per_element": 0}, "bytes per element"),
    "budget 0": (api.plan, {"budget": 0}, "budget must be at least 1"),
    "sweep bad buffer": (api.sweep, {"buffers": ["1KB", "12XB"]}, "unknown unit 'XB'"),
    "sweep no buffers": (api.sweep, {"buffers": []}, "at least one buffer"),
    "sweep budget 0": (api.sweep, {"buffers": ["1KB"], "budget": 0}, "budget must be at least"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS), ids=list(BAD_SETTINGS))
def test_bad_settings_fail_before_loading_the_model(case, no_model_loading):
    fn, kwargs, message = BAD_SETTINGS[case]
    with pytest.raises(ConfigError, match=message):
        fn("resnet18", **kwargs)


def test_import_is_cheap():
    code = (
        "import sys, fusionplan as fp\n"
        "heavy = ('torch', 'torchvision', 'onnxruntime', 'pymoo', 'torch_geometric')\n"
        "print(sorted(m for m in (*heavy, 'numpy', 'onnx') if m in sys.modules))\n"
        "fp.plan, fp.Plan, fp.Accelerator\n"  # the lazy API attributes resolve ...
        "print(sorted(m for m in heavy if m in sys.modules))\n"  # ... without the heavy ones
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "[]"]


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fp.nope  # noqa: B018


def test_lazy_api_attributes():
    code = (
        "import fusionplan as fp\nf = fp.plan\nfrom fusionplan.app import api\nprint(f is api.plan)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "True", proc.stderr
    assert fp.sweep is api.sweep
    assert fp.Plan is Plan
