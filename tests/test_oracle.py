"""The cost model as an oracle (accel_model/oracle.py): black boxes priced through the
cost-model protocol, every distinct group one counted query, and a query budget."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_model import Accelerator, make_cost_model
from accel_model.lbdf import LBDF
from accel_model.oracle import (
    CallableOracle,
    OracleAnswer,
    OracleCostModel,
    OracleError,
    ProgramOracle,
    group_query,
    parse_answer,
)
from fusionplan.app.api import plan
from fusionplan.app.cli import cli
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import bits
from tests.onnx_builders import residual_block, save, to_graph
from tests.random_dags import random_dag, small_buffer

SCHEME = "lbdf"


def setting(seed: int = 7, n_nodes: int = 16):
    graph = random_dag(seed, n_nodes=n_nodes)
    return graph, small_buffer(LBDF, graph, seed, quantile=0.9)


def mirror(graph, beta, scheme=SCHEME):
    """A callable oracle that answers what the built-in model says, and the names it saw."""
    ref = make_cost_model(graph, Accelerator(beta, scheme))
    ids = {n.name: v for v, n in enumerate(graph.nodes)}
    asked: list[frozenset[str]] = []

    def oracle(query):
        names = frozenset(op["name"] for op in query["ops"])
        asked.append(names)
        c = ref.cost(sum(1 << ids[n] for n in names))
        return {"fits": c.valid, "dram_bytes": c.dram, "buffer_bytes": c.buffer}

    return oracle, asked


@pytest.mark.parametrize(("search", "splitter"), [("ls", "tree"), ("rs", "random"),
                                                  ("nsga2", "tree")])  # fmt: skip
def test_a_mirror_oracle_plans_exactly_as_the_built_in_model(search, splitter):
    graph, beta = setting()
    oracle, asked = mirror(graph, beta)
    kw = dict(search=search, splitter=splitter, budget=60, seed=1, bound_effort=0)
    built_in = plan(graph, beta, SCHEME, **kw)
    boxed = plan(graph, beta, SCHEME, oracle=oracle, **kw)
    assert boxed.groups == built_in.groups
    assert boxed.metrics.dram_bytes == built_in.metrics.dram_bytes
    # every distinct group is asked once, and counted the same way for both
    assert len(asked) == len(set(asked)) == boxed.info["oracle_queries"]
    assert built_in.info["oracle_queries"] == boxed.info["oracle_queries"]
    assert boxed.metrics.bound_method.startswith("none") and boxed.energy is None
    assert "oracle" in boxed.summary() and "none (black-box oracle)" in boxed.summary()


def test_group_query_describes_the_group_and_its_boundary():
    graph = to_graph(residual_block())
    # conv1 and relu1: conv1's output stays inside, relu1's feeds conv2 outside
    group = (1 << 1) | (1 << 2)
    q = group_query(graph, group, Accelerator(4096, "brr", 2))
    assert [op["name"] for op in q["ops"]] == [graph.nodes[v].name for v in bits(group)]
    assert q["buffer_bytes"] == 4096 and q["bytes_per_element"] == 2 and q["scheme"] == "brr"
    conv, relu = graph.nodes[1], graph.nodes[2]
    t = graph.tensors
    inner = q["tensors"][t[conv.outputs[0]].name]
    assert inner == {"shape": list(t[conv.outputs[0]].shape), "made_inside": True,
                     "read_outside": False}  # fmt: skip
    assert q["tensors"][t[conv.inputs[0]].name]["made_inside"] is False
    assert q["tensors"][t[relu.outputs[0]].name]["read_outside"] is True
    json.dumps(q)  # what a program receives


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"fits": True}, "no dram_bytes"),
        ({"fits": "yes", "dram_bytes": 3}, "'fits' must be true or false"),
        ({"fits": True, "dram_bytes": -1}, "'dram_bytes' must be a whole number"),
        ({"fits": True, "dram_bytes": 2.5}, "'dram_bytes' must be a whole number"),
        ({"fits": True, "dram_bytes": float("inf")}, "'dram_bytes' must be a whole number"),
        ({"fits": True, "dram_bytes": float("nan")}, "'dram_bytes' must be a whole number"),
        (7, "expected an object"),
    ],
)
def test_a_bad_answer_is_one_line_naming_it(raw, message):
    with pytest.raises(OracleError, match=message) as err:
        parse_answer(raw, "oracle x")
    assert "\n" not in str(err.value)


def test_answers_in_every_accepted_form():
    assert parse_answer((True, 10), "o") == OracleAnswer(True, 10, 0)
    assert parse_answer([False, 10.0, 5], "o") == OracleAnswer(False, 10, 5)
    assert parse_answer(OracleAnswer(True, 1, 2), "o") == OracleAnswer(True, 1, 2)


PROGRAM = textwrap.dedent(
    """
    import json, math, sys
    log = open(sys.argv[1], "a")
    for line in sys.stdin:
        q = json.loads(line)
        io = sum(math.prod(t["shape"]) for t in q["tensors"].values()
                 if not t["made_inside"] or t["read_outside"])
        log.write(" ".join(sorted(op["name"] for op in q["ops"])) + "\\n")
        log.flush()
        print(json.dumps({"fits": len(q["ops"]) <= 3, "dram_bytes": io}), flush=True)
    """
)


def test_a_program_oracle_plans_with_its_own_rule_and_is_asked_once_per_group(tmp_path):
    script, log = tmp_path / "npu.py", tmp_path / "asked.log"
    script.write_text(PROGRAM)
    graph, beta = setting(3, 14)
    oracle = ProgramOracle([sys.executable, str(script), str(log)])
    p = plan(graph, beta, SCHEME, oracle=oracle, budget=40, splitter="tree", seed=0)
    assert p.info["search"] == "ls"  # the default with an oracle
    assert all(g.bit_count() <= 3 for g in p.groups)  # the program's rule, not the model's
    asked = log.read_text().splitlines()
    assert len(asked) == len(set(asked)) == p.info["oracle_queries"]
    # the DRAM it reports is the program's: each group's io elements
    cm = OracleCostModel(graph, Accelerator(beta, SCHEME), CallableOracle(lambda q: (True, 0)))
    assert p.metrics.dram_bytes == sum(cm.io_elements(g) for g in p.groups)
    assert oracle._proc is None  # closed when the plan was made


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("print('hello', flush=True)", "the answer is not JSON"),
        ("sys.exit(3)", "exited"),
        ("import time; time.sleep(30)", "no answer within 0.5 s"),
        (
            "import time; sys.stdout.write('{\"fits\": true'); sys.stdout.flush(); time.sleep(30)",
            "no answer within 0.5 s",
        ),  # half a line, then a stall
        ('print(\'{"fits": true, "dram_bytes": NaN}\', flush=True)', "not JSON"),
    ],
)
def test_a_broken_program_is_one_line(tmp_path, body, message):
    script = tmp_path / "bad.py"
    script.write_text(f"import sys\nsys.stdin.readline()\n{body}\n")
    graph, beta = setting(3, 10)
    oracle = ProgramOracle([sys.executable, str(script)], timeout_s=0.5)
    with pytest.raises(OracleError, match=message) as err:
        plan(graph, beta, SCHEME, oracle=oracle, budget=5)
    assert "\n" not in str(err.value)
    assert oracle._proc is None  # stopped at once, not left running


def test_a_missing_program_or_callable_is_named():
    with pytest.raises(OracleError, match="cannot start"):
        ProgramOracle("no-such-program-here").ask({})
    with pytest.raises(OracleError, match="must be 'module:function'"):
        CallableOracle.load("json")
    with pytest.raises(OracleError, match="cannot be loaded"):
        CallableOracle.load("json:no_such_function")


def test_the_query_budget_stops_a_search_and_the_trace_reads_against_queries():
    graph, beta = setting(11, 18)
    free = plan(graph, beta, SCHEME, search="rs", splitter="random", budget=400, bound_effort=0)
    capped = plan(graph, beta, SCHEME, search="rs", splitter="random", budget=400,
                  bound_effort=0, query_budget=120)  # fmt: skip
    assert free.info["oracle_queries"] > 120
    info = capped.info
    assert info["query_budget"] == 120 and info["proposed"] < 400
    assert info["oracle_queries"] >= 120
    trace = info["query_trace"]
    assert [q for q, _ in trace] == sorted(q for q, _ in trace)
    assert [d for _, d in trace] == sorted((d for _, d in trace), reverse=True)
    assert trace[-1][1] == capped.metrics.dram_bytes
    # the capped run is the free run's prefix: same seed, same proposals until it stopped
    assert [t for t in free.info["query_trace"] if t[0] <= trace[-1][0]] == trace


def test_what_an_oracle_cannot_do_is_refused_before_planning():
    graph, beta = setting()
    oracle, _ = mirror(graph, beta)
    for search in ("auto", "exact", "lns"):
        with pytest.raises(ConfigError, match="black-box oracle"):
            plan(graph, beta, SCHEME, oracle=oracle, search=search)
    with pytest.raises(ConfigError, match="black-box oracle"):
        plan(graph, beta, SCHEME, oracle=oracle, objective="energy")
    with pytest.raises(ConfigError, match="bounded by its effort"):
        plan(graph, beta, SCHEME, search="auto", query_budget=10)
    with pytest.raises(ConfigError, match="query budget must be"):
        plan(graph, beta, SCHEME, search="ls", query_budget=0)


def test_cli_oracle_options(tmp_path):
    path = save(residual_block(), tmp_path)
    runner = CliRunner()
    both = runner.invoke(cli, ["plan", str(path), "--oracle", "x", "--oracle-callable", "a:b"])
    assert isinstance(both.exception, ConfigError) and "not both" in str(both.exception)
    script, log = tmp_path / "npu.py", tmp_path / "asked.log"
    script.write_text(PROGRAM)
    program = f"{sys.executable} {script} {log}"
    args = ["plan", str(path), "--buffer", "4KB", "-q", "--oracle", program, "--query-budget", "50"]
    ok = runner.invoke(cli, args)
    assert ok.exit_code == 0, ok.output
    assert "lower bound  none (black-box oracle)" in ok.output
    assert "search       ls" in ok.output and "(budget 50)" in ok.output


def test_the_example_oracle_program_plans_by_its_rule():
    """docs/examples/oracle_npu.py, the README's oracle: every fused group holds what it
    touches within the buffer, and the plan's DRAM is what the program charges."""
    example = Path(__file__).resolve().parents[1] / "docs" / "examples" / "oracle_npu.py"
    graph, beta = setting(5, 14)
    p = plan(graph, beta, SCHEME, oracle=ProgramOracle([sys.executable, str(example)]), budget=30)
    cm = p.cost_model
    fused = [g for g in p.groups if g.bit_count() > 1]
    assert fused and all(cm.cost(g).buffer <= beta and cm.cost(g).valid for g in fused)
    held = sum(cm.io_elements(g) + cm.weight_elements(g) for g in p.groups)  # b = 1
    assert p.metrics.dram_bytes == held
