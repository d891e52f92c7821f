"""The ``fusionplan`` command line (docs/design.md, "Data flow").

Successful runs go through ``click.testing.CliRunner`` (in process); exit codes and error
output go through the installed console script (``fusionplan.app.cli:main``) in a subprocess,
which is what a user sees. The search is ``rs`` with a small budget everywhere: these tests
are about the front end, not plan quality.
"""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from accel_model import Accelerator, make_cost_model
from fusionplan.app.cli import COMMANDS, cli
from fusionplan.ir.onnx_import import load_model
from fusionplan.planning.plan import Plan
from tests.onnx_builders import dynamic_batch, residual_block, save, wide_chains, with_unknown_op

BIN = Path(sys.executable).parent / "fusionplan"
FAST = ["--search", "rs", "--budget", "10", "-q"]
HEAVY_MODULES = ("torch", "torchvision", "onnx", "onnxruntime", "pymoo", "matplotlib")
BODY_MODULES = ("torch", "torchvision", "torch_geometric", "onnxruntime", "pymoo", "matplotlib")
"""Modules that take seconds to import: only a command's body (the work) loads them."""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("models")
    save(residual_block(), d, "res")
    save(dynamic_batch(), d, "dyn")
    (d / "junk.onnx").write_text("this is not a protobuf\n")
    return d


