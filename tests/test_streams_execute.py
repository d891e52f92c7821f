"""The stream scheduler's execution side: constant folding, the op-by-op torch program
against onnxruntime, the CPU thread-per-stream executor (same outputs, dependencies kept,
errors propagate), the ``schedule_streams`` report with its trace and Gantt chart, the
``streams`` pre-pass's metadata, and the CUDA executor where a GPU is present.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections import Counter
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fusionplan.data.synthetic import nasnet_cells, randwire
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.onnx_model import from_onnx, to_onnx
from fusionplan.ir.onnx_run import max_relative_error, ort_session
from fusionplan.passes import PASSES
from fusionplan.passes.manager import STREAM_SCHEDULE, make_context
from fusionplan.passes.streams.assign import assign_streams
from fusionplan.passes.streams.dag import OpDag
from fusionplan.passes.streams.execute import ThreadStreams
from fusionplan.passes.streams.measure import feeds_for, measure_cuda, stream_latency
from fusionplan.passes.streams.pipeline import (
    StreamsOptions,
    StreamsPass,
    StreamsRequest,
    schedule_streams,
)
from fusionplan.passes.streams.program import TorchProgram, check_schedulable
from tests.onnx_builders import constant_output

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_TIMEOUT_S = 30.0


# ----------------------------------------------------------------------------- models
def onnx_model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    outputs: dict[str, list[int]],
    inits: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
        list(inits),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ints(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def floats(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.5).astype(np.float32), name)


SHAPE_CHAIN = ("shape", "slice", "concat")


def resize_model() -> onnx.ModelProto:
    """x -> Relu -> Resize to (N, C) of Shape(r)[0:2] ++ (8, 8): DeepLabV3's size chain."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "st", "en"], ["nc"], name="slice"),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], name="concat", axis=0),
        helper.make_node("Resize", ["r", "", "", "sizes"], ["y"], name="resize", mode="nearest"),
    ]
    inits = [ints("st", [0]), ints("en", [2]), ints("hw", [8, 8])]
    return onnx_model("resize", nodes, {"x": [1, 4, 4, 4]}, {"y": [1, 4, 8, 8]}, inits)


def reshape_model() -> onnx.ModelProto:
    """Two branches on x (Relu; Conv) added, then reshaped to (N, C, -1) by a shape chain,
    then scaled: a branchy graph whose Reshape target is computed."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["x"], ["g"], name="sigmoid"),
        helper.make_node("Add", ["r", "c"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "g"], ["m"], name="mul"),
        helper.make_node("Shape", ["m"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "st", "en"], ["nc"], name="slice"),
        helper.make_node("Concat", ["nc", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["m", "target"], ["y"], name="reshape"),
    ]
    inits = [
        floats("w", 4, 4, 3, 3),
        floats("b", 4),
        ints("st", [0]),
        ints("en", [2]),
        ints("minus1", [-1]),
    ]
    return onnx_model("reshape", nodes, {"x": [1, 4, 4, 4]}, {"y": [1, 4, 16]}, inits)


def conv_pool_gemm_model() -> onnx.ModelProto:
    """Two conv/pool branches concatenated, global-pooled, flattened, Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool", ["r1"], ["p1"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], name="conv2"),
        helper.make_node(
            "AveragePool", ["c2"], ["p2"], name="avgpool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Concat", ["p1", "p2"], ["cat"], name="concat", axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["y"], name="gemm", transB=1),
    ]
    inits = [
        floats("w1", 4, 3, 3, 3),
        floats("b1", 4),
        floats("w2", 4, 3, 1, 1),
        floats("b2", 4),
        floats("wg", 5, 8),
        floats("bg", 5),
    ]
    return onnx_model("convpoolgemm", nodes, {"x": [1, 3, 8, 8]}, {"y": [1, 5]}, inits)


def small_randwire() -> onnx.ModelProto:
    return randwire(nodes=12, channels=8, size=8)


def small_nasnet() -> onnx.ModelProto:
    return nasnet_cells(cells=1, channels=8, size=8)


def ort_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort_session(model)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, dict(feeds)), strict=True))


