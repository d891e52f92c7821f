"""A new pre-pass with two options is one class plus one registration line.

The toy passes below are defined and registered here, without editing any product file,
and run in the pass pipeline through the Python API, the command line and an accelerator
file's ``passes:`` section; their reports reach the plan's JSON. Bad names and values are
one line, exit code 2, before any model is read.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from fusionplan.app import api
from fusionplan.app.cli import main
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.model import ModelGraph
from fusionplan.ir.onnx_model import from_onnx
from fusionplan.passes import PASSES
from fusionplan.passes.manager import (
    STATIC_SHAPES,
    STREAM_SCHEDULE,
    ModelPass,
    OptionError,
    PassContext,
    PassResult,
    Sequential,
    convert,
    make_context,
    parse_option_items,
)
from fusionplan.planning.plan import Plan
from tests.onnx_builders import dynamic_batch, residual_block, save

# residual_block: stem, conv1, relu1, conv2, add, relu2
OPS = {"Conv": 3, "Relu": 2, "Add": 1}


@dataclass(frozen=True)
class CountReport:
    op: str
    count: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        return f"{self.count} x {self.op}"


@dataclass(frozen=True)
class CountOptions:
    op: str = "Relu"
    scale: int = 1

    def check(self) -> None:
        if self.scale < 1:
            raise OptionError("scale", f"must be at least 1, got {self.scale}")


class CountOps(ModelPass):
    """Toy analysis: the number of ops of one type, times a scale."""

    name = "count-ops"
    Options = CountOptions
    needs = frozenset({STATIC_SHAPES})

    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        n = sum(node.op == self.options.op for node in graph.nodes.values())
        report = CountReport(self.options.op, n * self.options.scale)
        return PassResult(graph, False, report, report.summary())


class Copy(ModelPass):
    """Toy rewrite: an equal graph, reported as changed (it invalidates what it does not
    keep)."""

    name = "copy"
    rewrites = True
    keeps = frozenset({STATIC_SHAPES})

    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        g = graph
        copy = ModelGraph(g.nodes.values(), g.tensors, g.weights, g.inputs, g.outputs,
                        opsets=g.opsets, name=g.name)  # fmt: skip
        return PassResult(copy, True, CountReport("any", len(copy)), "copied")


class ReadsSchedule(ModelPass):
    """Toy consumer of the stream schedule: how many streams it found."""

    name = "reads-schedule"
    needs = frozenset({STREAM_SCHEDULE})

    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        streams = len(context.artifact(STREAM_SCHEDULE).streams)
        return PassResult(graph, False, CountReport("stream", streams), f"{streams} streams")


class Buffer(ModelPass):
    """Toy reader of the context: the buffer of the accelerator being planned for."""

    name = "buffer"

    def run(self, graph: ModelGraph, context: PassContext) -> PassResult:
        assert context.accelerator is not None
        report = CountReport("buffer bytes", context.accelerator.buffer_bytes)
        return PassResult(graph, False, report, report.summary())


@pytest.fixture
def toys():
    with (
        PASSES.registered("count-ops", CountOps),
        PASSES.registered("copy", Copy),
        PASSES.registered("reads-schedule", ReadsSchedule),
        PASSES.registered("buffer", Buffer),
    ):
        yield
    assert "count-ops" not in PASSES and "copy" not in PASSES


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(residual_block(), tmp_path_factory.mktemp("passes"), "res")


def test_toy_pass_runs_with_api_options_and_reaches_the_plan(toys, model):
    plan = api.plan(model, "256KB", budget=5, prepass=["count-ops"],
                    pass_options={"count-ops": {"op": "Conv", "scale": 3}})  # fmt: skip
    (record,) = plan.prepasses
    assert (record.name, record.modified) == ("count-ops", False)
    assert record.report == {"op": "Conv", "count": 3 * OPS["Conv"]}
    saved = json.loads(plan.to_json())["prepasses"]
    assert saved == [{"pass": "count-ops", "modified": False, "summary": "9 x Conv",
                      "report": {"op": "Conv", "count": 9}, "artifacts": {}}]  # fmt: skip
    assert "prepass      count-ops: 9 x Conv" in plan.summary()
    again = Plan.from_dict(plan.graph, plan.cost_model, plan.to_dict())
    assert again.prepasses == plan.prepasses  # a plan file keeps them


def test_toy_pass_runs_with_cli_options_over_the_accelerator_file(toys, model, tmp_path, capsys):
    accel = tmp_path / "acc.yaml"
    accel.write_text("buffer: 256KB\npasses:\n  count-ops: {op: Add, scale: 5}\n")
    main(["plan", str(model), "--accelerator", str(accel), "--prepass", "count-ops",
          "--budget", "5", "--json", "-q"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)["prepasses"][0]["report"]
    assert report == {"op": "Add", "count": 5 * OPS["Add"]}  # the file's options
    main(["plan", str(model), "--accelerator", str(accel), "--prepass", "count-ops",
          "--pass-option", "count-ops.op=Relu", "--budget", "5", "--json", "-q"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)["prepasses"][0]["report"]
    assert report == {"op": "Relu", "count": 5 * OPS["Relu"]}  # the command line wins


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("count-ops.scale=0", "--pass-option count-ops.scale: must be at least 1, got 0"),
        ("count-ops.scale=two", "--pass-option count-ops.scale: expected an integer, got 'two'"),
        ("count-ops.colour=red", "--pass-option count-ops.colour: no such option (known: op, "
                                 "scale)"),
        ("copy.op=Add", "--pass-option copy.*: pass copy does not run"),
        ("nope.op=Add", "--pass-option nope: unknown pass (choose from substitute, streams"),
        ("count-ops", "--pass-option 'count-ops' is not PASS.OPTION=VALUE"),
    ],
)  # fmt: skip
def test_bad_pass_options_fail_in_one_line_before_the_model_loads(toys, option, message, capsys):
    with pytest.raises(SystemExit) as done:  # the model does not exist: never read
        main(["plan", "missing.onnx", "--prepass", "count-ops", "--pass-option", option])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_bad_options_from_the_api_and_the_file_name_their_source(toys, model, tmp_path):
    with pytest.raises(ConfigError, match=r"^pass_options count-ops\.scale: must be at least"):
        api.plan(model, prepass=["count-ops"], pass_options={"count-ops": {"scale": -1}})
    with pytest.raises(ConfigError, match="unknown pass 'nope'"):
        api.plan(model, prepass=["nope"])
    accel = tmp_path / "acc.yaml"
    accel.write_text("buffer: 64KB\npasses:\n  count-ops: {scale: true}\n")
    with pytest.raises(ConfigError, match=r"acc\.yaml passes: count-ops\.scale: expected an"):
        api.plan(model, accelerator=accel)  # checked even where the pass does not run


def test_a_pass_needing_the_schedule_is_refused_unless_streams_runs_first(toys, model):
    graph = from_onnx(residual_block())
    with pytest.raises(ConfigError, match="reads-schedule needs the stream schedule"):
        Sequential(PASSES, make_context(PASSES, ["reads-schedule"]))
    with pytest.raises(ConfigError, match="reads-schedule needs the stream schedule"):
        Sequential(PASSES, make_context(PASSES, ["streams", "copy", "reads-schedule"]))
    done = Sequential(PASSES, make_context(PASSES, ["streams", "reads-schedule"])).run(graph)
    assert not done.modified and done.graph is graph
    streams = done.artifacts[STREAM_SCHEDULE].streams
    assert done.results[1].report == CountReport("stream", len(streams))
    assert sorted(op for ops in streams for op in ops) == sorted(graph.nodes)


def test_a_rewrite_drops_the_schedule_it_invalidates(toys, model):
    plan = api.plan(model, budget=5, prepass=["streams", "copy", "count-ops"])
    streams, copy, count = plan.prepasses
    assert streams.artifacts == {} and streams.invalidated == {STREAM_SCHEDULE: "copy"}
    assert copy.modified and count.report == {"op": "Relu", "count": OPS["Relu"]}
    assert "its stream schedule is stale: copy rewrote the graph after it" in plan.summary()
    assert len(plan.graph) == len(residual_block().graph.node)  # lowered from the model IR


def test_a_pass_that_changes_the_graph_must_say_it_rewrites(toys):
    class Liar(Copy):
        rewrites = False

    with PASSES.registered("liar", Liar):
        runner = Sequential(PASSES, make_context(PASSES, ["liar"]))
        with pytest.raises(ConfigError, match="liar changed the graph"):
            runner.run(from_onnx(residual_block()))


def test_options_convert_from_command_line_text():
    assert parse_option_items(["a.b=1", "a.c=x,y", "device=a100"]) == {
        "a": {"b": "1", "c": "x,y"},
        "device": "a100",
    }
    assert convert(int | None, "none") is None and convert(int | None, "4") == 4
    assert convert(bool, "off") is False and convert(float, 2) == 2.0
    assert convert(tuple[str, ...], "a, b") == ("a", "b")
    with pytest.raises(ValueError, match="expected an integer, got True"):
        convert(int, True)


def test_context_device_fills_every_pass_device_option_unless_given():
    given = ("api", {"device": "a100", "streams": {"device": "v100"}})
    context = make_context(PASSES, ["substitute", "streams"], given=given)
    assert context.options["substitute"].device == "a100"
    assert context.options["streams"].device == "v100"
    assert context.options["substitute"].search is None  # by cost: metaflow for a latency cost


def test_input_shapes_reach_the_passes_and_the_planner(toys, tmp_path, capsys):
    model = save(dynamic_batch(), tmp_path, "dyn")  # x: (N, 4, 8, 8), conv -> relu
    main(["plan", str(model), "--prepass", "copy", "--prepass", "count-ops",
          "--input-shape", "x=1x4x8x8", "--budget", "5", "--json", "-q"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert [r["report"] for r in data["prepasses"]] == [
        {"op": "any", "count": 2},
        {"op": "Relu", "count": 1},
    ]
    assert data["model"] == {"name": "dyn", "ops": 2}


def test_passes_see_the_accelerator_planned_for(toys, model, capsys):
    plan = api.plan(model, "64KB", budget=5, prepass=["buffer"])
    assert plan.prepasses[0].report["count"] == 64 * 1024
    main(["plan", str(model), "--buffer", "2KB", "--prepass", "buffer", "--budget", "5",
          "--json", "-q"])  # fmt: skip
    assert json.loads(capsys.readouterr().out)["prepasses"][0]["report"]["count"] == 2048