def invoke(*args: str):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def run_bin(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    if not BIN.exists():
        pytest.skip(f"console script not installed at {BIN}")
    return subprocess.run(
        [str(BIN), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def load_plan(model_path, text: str) -> Plan:
    """Rebuild a plan file against a fresh import of its model, and check it."""
    data = json.loads(text)
    graph = load_model(model_path) if Path(model_path).is_file() else _zoo(model_path)
    accel = data["accelerator"]
    cm = make_cost_model(
        graph,
        Accelerator(
            accel["buffer_bytes"],
            accel["scheme"],
            accel["bytes_per_element"],
            accel["single_layer"],
        ),
    )
    return Plan.from_json(graph, cm, text).validate()


def _zoo(name: str):
    from fusionplan.data.zoo import resolve_model

    return resolve_model(name)


def check_annotated(path: Path, plan: Plan) -> None:
    onnx.checker.check_model(str(path))
    model = onnx.load(str(path), load_external_data=False)
    tags = {
        node.name: int(p.value)
        for node in model.graph.node
        for p in node.metadata_props
        if p.key == "fusionplan.group"
    }
    assert tags == plan.group_of()


# ----------------------------------------------------------------------------- plan
def test_plan_small_onnx(models: Path, tmp_path: Path):
    out, ann = tmp_path / "plan.json", tmp_path / "annotated.onnx"
    src = models / "res.onnx"
    result = invoke("plan", src, "--buffer", "500B", *FAST, "-o", out, "--onnx-out", ann)
    assert f"wrote {out}" in result.stdout and f"wrote {ann}" in result.stdout
    assert "DRAM" in result.stdout and "lower bound" in result.stdout
    plan = load_plan(src, out.read_text())
    assert plan.cost_model.beta == 500
    assert plan.metrics.groups >= 2  # the whole block needs 860 B: it had to be split
    assert plan.info["search"] == "rs" and plan.info["budget"] == 10
    check_annotated(ann, plan)


def test_plan_json_output(models: Path, tmp_path: Path):
    out = tmp_path / "plan.json"
    src = models / "res.onnx"
    result = invoke("plan", src, "--buffer", "1KB", "--scheme", "BRR", *FAST, "--json", "-o", out)
    data = json.loads(result.stdout)  # nothing but the JSON on stdout
    assert data["format"] == "fusionplan.plan"
    assert data["accelerator"] == {
        "buffer_bytes": 1024,
        "scheme": "brr",
        "bytes_per_element": 1,
        "single_layer": "tiled",
        "pe_unroll": 32,
        "in_place": True,
        "depthwise_weights": True,
        "conventions": [],
        "profile": "fusionplan",
    }
    assert data["search"]["proposed"] == 10
    assert out.read_text() == result.stdout
    load_plan(src, result.stdout)


@pytest.mark.slow
def test_plan_resnet18(tmp_path: Path):
    out, ann = tmp_path / "r18.json", tmp_path / "r18.onnx"
    invoke("plan", "resnet18", "--buffer", "128KB", *FAST, "-o", out, "--onnx-out", ann)
    plan = load_plan("resnet18", out.read_text())
    assert plan.graph.name == "resnet18" and len(plan.graph) > 40
    assert plan.metrics.dram_bytes >= plan.metrics.lower_bound_bytes
    check_annotated(ann, plan)


def test_dynamic_model_works_with_input_shape(models: Path, tmp_path: Path):
    out = tmp_path / "plan.json"
    invoke("plan", models / "dyn.onnx", "--input-shape", "x=1x4x8x8", *FAST, "-o", out)
    data = json.loads(out.read_text())
    assert [g["nodes"] for g in data["groups"]] == [["conv1", "relu"]]


# ----------------------------------------------------------------------------- bad input
BAD_PLAN_INPUT = {
    "missing file": (["missing.onnx"], "model file not found: missing.onnx"),
    "not ONNX": (["{models}/junk.onnx"], "is not an ONNX model"),
    "dynamic shape": (["{models}/dyn.onnx"], "tensor 'x' has a dynamic or unknown shape"),
    "buffer 0": (["{models}/res.onnx", "--buffer", "0"], "buffer size '0' must be positive"),
    "buffer 12XB": (["{models}/res.onnx", "--buffer", "12XB"], "unknown unit 'XB'"),
    "unknown zoo model": (["resnet9000"], "unknown model 'resnet9000'"),
    "budget 0": (["{models}/res.onnx", "--budget", "0"], "budget must be at least 1"),
    "unknown splitter": (["{models}/res.onnx", "--splitter", "nope"], "unknown splitter 'nope'"),
    "bad input shape": (
        ["{models}/dyn.onnx", "--input-shape", "x=1x4xEx8"],
        "is not NAME=1x3x224x224",
    ),
    "zero dimension": (
        ["{models}/dyn.onnx", "--input-shape", "x=0x4x8x8"],
        "'x=0x4x8x8': every dimension must be positive, got 0",
    ),
    "batch 2": (
        ["{models}/dyn.onnx", "--input-shape", "x=2x4x8x8"],
        "has batch 2, but the planner plans batch 1",
    ),
}


@pytest.mark.parametrize("case", list(BAD_PLAN_INPUT), ids=list(BAD_PLAN_INPUT))
def test_plan_bad_input(case, models: Path, tmp_path: Path):
    args, message = BAD_PLAN_INPUT[case]
    args = [a.format(models=models) for a in args]
    # the budget and search settings come first so that the case's own flags win
    proc = run_bin(
        "plan",
        "--search",
        "rs",
        "--budget",
        "5",
        "-q",
        *args,
        "-o",
        "out.json",
        "--onnx-out",
        "out.onnx",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fusionplan: error: ")
    assert message in lines[0]
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no plan, no annotated model, no temporaries


def test_sweep_bad_buffer_writes_nothing(models: Path, tmp_path: Path):
    proc = run_bin(
        "sweep",
        models / "res.onnx",
        "--buffers",
        "1KB,12XB",
        *FAST,
        "-o",
        "s.csv",
        "--plot",
        "s.png",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fusionplan: error: buffer size '12XB' has unknown unit 'XB' (use B, KB, MB or GB)"
    ]
    assert list(tmp_path.iterdir()) == []


def test_sweep_bad_budget_fails_before_exporting(tmp_path: Path, fusionplan_cache: Path):
    proc = run_bin("sweep", "squeezenet", "--budget", "0", "-q", "-o", "s.csv", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "fusionplan: error: budget must be at least 1 plan, got 0"
    ]
    assert list(tmp_path.iterdir()) == []
    assert not list(fusionplan_cache.glob("**/squeezenet*"))  # nothing was exported


def test_zoo_export_unknown_model(tmp_path: Path):
    proc = run_bin("zoo", "export", "resnet9000", "-o", "x.onnx", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("fusionplan: error: unknown model 'resnet9000'")
    assert list(tmp_path.iterdir()) == []


SAME_FILE_OUTPUTS = {  # the command (with a model that does not exist), its two outputs
    "plan": (["plan", "missing.onnx"], ["-o", "p.json", "--onnx-out", "./p.json"]),
    "sweep": (["sweep", "missing.onnx"], ["--plot", "s.png", "-o", "s.png"]),
    "streams": (["streams", "missing.onnx"], ["--trace", "t.json", "--gantt", "d/../t.json"]),
    "bench batching": (["bench", "batching"], ["--out", "b.md", "--plot", "b.md"]),
}


@pytest.mark.parametrize("case", list(SAME_FILE_OUTPUTS), ids=list(SAME_FILE_OUTPUTS))
def test_two_outputs_naming_one_file_are_refused(case, tmp_path: Path):
    """Refused before the model loads (the missing model is not what is reported)."""
    command, outputs = SAME_FILE_OUTPUTS[case]
    proc = run_bin(*command, *outputs, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusionplan: error: "), proc.stderr
    assert "both name" in lines[0] and "not found" not in lines[0]
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- sweep
def test_sweep_writes_csv_and_png(models: Path, tmp_path: Path):
    table, png = tmp_path / "sweep.csv", tmp_path / "sweep.png"
    src = models / "res.onnx"
    result = invoke("sweep", src, "--buffers", "2KB, 300B,600B", *FAST, "-o", table, "--plot", png)
    assert "DRAM MB" in result.stdout
    with table.open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["buffer_bytes"]) for r in rows] == [300, 600, 2048]
    assert [r["buffer"] for r in rows] == ["300B", "600B", "2KB"]
    for r in rows:
        assert float(r["dram_mb"]) >= float(r["lower_bound_mb"]) > 0
        assert float(r["mbu_kb"]) * 1024 < int(r["buffer_bytes"])
        assert r["scheme"] == "lbdf"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    as_json = json.loads(invoke("sweep", src, "--buffers", "2KB,300B", *FAST, "--json").stdout)
    assert [r["buffer_bytes"] for r in as_json] == [300, 2048]
    assert as_json[1]["dram_mb"] == pytest.approx(float(rows[2]["dram_mb"]))


def test_sweep_grid_table_names_each_onnx_model_by_its_stem(tmp_path: Path):
    """Models in one folder used to share a table cell: their path, cut to the column."""
    folder = tmp_path / "a-folder-whose-long-path-fills-the-model-column"
    folder.mkdir()
    paths = [save(residual_block(), folder, name) for name in ("block_one", "block_two")]
    models = tmp_path / "models.txt"
    models.write_text("".join(f"{p}\n" for p in paths))
    out = invoke("sweep", "--models", models, "--buffers", "2KB", *FAST, "-j", "1").stdout
    rows = [line for line in out.splitlines() if "lbdf" in line]
    assert [row.split()[1] for row in rows] == ["block_one", "block_two"], out


# ----------------------------------------------------------------------------- zoo
def test_zoo_list_json():
    rows = json.loads(invoke("zoo", "list", "--json").stdout)
    assert len(rows) == 12
    names = [r["name"] for r in rows]
    assert "resnet18" in names and "deeplabv3_mobilenet_v3_large" in names
    assert all(set(r) == {"name", "input_size", "description", "role", "cached"} for r in rows)
    assert {r["role"] for r in rows} == {"train", "unseen"}


@pytest.mark.slow
def test_zoo_export(tmp_path: Path):
    out = tmp_path / "x.onnx"
    result = invoke("zoo", "export", "resnet18", "-o", out)
    assert f"wrote {out}" in result.stdout
    onnx.checker.check_model(str(out))
    graph = load_model(out)
    assert len(graph) == len(_zoo("resnet18"))
    assert graph.tensors[graph.inputs[0]].shape == (3, 224, 224)


# ----------------------------------------------------------------------------- startup
def test_help_lists_commands_and_stays_light(tmp_path: Path):
    proc = run_bin("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in ("plan", "sweep", "zoo", "dataset", "train", "bench"):
        assert command in proc.stdout
    code = (
        "import sys, fusionplan.app.cli\n"
        f"print(sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules))"
    )
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]"


def test_every_command_group_helps_and_refuses_bad_options_without_heavy_imports():
    """`GROUP --help` and a bad option load no torch, onnxruntime or plotting: those load in
    the command bodies (`batch --help` took 15 s when they loaded with the module)."""
    code = (
        "import sys\n"
        "from fusionplan.app.cli import COMMANDS, cli\n"
        "for name in COMMANDS:\n"
        "    for args in ([name, '--help'], [name, '--no-such-option']):\n"
        "        try:\n"
        "            cli.main(args, standalone_mode=False)\n"
        "        except BaseException as exc:\n"
        "            print(name, type(exc).__name__, file=sys.stderr)\n"
        f"print(sorted(m for m in {BODY_MODULES!r} if m in sys.modules))"
    )
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines()[-1] == "[]", probe.stdout
    assert probe.stderr.split() == [w for name in COMMANDS for w in (name, "NoSuchOption")]


@pytest.mark.parametrize("args", [["batch", "--help"], ["batch", "nosuch"]], ids=" ".join)
def test_batch_help_and_a_bad_workload_are_quick(args, tmp_path: Path):
    start = time.perf_counter()
    proc = run_bin(*args, cwd=tmp_path)
    assert time.perf_counter() - start < 5.0  # generous: about 1 s here, 15 s with torch
    assert proc.returncode == (0 if "--help" in args else 2), proc.stderr


@pytest.mark.bench
def test_help_is_fast(tmp_path: Path):
    run_bin("--help", cwd=tmp_path)  # warm the file-system caches
    start = time.perf_counter()
    assert run_bin("--help", cwd=tmp_path).returncode == 0
    assert time.perf_counter() - start < 2.0


def test_version():
    from fusionplan import __version__

    assert __version__ in invoke("--version").stdout


def test_exact_search_is_no_worse_than_local_search(models: Path, tmp_path: Path):
    src = models / "res.onnx"
    exact = json.loads(
        invoke("plan", src, "--buffer", "500B", "--search", "exact", "-q", "--json").stdout
    )
    ls = json.loads(
        invoke(
            "plan", src, "--buffer", "500B", "--search", "ls", "--budget", "200", "-q", "--json"
        ).stdout
    )
    assert exact["search"]["optimal"] is True
    assert exact["search"]["lower_bound_bytes"] <= exact["metrics"]["dram_bytes"]
    assert exact["metrics"]["dram_bytes"] <= ls["metrics"]["dram_bytes"]
    assert (
        "proven optimal"
        in invoke("plan", src, "--buffer", "500B", "--search", "exact", "-q").stdout
    )


def test_an_unknown_op_is_one_warning_line(tmp_path: Path):
    model = save(with_unknown_op("MyOp"), tmp_path, "custom")
    proc = run_bin("plan", model, *FAST, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "fusionplan: warning: op type 'MyOp' (1 node) is not modelled: costed as a generic op "
        "(input + output traffic row by row, constant inputs as weights); --strict-ops refuses it"
    ]


# ----------------------------------------------------------------------------- interrupts
def test_sigint_stops_a_long_search_and_writes_nothing(tmp_path: Path):
    """Started as a shell script's background job is (SIGINT ignored), the command still
    stops on SIGINT: exit 130, one message, no output file."""
    if not BIN.exists():
        pytest.skip(f"console script not installed at {BIN}")
    model = save(wide_chains(), tmp_path, "wide")
    out = tmp_path / "plan.json"
    args = ["plan", model, "--search", "ls", "--budget", "100000000", "-q", "-o", out]
    proc = subprocess.Popen(
        [str(BIN), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        time.sleep(2)  # past start-up (main runs after a light import): the search runs
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=5)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines() == ["fusionplan: interrupted"]
    assert stdout == ""
    assert not out.exists() and list(tmp_path.iterdir()) == [model]
