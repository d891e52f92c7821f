"""The dynamic workloads and their cells (fusionplan.batching.workloads / .cells).

The graphs are checked by hand on tiny explicit inputs, and statistically on generated ones
(length moments, the 2-type split, the word-link rate); the cells by shape, by agreement
with torch's own LSTM/GRU cells, and by the property batching relies on: a row's result
does not depend on the batch it runs in.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import pytest
import torch

from fusionplan.batching.cells import build_cells
from fusionplan.batching.graph import CellNode, DataflowGraph
from fusionplan.batching.workloads import (
    CLASSES,
    VOCAB,
    WORKLOADS,
    Branch,
    Lattice,
    Sentence,
    Word,
    get_workload,
)
from fusionplan.ir.errors import ConfigError

NAMES = ["bilstm", "treelstm", "treegru", "treelstm2", "latticelstm", "latticegru"]
H = 8  # hidden size for the cell tests


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def test_registry_lists_the_workloads_and_rejects_unknown_names() -> None:
    assert WORKLOADS.names() == NAMES
    assert [get_workload(n).family for n in NAMES] == ["chain"] + ["tree"] * 3 + ["lattice"] * 2
    assert all(get_workload(n).description for n in NAMES)
    with pytest.raises(ConfigError, match=r"^unknown workload 'nope' \(choose from bilstm,"):
        get_workload("nope")
    with pytest.raises(ConfigError, match="batch size"):
        get_workload("bilstm").graph(0, 0)


@pytest.mark.parametrize("name", NAMES)
def test_graph_is_consistent_with_cell_types(name: str) -> None:
    w = get_workload(name)
    g = w.graph(8, 0)
    specs = w.cell_types()
    assert isinstance(g, DataflowGraph) and g.name == name
    assert set(g.types) == set(specs)  # 8 inputs exercise every type
    assert list(g.instance) == sorted(g.instance) and set(g.instance) == set(range(8))
    for i, node in enumerate(g.nodes):
        spec = specs[node.type]
        assert len(node.args) == len(spec.slots) == len(spec.operands)
        assert 0 <= node.token < VOCAB if spec.reads_token else node.token == -1
        for a, width in zip(node.args, spec.operand_width(7), strict=True):
            assert specs[g.nodes[a].type].output_width(7) == width  # producers fit the slot
            assert g.instance[a] == g.instance[i]  # inputs never share nodes
        # readouts are the only sinks: nothing computed is thrown away
        assert (spec.kind == "readout") == (not g.successors[i])
        if spec.kind == "readout":
            assert spec.output_width(7) == spec.output_width(100) == CLASSES


@pytest.mark.parametrize("name", NAMES)
def test_graph_is_seeded(name: str) -> None:
    w = get_workload(name)
    assert w.graph(16, 3) == w.graph(16, 3)
    assert w.graph(16, 3) != w.graph(16, 4)
    assert w.graph(16, 3).nodes[: len(w.graph(4, 3))] == w.graph(4, 3).nodes  # a prefix


def shape(g: DataflowGraph, rename: dict[str, str]) -> list[tuple[str, tuple[int, ...], int]]:
    return [(rename.get(n.type, n.type), n.args, n.token) for n in g.nodes]


def test_related_workloads_draw_the_same_inputs() -> None:
    """Tree workloads share trees and lattice workloads share lattices for one seed, so
    their schedules compare on identical inputs."""
    tree = shape(get_workload("treelstm").graph(32, 5), {})
    gru = {"leaf_gru": "leaf_lstm", "tree_gru": "tree_lstm"}
    assert shape(get_workload("treegru").graph(32, 5), gru) == tree
    two = {"tree_lstm_a": "tree_lstm", "tree_lstm_b": "tree_lstm"}
    assert shape(get_workload("treelstm2").graph(32, 5), two) == tree
    lattice = get_workload("latticelstm").graph(32, 5)
    assert get_workload("latticegru").graph(32, 5) == DataflowGraph(
        lattice.nodes, lattice.instance, "latticegru"
    )


def test_bilstm_unrolls_a_sentence_by_hand() -> None:
    g = get_workload("bilstm").graph_of([Sentence((5, 6, 7)), Sentence((1, 2))])
    first = [
        CellNode("embed", (), 5),  # 0
        CellNode("embed", (), 6),  # 1
        CellNode("embed", (), 7),  # 2
        CellNode("zero"),  # 3
        CellNode("lstm_fwd", (0, 3)),  # 4
        CellNode("lstm_fwd", (1, 4)),  # 5
        CellNode("lstm_fwd", (2, 5)),  # 6
        CellNode("lstm_bwd", (2, 3)),  # 7
        CellNode("lstm_bwd", (1, 7)),  # 8
        CellNode("lstm_bwd", (0, 8)),  # 9
        CellNode("tag", (4, 9)),
        CellNode("tag", (5, 8)),
        CellNode("tag", (6, 7)),
    ]
    second = [
        CellNode("embed", (), 1),  # 13
        CellNode("embed", (), 2),  # 14
        CellNode("zero"),  # 15
        CellNode("lstm_fwd", (13, 15)),  # 16
        CellNode("lstm_fwd", (14, 16)),  # 17
        CellNode("lstm_bwd", (14, 15)),  # 18
        CellNode("lstm_bwd", (13, 18)),  # 19
        CellNode("tag", (16, 19)),
        CellNode("tag", (17, 18)),
    ]
    assert list(g.nodes) == first + second
    assert g.instance == (0,) * 13 + (1,) * 9


def test_trees_unroll_post_order_by_hand() -> None:
    tree = Branch(Branch(1, 2, variant=1), 3)
    expected = [
        CellNode("leaf_lstm", (), 1),  # 0
        CellNode("leaf_lstm", (), 2),  # 1
        CellNode("tree_lstm", (0, 1)),  # 2
        CellNode("leaf_lstm", (), 3),  # 3
        CellNode("tree_lstm", (2, 3)),  # 4
        CellNode("classify", (4,)),
    ]
    assert list(get_workload("treelstm").graph_of([Branch(Branch(1, 2), 3)]).nodes) == expected
    two = get_workload("treelstm2").graph_of([tree]).nodes
    assert [n.type for n in two] == [
        "leaf_lstm",
        "leaf_lstm",
        "tree_lstm_b",
        "leaf_lstm",
        "tree_lstm_a",
        "classify",
    ]
    gru = get_workload("treegru").graph_of(
        [Branch(Branch(1, 2), 3), 9]
    )  # a one-word tree: the root is a leaf
    assert [n.type for n in gru.nodes][-3:] == ["classify", "leaf_gru", "classify"]
    assert gru.nodes[-1].args == (len(gru) - 2,)


def test_lattice_unrolls_by_hand() -> None:
    # words [0..2] and [1..2] both end at char 2 (the shorter merges first); [2..3] ends at 3
    lattice = Lattice((10, 11, 12, 13), (Word(0, 3, 100), Word(1, 2, 101), Word(2, 2, 102)))
    expected = [
        CellNode("zero"),  # 0
        CellNode("char_embed", (), 10),  # 1
        CellNode("char_cell", (1, 0)),  # 2
        CellNode("tag", (2,)),  # 3
        CellNode("word_embed", (), 100),  # 4
        CellNode("word_cell", (4, 2)),  # 5: word [0..2]
        CellNode("char_embed", (), 11),  # 6
        CellNode("char_cell", (6, 2)),  # 7
        CellNode("tag", (7,)),  # 8
        CellNode("word_embed", (), 101),  # 9
        CellNode("word_cell", (9, 7)),  # 10: word [1..2]
        CellNode("char_embed", (), 12),  # 11
        CellNode("char_cell", (11, 7)),  # 12
        CellNode("merge", (12, 10)),  # 13: word [1..2]
        CellNode("merge", (13, 5)),  # 14: word [0..2]
        CellNode("tag", (14,)),  # 15
        CellNode("word_embed", (), 102),  # 16
        CellNode("word_cell", (16, 14)),  # 17: word [2..3] reads the merged state
        CellNode("char_embed", (), 13),  # 18
        CellNode("char_cell", (18, 14)),  # 19: the chain goes on from the merged state
        CellNode("merge", (19, 17)),  # 20
        CellNode("tag", (20,)),  # 21
    ]
    for name in ("latticelstm", "latticegru"):
        assert list(get_workload(name).graph_of([lattice]).nodes) == expected
    for bad in (Word(3, 2, 0), Word(1, 1, 0), Word(-1, 2, 0)):
        with pytest.raises(ConfigError, match="does not fit 4 characters"):
            get_workload("latticelstm").graph_of([Lattice((1, 2, 3, 4), (bad,))])


def leaves(t: object) -> int:
    return 1 if isinstance(t, int) else leaves(t.left) + leaves(t.right)  # type: ignore[attr-defined]


def test_input_sizes_follow_the_documented_distributions() -> None:
    sentences = [len(s.tokens) for s in get_workload("bilstm").inputs(3000, 0)]
    assert 21.5 < statistics.mean(sentences) < 24.5
    assert 9.5 < statistics.stdev(sentences) < 12.5
    assert min(sentences) >= 2 and max(sentences) <= 80
    trees = [leaves(t) for t in get_workload("treelstm").inputs(3000, 0)]
    assert 21.5 < statistics.mean(trees) < 24.5 and min(trees) >= 2 and max(trees) <= 50
    chars = [len(x.chars) for x in get_workload("latticelstm").inputs(3000, 0)]
    assert 33 < statistics.mean(chars) < 37 and 13 < statistics.stdev(chars) < 17
    assert min(chars) >= 4 and max(chars) <= 100


def test_two_type_tree_splits_internal_nodes_evenly() -> None:
    g = get_workload("treelstm2").graph(256, 0)
    counts = g.type_counts()
    a, b = counts["tree_lstm_a"], counts["tree_lstm_b"]
    assert a + b == counts["leaf_lstm"] - 256  # n - 1 internal nodes per tree
    assert a + b > 4000 and 0.45 < a / (a + b) < 0.55
    mixed = defaultdict(set)
    for node, i in zip(g.nodes, g.instance, strict=True):
        if node.type.startswith("tree_lstm"):
            mixed[i].add(node.type)
    assert sum(len(kinds) == 2 for kinds in mixed.values()) > 200  # types mix within trees


def test_lattice_word_links_have_the_documented_rate() -> None:
    w = get_workload("latticelstm")
    lattices = w.inputs(256, 0)
    for length in w.word_lengths:
        slots = sum(max(0, len(x.chars) - length + 1) for x in lattices)
        links = sum(wd.length == length for x in lattices for wd in x.words)
        assert abs(links / slots - w.link_prob) < 0.02, length
    g = w.graph_of(lattices)
    assert g.type_counts()["word_cell"] == sum(len(x.words) for x in lattices)


@pytest.mark.parametrize("name", NAMES)
def test_generation_is_fast(name: str) -> None:
    """Measured 30-150 ms for 256 inputs (module docstring); 2 s leaves room for slow
    machines and catches a quadratic step."""
    w = get_workload(name)
    start = time.perf_counter()
    w.graph(256, 0)
    assert time.perf_counter() - start < 2.0


def random_operands(specs, name, k, gen) -> tuple[list[torch.Tensor], torch.Tensor]:
    spec = specs[name]
    operands = [torch.randn(k, width, generator=gen) for width in spec.operand_width(H)]
    if spec.reads_token:
        return operands, torch.randint(0, VOCAB, (k,), generator=gen)
    return operands, torch.full((k,), -1)


@pytest.mark.parametrize("name", NAMES)
def test_cells_have_the_spec_widths_and_batching_never_mixes_rows(name: str) -> None:
    w = get_workload(name)
    specs = w.cell_types()
    cells = build_cells(w, H, seed=0)
    assert set(cells) == set(specs)
    gen = torch.Generator().manual_seed(1)
    for type_, cell in cells.items():
        assert not cell.training
        operands, tokens = random_operands(specs, type_, 6, gen)
        out = cell(operands, tokens)
        assert out.shape == (6, specs[type_].output_width(H)), type_
        assert out.dtype == torch.float32 and not out.requires_grad
        assert torch.isfinite(out).all()
        rows = [cell([op[r : r + 1] for op in operands], tokens[r : r + 1]) for r in range(6)]
        close(out, torch.cat(rows))
        close(out[2:5], cell([op[2:5] for op in operands], tokens[2:5]))


@pytest.mark.parametrize("name", NAMES)
def test_cells_are_seeded(name: str) -> None:
    specs = get_workload(name).cell_types()
    a, b, other = build_cells(name, H, 0), build_cells(name, H, 0), build_cells(name, H, 1)
    gen = torch.Generator().manual_seed(2)
    for type_ in specs:
        operands, tokens = random_operands(specs, type_, 4, gen)
        assert torch.equal(a[type_](operands, tokens), b[type_](operands, tokens))
        if specs[type_].kind != "zero":
            assert not torch.equal(a[type_](operands, tokens), other[type_](operands, tokens))


def test_build_cells_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError, match="hidden size"):
        build_cells("bilstm", 0)
    with pytest.raises(ConfigError, match="unknown workload"):
        build_cells("gpt", 8)


def test_lstm_and_gru_steps_match_torch() -> None:
    gen = torch.Generator().manual_seed(3)
    x, h, c = (torch.randn(5, H, generator=gen) for _ in range(3))
    lstm = build_cells("bilstm", H)["lstm_fwd"]
    ref = torch.nn.LSTMCell(H, H)
    with torch.no_grad():
        ref.weight_ih.copy_(lstm.step.x.weight)
        ref.bias_ih.copy_(lstm.step.x.bias)
        ref.weight_hh.copy_(lstm.step.h.weight)
        ref.bias_hh.zero_()
        close(lstm([x, torch.cat([h, c], 1)], torch.full((5,), -1)), torch.cat(ref(x, (h, c)), 1))
    gru = build_cells("latticegru", H)["char_cell"]
    ref = torch.nn.GRUCell(H, H)
    with torch.no_grad():
        ref.weight_ih.copy_(gru.step.x.weight)
        ref.bias_ih.copy_(gru.step.x.bias)
        ref.weight_hh.copy_(gru.step.h.weight)
        ref.bias_hh.copy_(gru.step.h.bias)
        close(gru([x, h], torch.full((5,), -1)), ref(x, h))


def test_tree_and_merge_cells_do_what_they_claim() -> None:
    gen = torch.Generator().manual_seed(4)
    none = torch.full((5,), -1)
    left, right = torch.randn(5, 2 * H, generator=gen), torch.randn(5, 2 * H, generator=gen)
    node = build_cells("treelstm", H)["tree_lstm"]
    (hl, cl), (hr, cr) = left.split(H, 1), right.split(H, 1)
    gates = torch.cat([hl, hr], 1) @ node.gates.weight.T + node.gates.bias
    i, fl, fr, o, u = gates.chunk(5, 1)
    c = i.sigmoid() * u.tanh() + fl.sigmoid() * cl + fr.sigmoid() * cr  # Tai et al. eq. 9-14
    close(node([left, right], none), torch.cat([o.sigmoid() * c.tanh(), c], 1))
    assert not torch.allclose(node([left, right], none), node([right, left], none))  # N-ary
    state, word = torch.randn(5, 2 * H, generator=gen), torch.randn(5, H, generator=gen)
    merged = build_cells("latticelstm", H)["merge"]([state, word], none)[:, H:]
    low, high = torch.minimum(state[:, H:], word), torch.maximum(state[:, H:], word)
    assert ((merged >= low - 1e-6) & (merged <= high + 1e-6)).all()  # a gated mix of the two
    h, hw = torch.randn(5, H, generator=gen), torch.randn(5, H, generator=gen)
    merged = build_cells("latticegru", H)["merge"]([h, hw], none)
    assert ((merged >= torch.minimum(h, hw) - 1e-6) & (merged <= torch.maximum(h, hw) + 1e-6)).all()
    zero = build_cells("latticelstm", H)["zero"]([], none)
    assert torch.equal(zero, torch.zeros(5, 2 * H))


def run_graph(g: DataflowGraph, cells, batched: bool) -> list[torch.Tensor]:
    """Node by node, or one call per (depth, type) wavefront: the values must agree."""
    out: list[torch.Tensor] = [torch.empty(0)] * len(g)
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for i, node in enumerate(g.nodes):
        groups[(g.depth[i] if batched else i, node.type)].append(i)
    for (_, type_), ids in sorted(groups.items()):
        nodes = [g.nodes[i] for i in ids]
        operands = [torch.cat([out[n.args[j]] for n in nodes]) for j in range(len(nodes[0].args))]
        result = cells[type_](operands, torch.tensor([n.token for n in nodes]))
        for r, i in enumerate(ids):
            out[i] = result[r : r + 1]
    return out


@pytest.mark.parametrize("name", NAMES)
def test_whole_graph_runs_the_same_batched_and_unbatched(name: str) -> None:
    g = get_workload(name).graph(2, 1)
    cells = build_cells(name, H, seed=0)
    batched, single = run_graph(g, cells, True), run_graph(g, cells, False)
    for a, b in zip(batched, single, strict=True):
        close(a, b)
