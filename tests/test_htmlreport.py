"""HTML reports (fusionplan/app/htmlreport): the layered layout's geometry, the figures a
report shows (each group's breakdown, the diff of two plans, sweep points and their plans,
stream timelines), its bad inputs and its determinism. What the browser draws is checked in
tests/test_report_browser.py."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from fusionplan.app.api import plan
from fusionplan.app.cli import main
from fusionplan.app.grid import grid_rows
from fusionplan.app.htmlreport import plan_report, read_sweep_csv
from fusionplan.app.htmlreport.layout import (
    GAP,
    LAYER_GAP,
    NODE_W,
    _fit,
    count_crossings,
    layered_layout,
    separations,
)
from fusionplan.app.htmlreport.payload import (
    plan_diff,
    plan_payload,
    short_label,
    streams_payload,
    sweep_payload,
)
from fusionplan.app.report import write_sweep_csv
from fusionplan.ir.errors import ConfigError, PlanError
from tests.onnx_builders import residual_block, save, to_graph
from tests.random_dags import random_dag


def _random_edges(seed: int, n: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    edges = {(u, v) for v in range(1, n) for u in rng.sample(range(v), min(v, rng.randint(1, 2)))}
    edges |= {(u, v) for u, v in itertools.combinations(range(n), 2) if rng.random() < 0.05}
    return sorted(edges)


# -- layout -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_layout_points_every_edge_down_and_keeps_boxes_apart(seed: int) -> None:
    n = 6 + seed * 3
    edges = _random_edges(seed, n)
    lay = layered_layout(n, edges)
    assert len(lay.x) == len(lay.y) == n
    for u, v, points in lay.edges:
        assert lay.layer[v] > lay.layer[u]
        # a route: one point per layer from u's centre to v's, each one layer lower
        assert points[0] == (lay.x[u], lay.y[u]) and points[-1] == (lay.x[v], lay.y[v])
        assert len(points) == lay.layer[v] - lay.layer[u] + 1
        ys = [y for _, y in points]
        assert all(b - a == pytest.approx(LAYER_GAP) for a, b in itertools.pairwise(ys))
    assert {(u, v) for u, v, _ in lay.edges} == set(edges)
    for layer in set(lay.layer):
        xs = sorted(lay.x[v] for v in range(n) if lay.layer[v] == layer)
        assert all(b - a >= NODE_W + GAP - 0.2 for a, b in itertools.pairwise(xs))  # rounding
    assert all(0 < x < lay.width for x in lay.x) and all(0 < y < lay.height for y in lay.y)


def test_layout_layers_by_longest_path() -> None:
    # 0 -> 1 -> 2 -> 3 and the skip 0 -> 3: node 3 sits three layers down, the skip
    # passes layers 1 and 2 through two dummies
    lay = layered_layout(4, [(0, 1), (1, 2), (2, 3), (0, 3)])
    assert lay.layer == (0, 1, 2, 3)
    skip = next(points for u, v, points in lay.edges if (u, v) == (0, 3))
    assert len(skip) == 4
    assert lay.crossings == 0


def _brute_crossings(lay, edges) -> int:
    """Pairs of edge segments between the same two layers whose ends swap order."""
    segments = []
    for _, _, points in lay.edges:
        segments.extend(itertools.pairwise(points))
    count = 0
    for (a0, a1), (b0, b1) in itertools.combinations(segments, 2):
        if a0[1] != b0[1] or a0 == b0 or a1 == b1:
            continue  # other layers, or a shared end
        if (a0[0] - b0[0]) * (a1[0] - b1[0]) < 0:
            count += 1
    return count


@pytest.mark.parametrize("seed", range(8))
def test_crossing_count_matches_the_drawn_segments(seed: int) -> None:
    n = 8 + 2 * seed
    edges = _random_edges(100 + seed, n)
    lay = layered_layout(n, edges)
    assert lay.crossings == _brute_crossings(lay, edges)


def test_crossings_of_a_twisted_pair_by_hand() -> None:
    # upper 0 1, lower 2 3 with edges 0->3 and 1->2: one crossing; 0->2, 1->3: none
    down = [[3], [2], [], []]
    assert count_crossings([[0, 1], [2, 3]], down) == 1
    assert count_crossings([[0, 1], [3, 2]], down) == 0


def test_fit_is_the_closest_separated_placement() -> None:
    # two boxes of width 150 both wanting x = 0 must sit 150 + GAP apart: least squares
    # puts them symmetrically at -(150 + GAP)/2 and +(150 + GAP)/2
    half = (150 + GAP) / 2
    assert _fit([0.0, 0.0], separations([150.0, 150.0])) == pytest.approx([-half, half])
    # wants that already keep the separation are kept as they are
    kept = _fit([0.0, 400.0, 900.0], separations([150.0, 14.0, 150.0]))
    assert kept == pytest.approx([0.0, 400.0, 900.0])


# -- plans --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def block():
    return to_graph(residual_block(16))


@pytest.fixture(scope="module")
def two_plans(block):
    small = plan(block, buffer="1KB", search="exact").to_dict()
    large = plan(block, buffer="64KB", search="exact").to_dict()
    return small, large


def test_group_breakdown_is_the_plan_files(block, two_plans) -> None:
    data = two_plans[1]
    payload = plan_payload(block, data, "64KB")
    assert sorted(v for g in payload["groups"] for v in g["ops"]) == list(range(len(block)))
    for group, entry in zip(payload["groups"], data["groups"], strict=True):
        assert [block.nodes[v].name for v in group["ops"]] == sorted(
            entry["nodes"], key=block.node_index.get
        )
        assert (group["dram"], group["buffer"]) == (entry["dram_bytes"], entry["buffer_bytes"])
        traffic = entry["schedule"]["dram_bytes"]
        assert {t["tensor"]: t["bytes"] for t in group["tensors"]} == traffic["tensors"]
        assert {w["op"]: w["bytes"] for w in group["weights"]} == traffic["weights"]
        inside = {block.nodes[v].name for v in group["ops"]}
        for t in group["tensors"]:  # written: produced in the group; read: from outside
            producer = next(x.producer for x in block.tensors if x.name == t["tensor"])
            made_here = producer >= 0 and block.nodes[producer].name in inside
            assert t["dir"] == ("write" if made_here else "read")


def test_plan_payload_refuses_a_plan_of_another_graph(block, two_plans) -> None:
    data = json.loads(json.dumps(two_plans[0]))
    data["groups"][0]["nodes"].append("no_such_op")
    with pytest.raises(PlanError, match="no_such_op"):
        plan_payload(block, data, "x")
    data = json.loads(json.dumps(two_plans[0]))
    del data["groups"][-1]
    with pytest.raises(PlanError, match="in no group"):
        plan_payload(block, data, "x")


def test_diff_by_hand() -> None:
    # a: {0,1} {2} {3};  b: {0} {1,2} {3} with op 3's group unchanged but cheaper in b
    a = {"groups": [{"ops": [0, 1], "dram": 100}, {"ops": [2], "dram": 50},
                    {"ops": [3], "dram": 30}]}  # fmt: skip
    b = {"groups": [{"ops": [0], "dram": 40}, {"ops": [1, 2], "dram": 70},
                    {"ops": [3], "dram": 20}]}  # fmt: skip
    regions = plan_diff(a, b)
    # ops 0-2: a's 100 + 50 against b's 40 + 70 saves 40; op 3 saves 10
    assert [(r["ops"], r["a"], r["b"], r["saved"]) for r in regions] == [
        ([0, 1, 2], [0, 1], [0, 1], 40),
        ([3], [2], [2], 10),
    ]
    assert plan_diff(a, a) == []


def test_diff_regions_add_up_to_the_dram_saved(block, two_plans) -> None:
    a, b = (plan_payload(block, p, str(i)) for i, p in enumerate(two_plans))
    regions = plan_diff(a, b)
    assert regions, "1KB and 64KB plans of the block differ"
    total = sum(g["dram"] for g in a["groups"]) - sum(g["dram"] for g in b["groups"])
    assert sum(r["saved"] for r in regions) == total
    seen = [v for r in regions for v in r["ops"]]
    assert len(seen) == len(set(seen))
    for r in regions:  # each side's groups cover exactly the region's ops
        for side, p in (("a", a), ("b", b)):
            assert sorted(v for gi in r[side] for v in p["groups"][gi]["ops"]) == r["ops"]


# -- sweeps and streams -------------------------------------------------------------------
def test_sweep_points_open_their_plans(block, two_plans, tmp_path) -> None:
    small, large = two_plans
    plans = [plan(block, buffer=b, search="exact") for b in ("1KB", "64KB")]
    path = write_sweep_csv(grid_rows(block.name, plans), tmp_path / "sweep.csv")
    rows = read_sweep_csv(path)
    assert [r["buffer_bytes"] for r in rows] == [1024, 65536]
    payloads = [plan_payload(block, p, str(i)) for i, p in enumerate((large, small))]
    points = sweep_payload(rows, payloads)["rows"]
    assert [p["plan"] for p in points] == [1, 0]  # 1KB is the second plan given
    assert [p["dram_mb"] for p in points] == [r["dram_mb"] for r in rows]
    assert sweep_payload(rows, payloads[:1])["rows"][0]["plan"] == -1


def test_streams_payload_from_a_trace_by_hand() -> None:
    trace = {"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "simulated"}},
        {"name": "Conv", "ph": "X", "pid": 1, "tid": 0, "ts": 0.0, "dur": 2.5,
         "args": {"node": "a", "index": 0}},
        {"name": "Relu", "ph": "X", "pid": 1, "tid": 1, "ts": 2.5, "dur": 1.0,
         "args": {"node": "b", "index": 1}},
        {"name": "event", "ph": "s", "pid": 1, "id": 1, "tid": 0, "ts": 2.5},
        {"name": "event", "ph": "f", "bp": "e", "pid": 1, "id": 1, "tid": 1, "ts": 2.5},
    ]}  # fmt: skip
    out = streams_payload(trace, "t")
    (chart,) = out["charts"]
    assert chart["label"] == "simulated" and chart["streams"] == 2
    assert [(o["name"], o["stream"], o["start"], o["end"]) for o in chart["ops"]] == [
        ("a", 0, 0.0, 2.5),
        ("b", 1, 2.5, 3.5),
    ]
    assert chart["events"] == [[0, 2.5, 1, 2.5]]
    assert out["colours"] == {"Conv": "#4e79a7", "Relu": "#59a14f"}


def test_short_labels() -> None:
    assert short_label("/layer1/layer1.0/conv1/Conv", "Conv") == "layer1.0/conv1"
    assert short_label("relu", "Relu") == "relu"
    assert short_label("/a/Relu_1", "Relu") == "a"


# -- the page -----------------------------------------------------------------------------
def test_page_is_self_contained_and_deterministic(block, two_plans) -> None:
    plans = [("1KB", two_plans[0]), ("64KB", two_plans[1])]
    page = plan_report(block, plans)
    assert page == plan_report(block, plans)
    assert not re.search(r"<(script|link|img|iframe)[^>]*\s(src|href)=", page)
    assert not re.search(r"url\((?!#)", page) and "@import" not in page  # url(#marker) only
    assert set(re.findall(r"https?://[^\s\"']+", page)) <= {"http://www.w3.org/2000/svg"}
    data = page.split('id="fp-data">', 1)[1].split("</script>", 1)[0]
    decoded = json.loads(data)
    assert [p["label"] for p in decoded["plans"]] == ["1KB", "64KB"]
    assert len(decoded["graph"]["ops"]) == len(block)


def test_a_name_cannot_close_the_script(block, two_plans) -> None:
    data = json.loads(json.dumps(two_plans[0]))
    data["search"] = {"note": "</script><script>alert(1)</script>"}
    page = plan_report(block, [("x", data)])
    assert page.count("</script>") == 2  # the data block's and the code's


def _run(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main(args)
    return stop.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("plan.json", "{not json", "is not a plan file: not JSON"),
        ("plan.json", '{"format": "other"}', "is not a plan file"),
        (
            "plan.json",
            '{"format": "fusionplan.plan", "version": 1, "model": {"name": "m"},'
            ' "groups": [{"nodes": [1]}]}',
            "'groups' must be a list",
        ),
        ("sweep.csv", "a,b\n1,2\n", "is not a sweep table (CSV): no column 'scheme'"),
        (
            "sweep.csv",
            "scheme,buffer_bytes,dram_mb,lower_bound_mb\nlbdf,1KB,1,1\n",
            "line 2: buffer_bytes, dram_mb and lower_bound_mb must be numbers",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, name, text, message) -> None:
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "report.html"
    code, err = _run(["report", str(path), "-o", str(out)], capsys)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not out.exists()


def test_report_command_writes_the_same_bytes_twice(tmp_path, capsys, two_plans) -> None:
    model = save(residual_block(16), tmp_path)
    paths = []
    for i, data in enumerate(two_plans):
        paths.append(tmp_path / f"p{i}.json")
        paths[-1].write_text(json.dumps(data))
    pages = []
    for k in range(2):
        out = tmp_path / f"r{k}.html"
        main(["report", *map(str, paths), "--model", str(model), "-o", str(out)])
        pages.append(out.read_bytes())
    assert pages[0] == pages[1] and b"1KB LBDF" in pages[0]
    other = json.loads(json.dumps(two_plans[0]))
    other["model"]["name"] = "another"
    paths[1].write_text(json.dumps(other))
    code, err = _run(["report", *map(str, paths), "-o", str(tmp_path / "x.html")], capsys)
    assert code == 2 and "a report holds plans of one model" in err


def test_read_sweep_csv_refuses_an_empty_table(tmp_path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("scheme,buffer_bytes,dram_mb,lower_bound_mb\n")
    with pytest.raises(ConfigError, match="no rows"):
        read_sweep_csv(path)


def test_random_graphs_report(tmp_path) -> None:
    for seed in range(4):
        graph = random_dag(seed, 12)
        data = plan(graph, buffer="4KB", search="ls", budget=50).to_dict()
        page = plan_report(graph, [("p", data)])
        decoded = json.loads(page.split('id="fp-data">', 1)[1].split("</script>", 1)[0])
        assert sorted(v for g in decoded["plans"][0]["groups"] for v in g["ops"]) == list(
            range(len(graph))
        )


def _page_data(path) -> dict:
    page = path.read_text(encoding="utf-8")
    return json.loads(page.split('id="fp-data">', 1)[1].split("</script>", 1)[0])


def test_plan_sweep_and_streams_write_html(tmp_path, capsys) -> None:
    model = str(save(residual_block(16), tmp_path))
    main(["plan", model, "--buffer", "2KB", "--search", "exact", "-q", "--html",
          str(tmp_path / "plan.html"), "-o", str(tmp_path / "plan.json")])  # fmt: skip
    shown = _page_data(tmp_path / "plan.html")["plans"][0]
    saved = json.loads((tmp_path / "plan.json").read_text())
    assert [g["dram"] for g in shown["groups"]] == [g["dram_bytes"] for g in saved["groups"]]
    # without -o the page comes from the plan in memory: the same bytes (timing left out)
    main(["plan", model, "--buffer", "2KB", "--search", "exact", "-q", "--html",
          str(tmp_path / "alone.html")])  # fmt: skip
    assert (tmp_path / "alone.html").read_bytes() == (tmp_path / "plan.html").read_bytes()
    main(["sweep", model, "--buffers", "1KB,64KB", "--search", "exact", "-q", "--html",
          str(tmp_path / "sweep.html")])  # fmt: skip
    sweep = _page_data(tmp_path / "sweep.html")
    assert [r["plan"] for r in sweep["sweep"]["rows"]] == [0, 1]
    assert [p["accelerator"]["buffer_bytes"] for p in sweep["plans"]] == [1024, 65536]
    main(["streams", model, "--html", str(tmp_path / "streams.html")])
    (chart,) = _page_data(tmp_path / "streams.html")["streams"]["charts"]
    assert len(chart["ops"]) == 6 and chart["streams"] >= 1
    capsys.readouterr()
