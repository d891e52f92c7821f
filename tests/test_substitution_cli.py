"""``fusionplan substitute``, ``plan --prepass substitute``, ``fp.substitute`` and the
``substitute`` pre-pass: rewritten models are valid and equivalent; bad input is one line,
exit code 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import fusionplan as fp
from fusionplan.ir.onnx_model import from_onnx, to_onnx
from fusionplan.ir.onnx_run import check_equivalence
from fusionplan.passes import PASSES
from fusionplan.passes.manager import make_context
from tests.onnx_builders import dynamic_batch, save
from tests.substitution_models import inception_block, model, weight
from tests.test_cli import invoke, run_bin


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sub") / "block.onnx"
    onnx.save(inception_block(), path)
    return path


def test_cli_writes_an_equivalent_faster_model(block: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.onnx"
    result = invoke("substitute", block, "--search", "taso", "-q", "--json", "-o", out)
    report = json.loads(result.output)
    assert report["speedup_estimated"] > 1 and report["steps"] and report["max_rel_error"] <= 1e-4
    assert report["speedup_measured"] is None and report["target"] == "onnx"
    rewritten = onnx.load(out)
    onnx.checker.check_model(rewritten)
    assert check_equivalence(onnx.load(block), rewritten).ok
    assert len(rewritten.graph.node) == sum(report["ops_after"].values())


def test_cli_summary_names_rules_and_check(block: Path) -> None:
    text = invoke("substitute", block, "--search", "ocggs-dpp", "-K", "2", "-q").output
    assert "onnxruntime outputs equal" in text and "substitutions" in text


def _unrunnable(path: Path) -> None:
    """Valid ONNX that onnxruntime refuses to run (kernel_shape disagrees with W)."""
    m = model(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        {"x": (1, 1, 4, 4)},
        ["y"],
        [weight("w", 1, 1, 3, 3)],
    )
    m.graph.node[0].attribute.append(helper.make_attribute("kernel_shape", [5, 5]))
    onnx.save(m, path)


BAD = {
    "unknown rule": (["--rules", "fuse-everything"], "unknown substitution rule"),
    "unknown device": (["--device", "tpu9"], "unknown latency model"),
    "unknown search": (["--search", "genetic"], "unknown substitution search"),
    "missing file": (["--search", "taso"], "model file not found"),
    "unrunnable": (["--search", "taso"], "onnxruntime cannot run the model"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_is_one_line_and_writes_nothing(case: str, block: Path, tmp_path: Path):
    flags, message = BAD[case]
    work = tmp_path / "work"
    work.mkdir()
    source = block
    if case == "missing file":
        source = tmp_path / "nothere.onnx"
    elif case == "unrunnable":
        source = tmp_path / "bad.onnx"
        _unrunnable(source)
    proc = run_bin("substitute", source, "-q", *flags, "-o", "out.onnx", cwd=work)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusionplan: error: "), proc.stderr
    assert message in lines[0]
    assert list(work.iterdir()) == []


def test_a_symbolic_batch_is_fixed_with_input_shape(tmp_path: Path) -> None:
    src = save(dynamic_batch(), tmp_path, "dyn")
    proc = run_bin("substitute", src, "-q", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusionplan: error: substitute: tensor 'x'")
    assert "give it a static shape, e.g. --input-shape x=1x4x8x8" in lines[0]
    out = tmp_path / "out.onnx"
    invoke("substitute", src, "--input-shape", "x=1x4x8x8", "-q", "-o", out)
    dims = onnx.load(out).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 4, 8, 8]


def test_plan_with_substitute_prepass(block: Path, tmp_path: Path) -> None:
    option, annotated = "substitute.search=ocggs-dpp", tmp_path / "planned.onnx"
    text = invoke("plan", block, "--prepass", "substitute", "--pass-option", option,
                  "--buffer", "1KB", "--budget", "20", "-q", "--json", "--onnx-out",
                  annotated).output  # fmt: skip
    data = json.loads(text)
    (record,) = data["prepasses"]
    assert record["pass"] == "substitute" and record["modified"]
    assert record["report"]["search"] == "ocggs-dpp" and record["report"]["steps"]
    # --onnx-out writes the model planned, the rewritten one, every op tagged with its group
    model = onnx.load(annotated)
    tags = {n.name: int(p.value) for n in model.graph.node for p in n.metadata_props
            if p.key == "fusionplan.group"}  # fmt: skip
    assert tags == {name: g["id"] for g in data["groups"] for name in g["nodes"]}
    assert len(tags) == data["model"]["ops"] < len(onnx.load(block).graph.node)
    assert check_equivalence(onnx.load(block), model).ok


def test_api_and_pass_agree_with_onnxruntime(block: Path) -> None:
    result = fp.substitute(block, search="ocggs-sample", budget=200)
    assert result.report.speedup_estimated > 1
    assert check_equivalence(onnx.load(block), result.model).ok
    graph = from_onnx(onnx.load(block))
    passed = PASSES.get("substitute")().run(graph, make_context(PASSES, ["substitute"]))
    assert passed.modified and passed.graph is not graph and passed.headline
    rewritten = to_onnx(passed.graph, standard_ops=True)  # as the planner's graph is lowered
    domains = {n.domain for n in rewritten.graph.node}
    assert domains <= {""}, domains
    assert check_equivalence(onnx.load(block), rewritten).ok
    assert np.isfinite(passed.report.to_json()["speedup_estimated"])