def run_with_timeout(fn, timeout: float = RUN_TIMEOUT_S):
    """``fn()`` in a daemon thread; its result or exception, or fail on a hang."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), f"did not finish within {timeout} s (deadlock?)"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


# ----------------------------------------------------------------------------- folding
@pytest.mark.parametrize("build", [resize_model, reshape_model], ids=["resize", "reshape"])
def test_the_imported_graph_has_no_shape_chain_and_keeps_the_outputs(build):
    model = build()
    g = from_onnx(model)
    assert not set(SHAPE_CHAIN) & set(g.nodes)
    assert len(g) == len(model.graph.node) - 3
    # the computed size/shape operand is a weight with the right value
    target = "sizes" if "resize" in g.nodes else "target"
    expected = [1, 4, 8, 8] if target == "sizes" else [1, 4, -1]
    assert g.weights[target].array.tolist() == expected
    assert target not in g.tensors
    # intermediates of the chain are gone; operands only the chain read are dropped
    for gone in ("s", "nc", "st", "en"):
        assert gone not in g.weights and gone not in g.tensors
    # still computes what the original computes
    feeds = feeds_for(g)
    ref = ort_outputs(model, feeds)
    got = ort_outputs(to_onnx(g), feeds)
    assert max_relative_error(ref, got) < 1e-6
    # and the torch program of the graph runs it
    assert max_relative_error(ref, TorchProgram(g).run(feeds)) < 1e-4


def test_a_constant_graph_output_is_refused():
    with pytest.raises(ConfigError, match="graph output is a constant"):
        check_schedulable(from_onnx(constant_output()))


# ----------------------------------------------------------------------------- program
@pytest.mark.parametrize(
    "build",
    [small_randwire, small_nasnet, conv_pool_gemm_model, reshape_model],
    ids=["randwire", "nasnet", "conv_pool_gemm", "reshape"],
)
def test_torch_program_matches_onnxruntime(build):
    model = build()
    g = from_onnx(model)
    feeds = feeds_for(g, seed=3)
    program = TorchProgram(g)
    assert [op.name for op in program.ops] == list(OpDag.from_graph(g).names)
    out = program.run(feeds)
    assert set(out) == set(g.outputs)
    ref = ort_outputs(model, feeds)
    for name in ref:
        assert out[name].shape == ref[name].shape
    assert max_relative_error(ref, out) < 1e-4
    # any topological order gives the same result
    dag = OpDag.from_graph(g)
    order = assign_streams(dag).order
    assert max_relative_error(out, program.run(feeds, order)) < 1e-6


def test_torch_program_op_without_kernel_is_a_config_error():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Neg", ["r"], ["y"], name="negate"),
    ]
    g = from_onnx(onnx_model("neg", nodes, {"x": [1, 4]}, {"y": [1, 4]}))
    with pytest.raises(ConfigError, match="Neg"):
        TorchProgram(g)


def test_torch_program_needs_every_input():
    g = from_onnx(conv_pool_gemm_model())
    program = TorchProgram(g)
    with pytest.raises(ConfigError, match="missing input"):
        program.run({})


# ----------------------------------------------------------------------------- threads
def program_and_dag(build) -> tuple[TorchProgram, OpDag, dict[str, np.ndarray]]:
    g = from_onnx(build())
    return TorchProgram(g), OpDag.from_graph(g), feeds_for(g, seed=1)


@pytest.mark.parametrize("build", [small_randwire, small_nasnet], ids=["randwire", "nasnet"])
@pytest.mark.parametrize("k", [None, 1, 2, 3])
def test_thread_streams_match_the_sequential_run(build, k):
    program, dag, feeds = program_and_dag(build)
    assignment = assign_streams(dag, max_streams=k)
    if k is None:
        assert assignment.num_streams > 1
    reference = program.run(feeds, assignment.order)
    with ThreadStreams(program, assignment) as streams:
        first = run_with_timeout(lambda: streams.run(feeds))
        assert set(first) == set(reference)
        assert max_relative_error(reference, first) <= 1e-5
        for _ in range(5):  # no races: every run the same
            again = run_with_timeout(lambda: streams.run(feeds))
            for name in first:
                np.testing.assert_array_equal(again[name], first[name])
        # a different input gives that input's answer (nothing stale kept between runs)
        other = {n: v * 2.0 + 1.0 for n, v in feeds.items()}
        assert max_relative_error(program.run(other), streams.run(other)) <= 1e-5


@pytest.mark.parametrize("k", [None, 2])
def test_thread_streams_timeline_respects_dependencies(k):
    program, dag, feeds = program_and_dag(small_nasnet)
    assignment = assign_streams(dag, max_streams=k)
    with ThreadStreams(program, assignment) as streams:
        assert streams.last_timeline is None
        streams.run(feeds)
        assert streams.last_timeline is None  # only recorded when asked
        run_with_timeout(lambda: streams.run(feeds, record=True))
    assert streams.last_timeline is not None
    start, finish = streams.last_timeline
    assert len(start) == len(finish) == len(dag)
    assert all(0.0 <= s <= f for s, f in zip(start, finish, strict=True))
    for u, v in dag.edges:
        assert start[v] >= finish[u], (dag.names[u], dag.names[v])
    for ops in assignment.streams:
        for x, y in itertools.pairwise(ops):
            assert start[y] >= finish[x], "ops of one stream overlap"


@pytest.fixture
def three_torch_threads():
    """torch's intra-op threads at 3 (not what the executor sets) for the test, then back."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(before)


