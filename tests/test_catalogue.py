"""``fusionplan bench catalogue`` on one real small model and one that fails.

The full catalogue (every torchvision model) is never run here: an autouse guard lets these
tests export only ``mnasnet0_5``; any other export raises, which is also how the failing
model is made.
"""

from __future__ import annotations

import csv
import shutil

import pytest

from fusionplan.app.bench import BEGIN as PAPER_BEGIN
from fusionplan.app.bench import END as PAPER_END
from fusionplan.app.bench import catalogue
from fusionplan.app.bench.catalogue import CatalogueConfig, run_catalogue
from fusionplan.app.cli import main
from fusionplan.data import zoo

SMALL = "mnasnet0_5"
FAILING = "shufflenet_v2_x0_5"
CONFIG = CatalogueConfig(budget=20)


@pytest.fixture(autouse=True)
def only_small_exports(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    # A cache of our own with SMALL's export and the model index copied from the session
    # cache, never FAILING's: another test (tests/test_monotone.py) exports FAILING into the
    # shared cache, and a cache hit would skip the export that must fail here. (Copies, not
    # hard links: onnx refuses external data files with several links.)
    shared = zoo.cache_dir()
    own = tmp_path / "cache"
    (own / "zoo").mkdir(parents=True)
    if shared.is_dir():
        for f in shared.iterdir():
            wanted = f.name.startswith(f"{SMALL}-") or f.suffix == ".json"
            if wanted and f.is_file() and ".tmp" not in f.name:
                shutil.copy2(f, own / "zoo" / f.name)
    monkeypatch.setenv(zoo.CACHE_ENV, str(own))
    original = zoo._export_proto

    def guarded(entry):
        if entry.name != SMALL:
            raise RuntimeError(f"tests may not export {entry.name}\ntraceback line")
        return original(entry)

    monkeypatch.setattr(zoo, "_export_proto", guarded)


def test_catalogue_models_are_every_torchvision_model():
    names = catalogue.catalogue_models()
    assert names[: len(zoo.zoo_names())] == zoo.zoo_names()
    assert set(names[len(zoo.zoo_names()) :]) == set(zoo.torchvision_models())


def test_rows_failure_row_report_and_resume(tmp_path, monkeypatch):
    report = tmp_path / "results.md"
    paper = f"{PAPER_BEGIN}\npaper tables\n{PAPER_END}\n"
    report.write_text(f"# Results\n\nhand-written\n\n{paper}")
    rows = run_catalogue([SMALL, FAILING], CONFIG, tmp_path / "out", report, isolate=False)

    ok, failed = rows
    assert ok["model"] == SMALL and "error" not in ok
    assert ok["input"] == "224x224" and ok["ops"] > 50 and ok["import_s"] >= 0
    assert set(ok["dram_mb"]) == {"lbdf/128KB", "lbdf/512KB", "brr/128KB", "brr/512KB"}
    assert all(d >= ok["compulsory_mb"] > 0 for d in ok["dram_mb"].values())
    assert failed["error"] == (
        f"export: RuntimeError: tests may not export {FAILING} traceback line"
    )
    assert failed["dram_mb"] == {} and "ops" not in failed

    text = report.read_text()
    assert text.startswith("# Results\n\nhand-written\n\n") and paper in text  # kept
    assert text.count(catalogue.BEGIN) == 1 and text.rstrip().endswith(catalogue.END)
    assert f"| {SMALL} | 224x224 |" in text and f"| {FAILING} | 224x224 |" in text
    with open(tmp_path / "out" / catalogue.CSV_FILE, newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["model"] for r in table] == [SMALL, FAILING]
    assert float(table[0]["dram_mb_brr/512KB"]) == ok["dram_mb"]["brr/512KB"]
    assert table[1]["error"] == failed["error"] and table[1]["ops"] == ""

    measured = []

    def again(model, config):
        measured.append(model)
        return {"key": config.key(model), "model": model, "dram_mb": {}, "error": "again"}

    monkeypatch.setattr(catalogue, "measure", again)
    assert run_catalogue([SMALL, FAILING], CONFIG, tmp_path / "out", report, isolate=False) == rows
    assert measured == []  # everything was stored
    rows = run_catalogue(
        [SMALL, FAILING], CONFIG, tmp_path / "out", report, isolate=False, retry_failed=True
    )
    assert measured == [FAILING] and rows[1]["error"] == "again"


def test_interrupted_run_resumes_with_the_next_model(tmp_path, monkeypatch):
    real = catalogue.measure
    calls = []

    def interrupted(model, config):
        calls.append(model)
        if model == FAILING:
            raise KeyboardInterrupt
        return real(model, config)

    monkeypatch.setattr(catalogue, "measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_catalogue([SMALL, FAILING], CONFIG, tmp_path, tmp_path / "c.md", isolate=False)
    monkeypatch.setattr(catalogue, "measure", lambda m, c: calls.append(m) or real(m, c))
    rows = run_catalogue([SMALL, FAILING], CONFIG, tmp_path, tmp_path / "c.md", isolate=False)
    assert calls == [SMALL, FAILING, FAILING]
    assert [r["model"] for r in rows] == [SMALL, FAILING]
    run_catalogue([SMALL], CatalogueConfig(budget=21), tmp_path, tmp_path / "c.md", isolate=False)
    assert calls[3:] == [SMALL]  # other settings: the stored row is not reused


def test_worker_process_measures_a_model(tmp_path):
    zoo.zoo_path(SMALL)  # exported here, so the spawned worker only imports and plans
    (row,) = run_catalogue([SMALL, SMALL.upper()], CONFIG, tmp_path, tmp_path / "c.md")
    assert "error" not in row and row["export_s"] is None and len(row["dram_mb"]) == 4


def test_cli_rejects_unknown_models_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["bench", "catalogue", "--models", f"{SMALL},resnt18", "--out", str(out), "-q"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown model 'resnt18'" in err[0] and "did you mean" in err[0]
    assert not out.exists()
