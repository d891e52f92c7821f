"""Partition plans: the independent checker, metrics, JSON files and ONNX export.

Graphs come from ``onnx_builders``; node labels used below:

* residual_block: 0 stem, 1 conv1, 2 relu1, 3 conv2, 4 add(conv2, stem), 5 relu2
* conv_chain:     0 conv1, 1 relu, 2 conv2
* fan_out:        0 relu, 1 conv_a, 2 conv_b, 3 sigmoid, 4 sum(conv_a, conv_b, sigmoid)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from accel_model import Accelerator, compulsory_traffic, make_cost_model
from fusionplan.ir.errors import PlanError
from fusionplan.planning.plan import MB, PLAN_FORMAT, PLAN_FORMAT_VERSION, Plan
from tests.onnx_builders import (
    conv_bn,
    conv_chain,
    fan_out,
    residual_block,
    save,
    to_graph,
    view_ops,
)

BIG = 1 << 20


def make_plan(builder, groups: list[list[str]], beta: int = BIG, b: int = 1, **kw) -> Plan:
    graph = to_graph(builder())
    cm = make_cost_model(graph, Accelerator(beta, "lbdf", b))
    index = graph.node_index
    masks = [sum(1 << index[name] for name in grp) for grp in groups]
    return Plan(graph, cm, masks, **kw)


RES_SPLIT = [["stem", "conv1", "relu1"], ["conv2", "add", "relu2"]]


# ----------------------------------------------------------------------------- validate
def test_valid_plans_pass():
    for builder, groups in [
        (residual_block, RES_SPLIT),
        (residual_block, [["stem", "conv1", "relu1", "conv2", "add", "relu2"]]),
        (fan_out, [["relu", "conv_a"], ["conv_b"], ["sigmoid", "sum"]]),
    ]:
        plan = make_plan(builder, groups)
        assert plan.problems() == []
        assert plan.validate() is plan


VIOLATIONS = {
    "node in two groups": (
        residual_block,
        BIG,
        [["stem", "conv1", "relu1"], ["relu1", "conv2", "add", "relu2"]],
        "node 'relu1' is in more than one group",
    ),
    "node in no group": (
        residual_block,
        BIG,
        [["stem", "conv1", "relu1"], ["conv2", "add"]],
        "1 node(s) in no group, e.g. 'relu2'",
    ),
    # conv_a and conv_b share a producer and a consumer but no edge: two islands.
    "group not weakly connected": (
        fan_out,
        BIG,
        [["relu"], ["conv_a", "conv_b"], ["sigmoid"], ["sum"]],
        "group starting at 'conv_a' is not weakly connected",
    ),
    # {stem, add} is connected by the skip edge; stem -> conv1 and conv2 -> add make the
    # two groups wait on each other.
    "cyclic quotient": (
        residual_block,
        BIG,
        [["stem", "add"], ["conv1", "relu1", "conv2"], ["relu2"]],
        "the groups depend on each other in a cycle",
    ),
    # weights 148 + 296 = 444; rings: x 3 rows of W*C = 8*4, conv1.out 1 row of 8*4,
    # relu.out 3 rows of 8*4, y 1 row of 8*8 -> 96 + 32 + 96 + 64 = 288; 444 + 288 = 732 B,
    # not < 600 B.
    "group over the buffer": (
        conv_chain,
        600,
        [["conv1", "relu", "conv2"]],
        "group starting at 'conv1' needs 732 B of buffer, not < 600 B",
    ),
    # the group needs exactly beta bytes: validity is strict (F_beta < beta)
    "group exactly at the buffer": (
        conv_chain,
        732,
        [["conv1", "relu", "conv2"]],
        "group starting at 'conv1' needs 732 B of buffer, not < 732 B",
    ),
}


@pytest.mark.parametrize("case", list(VIOLATIONS), ids=list(VIOLATIONS))
def test_each_violation_is_rejected_alone(case):
    builder, beta, groups, message = VIOLATIONS[case]
    plan = make_plan(builder, groups, beta)
    assert plan.problems() == [message]
    with pytest.raises(PlanError, match=f"^invalid plan: {re.escape(message)}$"):
        plan.validate()


def test_fixing_the_violation_makes_the_plan_valid():
    # the same graphs and buffers as two of the violations, grouped correctly
    make_plan(conv_chain, [["conv1", "relu", "conv2"]], 733).validate()
    make_plan(conv_chain, [["conv1", "relu"], ["conv2"]], 600).validate()
    make_plan(residual_block, [["stem", "conv1", "relu1", "conv2", "add"], ["relu2"]]).validate()


def test_unfusable_op_fused_with_others_is_rejected():
    # beta 300: conv2 alone needs 296 weights + 3 rows * 32 + y's row 64 = 456 B, so it is
    # unfusable; {relu, conv2} would need 456 + conv1.out's row 32 = 488 B as well, reported
    # after the unfusable-op problem.
    plan = make_plan(conv_chain, [["conv1"], ["relu", "conv2"]], 300)
    assert plan.unfusable == 1 << 2
    problems = plan.problems()
    assert problems[0] == "unfusable node 'conv2' is fused"
    assert problems[1:] == ["group starting at 'relu' needs 488 B of buffer, not < 300 B"]
    with pytest.raises(PlanError, match=r"unfusable node 'conv2' is fused \(\+1 more\)"):
        plan.validate()


def test_unfusable_op_alone_is_fine():
    # {conv1, relu}: 148 + (3 + 1 + 1) rows * 32 = 308 B < 320 B; conv2 alone (456 B) is not
    plan = make_plan(conv_chain, [["conv1", "relu"], ["conv2"]], 320)
    assert plan.validate().problems() == []


def test_empty_group_and_foreign_node_ids_are_rejected():
    graph = to_graph(residual_block())
    cm = make_cost_model(graph, Accelerator(BIG))
    with pytest.raises(PlanError, match="a group is empty"):
        Plan(graph, cm, [0, graph.all_nodes]).validate()
    # a node id the graph does not have is a PlanError, not an IndexError
    for groups in ([graph.all_nodes | 1 << 10], [1 << 10, graph.all_nodes]):
        with pytest.raises(PlanError, match="node id outside the graph"):
            Plan(graph, cm, groups).validate()


def test_validate_recomputes_costs_without_the_memo():
    plan = make_plan(conv_chain, [["conv1", "relu", "conv2"]], 600)
    cm = plan.cost_model
    g = plan.groups[0]
    # poison the memo: a search bug that cached a wrong cost must not fool the checker
    cm._memo[g] = cm._memo.get(g, cm.cost(g))._replace(buffer=1, valid=True)
    assert cm.is_valid(g)
    with pytest.raises(PlanError, match="needs 732 B"):
        plan.validate()


# ----------------------------------------------------------------------------- metrics
def test_metrics_are_sums_of_group_costs():
    plan = make_plan(residual_block, RES_SPLIT, saved_info={"search": "rs"})
    cm, m = plan.cost_model, plan.metrics
    costs = [cm.compute_uncached(g) for g in plan.groups]
    assert m.dram_bytes == sum(c.dram for c in costs)
    assert m.fusable_dram_bytes == m.dram_bytes
    assert m.unfusable_dram_bytes == 0
    assert m.mbu_bytes == max(c.buffer for c in costs)
    assert (m.groups, m.fused_groups, m.unfusable_ops) == (2, 2, 0)
    # compulsory traffic: x (4*8*8) + y (4*8*8) + 3 convs * (4*4*9 + 4)
    assert m.lower_bound_bytes == 256 + 256 + 3 * 148 == compulsory_traffic(plan.graph, 1)
    # {stem, conv1, relu1}: x in, stem.out and relu1.out out, 2 convs of weights;
    # {conv2, add, relu2}: relu1.out and stem.out in, y out, 1 conv of weights
    assert m.dram_bytes == (256 + 256 + 256 + 2 * 148) + (256 + 256 + 256 + 148)
    assert m.dram_mb == m.dram_bytes / MB
    assert m.mbu_kb == m.mbu_bytes / 1024
    assert m.dram_bytes >= m.lower_bound_bytes


@pytest.mark.parametrize("b", [1, 2])
def test_metrics_split_fusable_and_unfusable(b):
    # conv2 is unfusable at 320 B (456 B alone) for b = 1, and at 640 B for b = 2, where
    # {conv1, relu} fits (308 B per byte of element)
    plan = make_plan(conv_chain, [["conv1", "relu"], ["conv2"]], 320 * b, b=b)
    plan.validate()
    m, cm = plan.metrics, plan.cost_model
    fused, alone = cm.compute_uncached(0b011), cm.compute_uncached(0b100)
    assert m.fusable_dram_bytes == fused.dram == b * (256 + 256 + 148)
    # conv2 alone at 320 B per element: row bands of h = 2 (128 + 4 * 32 = 256 < 320; h = 3
    # needs 192 + 5 * 32 = 352) give 4 bands, 768 + 4 * 296 = 1952; channel passes of m = 4
    # (4 * (37 + 8) = 180 < 320 - 96 = 224, m = 5 needs 225) give 2 passes,
    # 768 + 296 + 256 = 1320 (docs/cost-model.md, "Single-layer cost")
    assert m.unfusable_dram_bytes == alone.dram == b * 1320
    assert m.dram_bytes == m.fusable_dram_bytes + m.unfusable_dram_bytes
    # MBU is the largest buffer among *fusable* groups: the fused pair's 308 B per byte of
    # element (x 3 rows, conv1.out 1, relu.out 1 of 32, and 148 weights)
    assert m.mbu_bytes == fused.buffer == b * (148 + 3 * 32 + 32 + 32)
    assert (m.groups, m.fused_groups, m.unfusable_ops) == (2, 1, 1)
    assert m.compulsory_bytes == b * (256 + 512 + 148 + 296)
    # no search ran: the traffic bound (docs/cost-model.md, "Lower bounds"): conv2 alone
    # (an atom) 1320, the other weights 148, x read 256, relu's output written for conv2 256
    assert m.lower_bound_bytes == b * (1320 + 148 + 256 + 256) == m.dram_bytes
    assert (m.gap, m.bound_method) == (0.0, "traffic bound")
    d = m.as_dict()
    assert d["dram_bytes"] == m.dram_bytes and d["mbu_kb"] == m.mbu_kb


# ----------------------------------------------------------------------------- JSON
def test_json_round_trip():
    info = {"search": "rs", "seed": 3, "budget": 10, "trace": [(1, 2000), (4, 1980)]}
    plan = make_plan(residual_block, RES_SPLIT, saved_info=info)
    text = plan.to_json()
    data = json.loads(text)
    assert data["format"] == PLAN_FORMAT and data["version"] == PLAN_FORMAT_VERSION
    assert data["accelerator"] == {
        "buffer_bytes": BIG,
        "scheme": "lbdf",
        "bytes_per_element": 1,
        "single_layer": "tiled",
        "pe_unroll": 32,
        "in_place": True,
        "depthwise_weights": True,
        "conventions": [],
        "profile": "fusionplan",
    }
    assert [g["nodes"] for g in data["groups"]] == RES_SPLIT  # ONNX node names
    for entry, g in zip(data["groups"], plan.groups, strict=True):
        cost = plan.cost_model.compute_uncached(g)
        assert (entry["buffer_bytes"], entry["dram_bytes"]) == (cost.buffer, cost.dram)
    assert data["metrics"] == plan.metrics.as_dict()
    assert data["search"]["seed"] == 3

    # a fresh import of the same model: groups are matched by name, not by object identity
    graph = to_graph(residual_block())
    back = Plan.from_json(graph, make_cost_model(graph, Accelerator(BIG)), text)
    assert back.groups == plan.groups
    assert back.metrics == plan.metrics
    assert back.info["seed"] == 3
    assert back.to_json() == text
    back.validate()


def test_json_keeps_execution_order():
    # groups given out of order come back in an order the quotient graph allows
    plan = make_plan(residual_block, list(reversed(RES_SPLIT)))
    assert [sorted(plan.group_of()[n] for n in grp) for grp in RES_SPLIT] == [[0] * 3, [1] * 3]


def _plan_text(**changes) -> str:
    data = json.loads(make_plan(residual_block, RES_SPLIT).to_json())
    data.update(changes)
    return json.dumps(data)


BAD_FILES = {
    "not JSON": ('{"format": "fusionplan.plan", ', "not JSON"),
    "no format": (json.dumps({"groups": []}), "not a fusionplan plan file"),
    "other format": (_plan_text(format="something.else"), "not a fusionplan plan file"),
    "future version": (_plan_text(version=99), "version 99 is not supported"),
    "unknown node": (
        _plan_text(groups=[{"nodes": ["stem", "conv9"]}]),
        "plan names node 'conv9', which model 'model' lacks",
    ),
    "JSON list": ("[1, 2]", "not a fusionplan plan file"),
    "groups not a list": (_plan_text(groups=5), "groups"),
    "group not an object": (_plan_text(groups=[3]), "group"),
    "nodes not a list of names": (_plan_text(groups=[{"nodes": [["stem"]]}]), "node"),
}


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_from_json_rejects_bad_files(case):
    text, message = BAD_FILES[case]
    graph = to_graph(residual_block())
    cm = make_cost_model(graph, Accelerator(BIG))
    with pytest.raises(PlanError, match=re.escape(message)):
        Plan.from_json(graph, cm, text)


def test_save_writes_the_json(tmp_path: Path):
    plan = make_plan(residual_block, RES_SPLIT)
    out = plan.save(tmp_path / "sub" / "plan.json")
    assert out.read_text() == plan.to_json() + "\n"


def test_save_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    plan = make_plan(residual_block, RES_SPLIT)
    real_write_text = Path.write_text

    def failing_write_text(self, text, *args, **kwargs):
        real_write_text(self, text[:10], *args, **kwargs)  # a partial write, then a crash
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", failing_write_text)
    target = tmp_path / "plan.json"
    with pytest.raises(OSError, match="disk full"):
        plan.save(target)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary left behind

    monkeypatch.undo()
    target.write_text("old plan\n")
    monkeypatch.setattr(Path, "write_text", failing_write_text)
    with pytest.raises(OSError):
        plan.save(target)
    monkeypatch.undo()
    assert target.read_text() == "old plan\n"  # the previous file is untouched
    assert list(tmp_path.iterdir()) == [target]


# ----------------------------------------------------------------------------- ONNX export
def _unnamed(model: onnx.ModelProto) -> onnx.ModelProto:
    for node in model.graph.node:
        node.name = ""
    return model


@pytest.mark.parametrize(
    "builder",
    [residual_block, conv_bn, view_ops, lambda: _unnamed(view_ops())],
    ids=["residual", "folded_bn", "view_ops", "unnamed_nodes"],
)
def test_annotate_onnx(builder, tmp_path: Path):
    import onnxruntime as ort

    model = builder()
    model.ir_version = 8  # what onnxruntime accepts, whatever the installed onnx writes
    src = save(model, tmp_path, "src")
    graph = to_graph(model)
    cm = make_cost_model(graph, Accelerator(BIG))
    # one group per pair of consecutive compute nodes, so that group ids differ
    n = len(graph)
    plan = Plan(graph, cm, [(0b11 << i) & graph.all_nodes for i in range(0, n, 2)]).validate()
    assert plan.metrics.groups == (n + 1) // 2

    dst = plan.annotate_onnx(src, tmp_path / "out" / "annotated.onnx")
    onnx.checker.check_model(str(dst))
    annotated = onnx.load(str(dst))
    from fusionplan.ir.onnx_model import onnx_node_names

    tags = {}
    for node, name in zip(annotated.graph.node, onnx_node_names(annotated.graph), strict=True):
        props = {p.key: p.value for p in node.metadata_props}
        if "fusionplan.group" in props:
            tags[name] = int(props["fusionplan.group"])
            gi = tags[name]
            assert int(props["fusionplan.group_dram"]) == cm.dram_bytes(plan.groups[gi])
            assert f"fusion group {gi}" in node.doc_string
    assert tags == plan.group_of()  # every compute node tagged, folded/view ops not

    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for i in model.graph.input
    }
    before = ort.InferenceSession(str(src)).run(None, feeds)
    after = ort.InferenceSession(str(dst)).run(None, feeds)
    assert len(before) == len(after) == len(model.graph.output)
    for x, y in zip(before, after, strict=True):
        np.testing.assert_array_equal(x, y)


def test_atomic_writes_respect_the_umask(tmp_path):
    import os

    from fusionplan.ir.io import write_text_atomic

    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "out.json", "{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