def test_thread_streams_restore_torch_threads(three_torch_threads):
    program, dag, feeds = program_and_dag(small_randwire)
    with ThreadStreams(program, assign_streams(dag)) as streams:
        streams.run(feeds)
        assert torch.get_num_threads() == three_torch_threads


def test_thread_streams_propagate_an_op_error_without_hanging(three_torch_threads):
    program, dag, feeds = program_and_dag(small_randwire)
    assignment = assign_streams(dag)
    assert assignment.events
    reference = program.run(feeds)

    def boom(xs):
        raise RuntimeError("boom in a worker")

    # break an op that other streams wait for, on every stream that has one; the last op;
    # the first op (everything waits for it)
    sources = sorted({u for u, _ in assignment.events})
    by_stream = {assignment.stream_of[u]: u for u in reversed(sources)}
    victims = [*by_stream.values(), len(dag) - 1, assignment.streams[0][0]]
    assert len(by_stream) >= 2
    # no context manager: a hung worker would make its close() hang too; the test has to
    # fail instead (run_with_timeout), so close() is only waited for with a timeout
    streams = ThreadStreams(program, assignment)
    for victim in victims:
        original = program.ops[victim]
        program.ops[victim] = dataclasses.replace(original, kernel=boom)
        try:
            with pytest.raises(RuntimeError, match="boom in a worker"):
                run_with_timeout(lambda: streams.run(feeds))
        finally:
            program.ops[victim] = original
        assert torch.get_num_threads() == three_torch_threads
        # the executor still works after a failed run
        out = run_with_timeout(lambda: streams.run(feeds))
        assert max_relative_error(reference, out) <= 1e-5
    run_with_timeout(streams.close)


# ----------------------------------------------------------------------------- pipeline
@pytest.mark.slow
def test_schedule_streams_report_trace_and_gantt(tmp_path):
    result = schedule_streams(small_randwire(), StreamsRequest(execute="cpu", repeats=2))
    r, a, dag = result.report, result.assignment, result.dag
    assert r.ops == len(dag) == 51
    assert r.edges == len(dag.edges)
    assert r.reduced_edges == len(dag.reduced_edges) <= r.edges
    assert r.width == a.width
    assert 1 <= r.streams == a.num_streams <= r.width
    assert r.events == len(a.events) <= r.reduced_cross_edges == a.reduced_cross_edges
    assert r.schedule_seconds >= 0
    sim = r.simulation
    assert sim["makespan_s"] >= sim["bound_s"] > 0
    assert sim["sequential_s"] == pytest.approx(sim["work_s"])
    assert sim["streams"] == r.streams
    m = r.measured
    assert m is not None
    assert m["device"].startswith("cpu")
    assert m["streams"] == r.streams
    assert set(m["times_ms"]) == {"sequential", "sequential_all_cores", "streams", "onnxruntime"}
    assert all(t > 0 for t in m["times_ms"].values())
    assert m["errors"]["streams"] <= 1e-5
    assert m["errors"]["onnxruntime"] <= 1e-4
    assert json.loads(json.dumps(r.to_json()))["streams"] == r.streams

    text = result.summary()
    assert f"{r.streams} streams" in text
    assert f"{r.events} events" in text
    assert "measured" in text

    trace_path = result.save_trace(tmp_path / "trace.json")
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"]
    assert result.measurement is not None and result.measurement.timeline is not None
    timelines = 2  # simulated, measured
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == timelines * len(dag)
    for pid in (1, 2):
        ops = [e for e in complete if e["pid"] == pid]
        assert sorted(e["args"]["index"] for e in ops) == list(range(len(dag)))
        assert all(e["tid"] == a.stream_of[e["args"]["index"]] for e in ops)
        assert all(e["dur"] >= 0 for e in ops)
        threads = [e for e in events if e["ph"] == "M" and e["name"] == "thread_name"]
        assert sorted(e["tid"] for e in threads if e["pid"] == pid) == list(range(r.streams))
        procs = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
        assert [e["pid"] for e in procs].count(pid) == 1
    simulated = {e["args"]["index"]: e for e in complete if e["pid"] == 1}
    for v in range(len(dag)):
        assert simulated[v]["ts"] == pytest.approx(result.simulation.start[v] * 1e6, abs=1e-3)
    starts = [e for e in events if e["ph"] == "s"]
    ends = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(ends) == timelines * len(a.events)
    assert Counter(e["id"] for e in starts) == Counter(e["id"] for e in ends)
    assert all(c == 1 for c in Counter(e["id"] for e in starts).values())
    by_id = {e["id"]: e for e in ends}
    expected = Counter((a.stream_of[u], a.stream_of[v]) for u, v in a.events)
    for pid in (1, 2):
        pairs = Counter((s["tid"], by_id[s["id"]]["tid"]) for s in starts if s["pid"] == pid)
        assert pairs == expected
    for s in starts:
        f = by_id[s["id"]]
        assert f["pid"] == s["pid"]
        assert s["ts"] <= f["ts"]  # the wait ends after the event was recorded

    gantt = result.save_gantt(tmp_path / "gantt.png")
    data = gantt.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 1000


