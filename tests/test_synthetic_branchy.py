"""The branchy synthetic models (RandWire, NASNet-A cells) for the stream-scheduling bench."""

from __future__ import annotations

import networkx as nx
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from networkx.algorithms import bipartite

from fusionplan.data.synthetic import SYNTHETIC, nasnet_cells, randwire, watts_strogatz_dag
from fusionplan.ir.onnx_model import from_onnx

# Small spatial size keeps onnxruntime fast; the graph structure does not depend on it.
BUILDERS = {
    "randwire": lambda seed: randwire(size=8, seed=seed),
    "nasnet": lambda seed: nasnet_cells(size=8, seed=seed),
}
MIN_WIDTH = {"randwire": 4, "nasnet": 4}


def node_graph(model: onnx.ModelProto) -> nx.DiGraph:
    """Node -> node edges: producer of a tensor -> each consumer of it."""
    producer = {out: n.name for n in model.graph.node for out in n.output}
    g = nx.DiGraph()
    g.add_nodes_from(n.name for n in model.graph.node)
    for n in model.graph.node:
        for t in n.input:
            if t in producer:
                g.add_edge(producer[t], n.name)
    return g


def antichain_width(g: nx.DiGraph) -> int:
    """Maximum antichain size (Dilworth: n minus a maximum matching over the closure)."""
    closure = nx.transitive_closure_dag(g)
    b = nx.Graph()
    left = [("L", v) for v in g]
    b.add_nodes_from(left)
    b.add_nodes_from(("R", v) for v in g)
    b.add_edges_from((("L", u), ("R", v)) for u, v in closure.edges)
    matching = bipartite.hopcroft_karp_matching(b, top_nodes=left)
    return g.number_of_nodes() - len(matching) // 2


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def built(request) -> tuple[str, onnx.ModelProto]:
    return request.param, BUILDERS[request.param](0)


def test_checker_passes(built):
    _, model = built
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17


def test_runs_in_onnxruntime(built):
    _, model = built
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert shape == [1, 64, 8, 8]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    assert y.shape == tuple(shape)
    assert np.isfinite(y).all()
    assert np.abs(y).max() > 0


def test_deterministic_per_seed(built):
    name, model = built
    assert BUILDERS[name](0).SerializeToString() == model.SerializeToString()
    assert BUILDERS[name](1).SerializeToString() != model.SerializeToString()


def test_substitution_import(built):
    _, model = built
    sub = from_onnx(model)
    assert len(sub) == len(model.graph.node)
    assert sub.inputs == ("x",)


def test_branchy(built):
    name, model = built
    g = node_graph(model)
    assert nx.is_directed_acyclic_graph(g)
    assert antichain_width(g) >= MIN_WIDTH[name]


def test_antichain_width_helper():
    chain = nx.DiGraph([(0, 1), (1, 2)])
    assert antichain_width(chain) == 1
    diamond = nx.DiGraph([(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (3, 4)])
    assert antichain_width(diamond) == 3


def test_registered_with_defaults():
    assert SYNTHETIC["randwire"] is randwire
    assert SYNTHETIC["nasnet"] is nasnet_cells


def test_randwire_default_size():
    model = randwire()
    shape = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert shape == [1, 64, 28, 28]
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 2 * 32
    assert antichain_width(node_graph(model)) >= 4


def test_nasnet_cell_count():
    model = nasnet_cells(cells=2, size=8)
    concats = [n for n in model.graph.node if n.op_type == "Concat"]
    assert len(concats) == 2
    # Per cell: 5 separable convs (Relu + 2 Conv each), 3 average pools, 5 Adds, Concat, Conv.
    assert len(model.graph.node) == 2 * (5 * 3 + 3 + 5 + 1 + 1)


@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize(("n", "k", "p"), [(32, 4, 0.75), (10, 2, 0.5), (8, 6, 1.0)])
def test_ws_structure(n, k, p, seed):
    edges = watts_strogatz_dag(n, k, p, seed)
    assert len(edges) == n * k // 2  # rewiring keeps the edge count
    assert len(set(edges)) == len(edges)
    assert all(0 <= u < v < n for u, v in edges)  # no self loops, oriented low -> high
    touched = {u for e in edges for u in e}
    assert touched == set(range(n))
    assert nx.is_directed_acyclic_graph(nx.DiGraph(edges))


def test_ws_ring_lattice():
    n = 9
    edges = watts_strogatz_dag(n, 2, 0.0, 3)
    assert edges == sorted([(i, i + 1) for i in range(n - 1)] + [(0, n - 1)])
    wide = watts_strogatz_dag(n, 4, 0.0, 3)
    expected = {tuple(sorted((i, (i + j) % n))) for i in range(n) for j in (1, 2)}
    assert set(wide) == expected


def test_ws_seeded():
    assert watts_strogatz_dag(32, 4, 0.75, 5) == watts_strogatz_dag(32, 4, 0.75, 5)
    assert watts_strogatz_dag(32, 4, 0.75, 5) != watts_strogatz_dag(32, 4, 0.75, 6)
    assert watts_strogatz_dag(32, 4, 0.75, 5) != watts_strogatz_dag(32, 4, 0.0, 5)


@pytest.mark.parametrize(("n", "k"), [(8, 3), (8, 0), (8, 8)])
def test_ws_rejects_bad_k(n, k):
    with pytest.raises(ValueError):
        watts_strogatz_dag(n, k, 0.5)
