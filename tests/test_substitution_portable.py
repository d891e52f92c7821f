"""Portable rewrites (issue 29): the substitute pass writes standard ONNX unless the target is
onnxruntime, a fused node of every shape expands into standard ops that compute the same,
the equivalence check runs with onnxruntime's optimisations off, and the headline speedup is
the measured one where a measurement ran."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import fusionplan as fp
from fusionplan.ir.errors import ConfigError, ModelError
from fusionplan.ir.onnx_model import from_onnx, to_onnx
from fusionplan.ir.onnx_run import check_equivalence, max_relative_error, run_model
from fusionplan.passes.substitution.pipeline import SubstitutionRequest, substitute
from tests.onnx_builders import save
from tests.substitution_models import (
    apply_everywhere,
    assert_standard_ops,
    inception_block,
    mlp,
    model,
    weight,
)
from tests.test_cli import invoke

X = {"x": (1, 4, 6, 6)}


def conv_add(activation: str | None = None) -> onnx.ModelProto:
    """``Conv(x) + x`` (a residual add), then ``activation`` if given: ResNeXt's block tail."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "x"], ["s" if activation else "y"]),
    ]
    if activation:
        attrs = {"alpha": 0.2} if activation == "LeakyRelu" else {}
        nodes.append(helper.make_node(activation, ["s"], ["y"], **attrs))
    return model(nodes, X, ["y"], [weight("w", 4, 4, 3, 3), weight("b", 4)])


def reference_outputs(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    """``m`` run by onnx's reference evaluator, which knows the standard ops only, on the
    input :func:`run_model` draws (seed 0)."""
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in m.graph.input
    }
    names = [o.name for o in m.graph.output]
    return dict(zip(names, ReferenceEvaluator(m).run(None, feeds), strict=True))


@pytest.mark.parametrize("activation", [None, "Relu", "LeakyRelu"])
def test_a_fused_conv_with_a_residual_expands_to_standard_ops(activation: str | None) -> None:
    # the resnext50 crash: a FusedConv with a Z input and no activation expanded into a node
    # with no op (AttributeError in to_onnx)
    m = conv_add(activation)
    rule = "fuse-conv-add-activation" if activation else "fuse-conv-add"
    g, applied = apply_everywhere(m, rule)
    assert applied == 1 and [n.op for n in g.nodes.values()] == ["com.microsoft.FusedConv"]
    portable = to_onnx(g, standard_ops=True)
    expected = ["Conv", "Add", *([activation] if activation else [])]
    assert [n.op_type for n in portable.graph.node] == expected
    assert_standard_ops(portable)
    assert [n.output[0] for n in portable.graph.node][-1] == "y"
    assert check_equivalence(m, portable).ok
    if activation == "LeakyRelu":
        assert helper.get_attribute_value(portable.graph.node[2].attribute[0]) == pytest.approx(0.2)
    ref = reference_outputs(m)
    assert max_relative_error(ref, reference_outputs(portable)) <= 1e-5


def test_a_fused_gemm_keeps_its_leaky_slope_in_standard_ops() -> None:
    m = model(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["c"]),
            helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.3),
        ],
        {"x": (2, 8)},
        ["y"],
        [weight("w", 8, 8), weight("b", 8)],
    )
    g, applied = apply_everywhere(m, "fuse-gemm-activation")
    assert applied == 1
    portable = to_onnx(g, standard_ops=True)
    gemm, act = portable.graph.node
    assert (gemm.op_type, act.op_type) == ("Gemm", "LeakyRelu")
    assert {a.name for a in gemm.attribute} == set()  # no activation_alpha left on the Gemm
    assert helper.get_attribute_value(act.attribute[0]) == pytest.approx(0.3)
    assert check_equivalence(m, portable).ok


@pytest.mark.parametrize(
    ("builder", "rules"),
    [
        (inception_block, ["fuse-conv-activation", "merge-sibling-convs", "enlarge-conv-kernel"]),
        (lambda: conv_add("Relu"), ["fuse-conv-add-activation", "fuse-conv-add"]),
        (mlp, ["matmul-add-to-gemm", "fuse-gemm-activation", "merge-sibling-gemms"]),
    ],
    ids=["convs", "residual", "mlp"],
)
def test_target_onnx_is_contrib_free_and_onnxruntime_keeps_contrib_ops(builder, rules) -> None:
    m = builder()
    onnx_out = substitute(m, SubstitutionRequest(search="taso", rules=rules, budget=200))
    ort_out = substitute(
        m, SubstitutionRequest(search="taso", rules=rules, budget=200, target="onnxruntime")
    )
    assert onnx_out.report.steps == ort_out.report.steps and onnx_out.report.steps
    assert_standard_ops(onnx_out.model)
    assert onnx_out.report.target == "onnx" and ort_out.report.target == "onnxruntime"
    assert any(n.domain == "com.microsoft" for n in ort_out.model.graph.node)
    assert "com.microsoft" in {o.domain for o in ort_out.model.opset_import}
    for out in (onnx_out, ort_out):
        assert check_equivalence(m, out.model).ok
    ref = run_model(m, optimize=False)
    assert max_relative_error(ref, reference_outputs(onnx_out.model)) <= 1e-4


