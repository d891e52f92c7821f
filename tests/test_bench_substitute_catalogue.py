"""``fusionplan bench substitute-catalogue`` on a small hand-built model under a zoo name and
on one whose export fails (no real export: ``zoo_path`` is replaced in the bench module)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from fusionplan.app.bench import substitute_catalogue as bench
from fusionplan.engines import LocalEngine
from tests.onnx_builders import save
from tests.substitution_models import inception_block

SMALL, FAILING = "mnasnet0_5", "shufflenet_v2_x0_5"
CONFIG = bench.SubstituteCatalogueConfig(search="taso", budget=100)


@pytest.fixture
def fake_zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = save(inception_block(), tmp_path, "block")

    def zoo_path(name: str) -> Path:
        if name != SMALL:
            raise RuntimeError(f"no export of {name} here")
        return path

    monkeypatch.setattr(bench, "zoo_path", zoo_path)
    return path


def test_rows_failure_and_report(fake_zoo: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    engine = LocalEngine(1, isolate=False)
    rows = bench.run_substitute_catalogue(
        [SMALL, FAILING], CONFIG, tmp_path / "out", report, engine=engine
    )
    ok, failed = rows
    assert ok["model"] == SMALL and "error" not in ok, ok
    assert ok["ops_before"] == 9 and ok["substitutions"] > 0
    assert ok["contrib_free"] is True and ok["max_rel_error"] <= 1e-4
    assert ok["planner_ops"] > 0 and ok["speedup_estimated"] > 1
    assert failed["error"] == f"export: RuntimeError: no export of {FAILING} here"
    text = report.read_text()
    assert "1 of 2 models through the pass; 1 contrib-free" in text
    assert f"| {SMALL} | 224x224 | 9 | {ok['ops_after']} | {ok['substitutions']} |" in text
    assert "| yes |" in text and f"| {FAILING} | 224x224 |" in text
    again = bench.run_substitute_catalogue(
        [SMALL, FAILING], CONFIG, tmp_path / "out", report, engine=engine
    )
    assert again == rows  # both stored: nothing is run again


def test_contrib_free_sees_nodes_and_opset_imports() -> None:
    m = inception_block()  # the test builder imports com.microsoft although no node uses it
    assert not bench.contrib_free(m)
    del m.opset_import[1]
    assert bench.contrib_free(m)
    m.graph.node[0].domain = "com.microsoft"
    assert not bench.contrib_free(onnx.ModelProto.FromString(m.SerializeToString()))