def test_schedule_streams_without_execution_and_with_a_limit():
    result = schedule_streams(small_randwire(), StreamsRequest(max_streams=2))
    assert result.measurement is None
    assert result.report.measured is None
    assert result.report.streams <= 2
    assert "measured" not in result.summary()
    trace = result.trace()
    assert {e["pid"] for e in trace["traceEvents"]} == {1}


def test_schedule_streams_rejects_an_unknown_executor():
    with pytest.raises(ConfigError, match="unknown executor"):
        schedule_streams(small_randwire(), StreamsRequest(execute="tpu"))  # type: ignore[arg-type]


def test_streams_pass_provides_its_schedule_and_keeps_the_graph():
    graph = from_onnx(reshape_model())
    context = make_context(PASSES, ["streams"])
    result = StreamsPass().run(graph, context)
    assert result.graph is graph and not result.modified  # an analysis: the graph as it was
    schedule = result.artifacts[STREAM_SCHEDULE]
    scheduled = {n.name for n in reshape_model().graph.node} - set(SHAPE_CHAIN)
    placed = [op for ops in schedule.streams for op in ops]
    assert sorted(placed) == sorted(scheduled)  # every op on exactly one stream
    stream_of = {op: s for s, ops in enumerate(schedule.streams) for op in ops}
    assert len(schedule.streams) == result.report.streams >= 2  # Relu, Conv, Sigmoid of x
    for u, v in schedule.events:
        assert stream_of[u] != stream_of[v]
    assert len(schedule.events) == result.report.events
    assert schedule.bound_s <= schedule.makespan_s <= schedule.sequential_s
    assert f"{len(schedule.streams)} streams" in result.headline
    assert schedule.to_json()["streams"] == [list(ops) for ops in schedule.streams]
    one = StreamsPass(StreamsOptions(max_streams=1)).run(graph, context)
    single = one.artifacts[STREAM_SCHEDULE]
    assert len(single.streams) == 1 and single.events == ()
    assert single.makespan_s == pytest.approx(single.sequential_s)


def test_stream_latency_on_cpu_is_positive():
    seconds = stream_latency(from_onnx(small_randwire()), device="cpu", max_streams=2, repeats=2)
    assert 0 < seconds < 10


# ----------------------------------------------------------------------------- CUDA
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_execute_cuda_without_a_gpu_is_a_config_error():
    with pytest.raises(ConfigError, match="CUDA"):
        schedule_streams(small_randwire(), StreamsRequest(execute="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_measure_cuda_streams_match_eager():
    g = from_onnx(small_nasnet())
    dag = OpDag.from_graph(g)
    assignment = assign_streams(dag)
    assert assignment.num_streams > 1
    feeds = feeds_for(g)
    m = measure_cuda(g, assignment, feeds, repeats=3)
    assert m.device.startswith("cuda")
    assert m.streams == assignment.num_streams
    assert set(m.times_ms) == {"eager", "cuda_graph", "streams_eager", "streams_cuda_graph"}
    assert all(t > 0 for t in m.times_ms.values())
    assert set(m.errors) == set(m.times_ms)
    assert all(e <= 1e-3 for e in m.errors.values()), m.errors
    assert m.speedup > 0
    # and what the CUDA run computes is what onnxruntime computes on the CPU
    ref = ort_outputs(to_onnx(g), feeds)
    cpu = TorchProgram(g).run(feeds)
    assert max_relative_error(ref, cpu) < 1e-4
