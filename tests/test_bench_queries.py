"""bench queries: reading runs against oracle queries (hand-made traces), and one real run."""

from __future__ import annotations

import math

from fusionplan.app.bench.queries import (
    QueriesConfig,
    best_at,
    markdown,
    measure,
    queries_to_reach,
    summary,
    verdicts,
)

TRACE = [(100, 1000), (250, 800), (900, 500)]


def test_a_trace_is_read_at_any_query_count():
    assert best_at(TRACE, 99) is None  # no plan yet
    assert [best_at(TRACE, q) for q in (100, 249, 250, 5000)] == [1000, 1000, 800, 500]
    assert queries_to_reach(TRACE, 800) == 250
    assert queries_to_reach(TRACE, 499) is None


def row(search, splitter, seed, trace, dram=None):
    return {"model": "m", "scheme": "brr", "buffer": "128KB", "search": search,
            "splitter": splitter, "seed": seed, "trace": trace, "seconds": 1.0,
            "dram": trace[-1][1] if dram is None else dram, "queries": trace[-1][0]}  # fmt: skip


def test_summary_medians_over_seeds_against_the_best_known_plan():
    config = QueriesConfig(searches=("ls",), splitters=("random", "tree", "gin-rg"),
                           checkpoints=(100, 1000))  # fmt: skip
    rows = [
        row("auto", "-", 0, [(3000, 500)]),
        row("ls", "random", 0, [(100, 1000), (600, 505)]),
        row("ls", "random", 1, [(100, 900), (800, 600)]),
        row("ls", "tree", 0, [(200, 700), (2000, 504)]),
        row("ls", "tree", 1, [(200, 700), (4000, 500)]),
        row("ls", "gin-rg", 0, [(100, 800), (300, 500)]),
        row("ls", "gin-rg", 1, [(100, 800), (350, 505)]),
    ]
    by = {s["splitter"]: s for s in summary(rows, config)}
    assert by["random"]["best_known"] == 500 and by["random"]["reference_queries"] == 3000
    assert by["random"]["gap_at"][100] == (1.0 + 0.8) / 2  # (1000-500)/500, (900-500)/500
    assert by["tree"]["gap_at"][100] is None  # a seed had no plan yet
    # within 1 % (<= 505): random seed 0 at 600, seed 1 never -> median inf
    assert math.isinf(by["random"]["queries_to_1pct"])
    assert by["tree"]["queries_to_1pct"] == (2000 + 4000) / 2
    assert by["gin-rg"]["queries_to_1pct"] == (300 + 350) / 2
    assert by["gin-rg"]["final_gap"] == (0 + 0.01) / 2
    # 325 * 5 <= 3000: five times fewer queries than tree; final gap not worse than random's
    assert verdicts(rows, config) == [
        "ls + gin-rg: within 1 % with >= 5x fewer queries than tree in 1 of 1 cells; "
        "final plan worse than random in 0"
    ]
    table = markdown(rows, config)
    assert "| m BRR 128KB | ls | random | 90.0 % | 10.5 % | 10.5 % | never | 1.0 |" in table


def test_one_run_stops_at_its_query_budget():
    config = QueriesConfig(query_budget=300, plan_budget=5000)
    r = measure("nasnet-c3|brr|128KB|rs|random|0", config)
    assert r["queries"] >= 300 and r["plans"] < 5000
    assert r["trace"][-1][1] == r["dram"] and r["key"] == config.key(
        "nasnet-c3|brr|128KB|rs|random|0"
    )


def test_a_gnn_splitters_row_is_keyed_by_the_weights_it_reads(tmp_path, monkeypatch):
    from explainers.checkpoints import WEIGHTS_ENV

    config = QueriesConfig()
    monkeypatch.setenv(WEIGHTS_ENV, str(tmp_path))
    (tmp_path / "gin-brr.pt").write_bytes(b"one")
    tree, rg = "m|brr|128KB|ls|tree|0", "m|brr|128KB|ls|gin-rg|0"
    before = config.key(tree), config.key(rg)
    (tmp_path / "gin-brr.pt").write_bytes(b"two!")  # retrained (another size: mtimes are coarse)
    assert config.key(tree) == before[0]  # model-free rows resume
    after = config.key(rg)
    assert after != before[1]  # GNN rows run again
    (tmp_path / "gin-lbdf.pt").write_bytes(b"other scheme")
    assert config.key(rg) == after  # another scheme's weights are not read