def test_unknown_target_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown target 'tensorrt'"):
        substitute(conv_add(), SubstitutionRequest(target="tensorrt"))  # type: ignore[arg-type]


def test_equivalence_runs_with_onnxruntime_optimisations_off(monkeypatch) -> None:
    import onnxruntime as ort

    levels = []
    real = ort.InferenceSession

    def spy(model, options=None, **kwargs):
        levels.append(options.graph_optimization_level)
        return real(model, options, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    m = conv_add("Relu")
    assert check_equivalence(m, m).ok
    assert levels == [ort.GraphOptimizationLevel.ORT_DISABLE_ALL] * 2


def test_prepass_on_a_residual_without_activation_plans(tmp_path: Path) -> None:
    path = save(conv_add(), tmp_path, "res")
    text = invoke("plan", path, "--prepass", "substitute", "--budget", "20", "-q").output
    assert "DRAM" in text
    result = substitute(onnx.load(path), SubstitutionRequest(budget=20))
    assert_standard_ops(result.model)
    report = result.report.to_json()
    assert report["speedup_measured"] is None and report["speedup_baseline"] is None
    assert "estimated on h100 roofline" in result.summary()


def test_headline_is_the_measured_speedup_when_the_guard_ran(tmp_path: Path) -> None:
    result = fp.substitute(inception_block(), search="taso", budget=200, guard=True)
    r = result.report
    m = r.measured_cpu
    assert m is not None and m["original_ms"] > 0 and m["rewritten_ms"] > 0
    assert r.speedup_measured == pytest.approx(m["original_ms"] / m["rewritten_ms"])
    data = r.to_json()
    assert data["speedup_measured"] == r.speedup_measured
    assert data["speedup_estimated"] == r.speedup_estimated  # 1.0 if the guard kept nothing
    assert "ORT_ENABLE_ALL" in data["speedup_baseline"]
    headline = next(line for line in r.summary().splitlines() if "speedup" in line)
    assert headline.strip().startswith(f"speedup  {r.speedup_measured:.2f}x measured")
    assert f"estimated on h100 roofline: {r.speedup_estimated:.2f}x" in headline


def test_autograph_measure_also_gives_a_measured_headline() -> None:
    request = SubstitutionRequest(search="autograph", budget=60, measure="ort")
    r = substitute(inception_block(), request).report
    assert r.measured and r.speedup_measured is not None and r.speedup_measured > 0
    assert r.to_json()["speedup_baseline"].startswith("the original model in onnxruntime")


def test_contrib_ops_of_the_original_are_expanded_or_named() -> None:
    # a model already optimised by onnxruntime: its FusedConv has a standard form, its
    # contrib Gelu has none and stays, named in the summary rather than hidden
    nodes = [
        helper.make_node(
            "FusedConv", ["x", "w", "b"], ["c"], domain="com.microsoft", activation="Relu"
        ),
        helper.make_node("Gelu", ["c"], ["y"], domain="com.microsoft"),
    ]
    info = [helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, [1, 4, 6, 6]) for t in "xyc"]
    inits = [weight("w", 4, 4, 1, 1), weight("b", 4)]
    graph = helper.make_graph(nodes, "g", info[:1], info[1:2], inits, value_info=info[2:])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 8
    r = substitute(m, SubstitutionRequest(search="taso", budget=20))
    assert [(n.domain, n.op_type) for n in r.model.graph.node] == [
        ("", "Conv"),
        ("", "Relu"),
        ("com.microsoft", "Gelu"),
    ]
    assert "standard ONNX ops, but com.microsoft.Gelu of the original has no standard form" in (
        r.summary()
    )


def test_a_fused_op_whose_activation_has_no_standard_form_is_refused() -> None:
    """A FusedConv from the original model clipping at [0, 6]: standard ONNX's Clip takes its
    bounds as inputs, so writing it without them would change what the model computes."""
    conv = helper.make_node(
        "FusedConv", ["x", "w"], ["y"], domain="com.microsoft",
        activation="Clip", activation_params=[0.0, 6.0],
    )  # fmt: skip
    graph = helper.make_graph(
        [conv],
        "clipped",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [weight("w", 4, 3, 1, 1)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    m = helper.make_model(graph, opset_imports=opsets)
    g = from_onnx(m)
    assert to_onnx(g).graph.node[0].op_type == "FusedConv"  # target onnxruntime: kept
    with pytest.raises(ModelError, match="activation Clip has no standard-op form"):
        to_onnx(g, standard_ops=True)
