"""Explainer splitters (gnne / pg / rg) inside every search, and their checkpoints.

A tiny GIN is trained on groups of random DAGs (tests/random_dags.py) labelled by the LBDF
cost model, saved as ``gin-lbdf.pt`` in a temporary weights directory, and PG and RG are
trained against it with the public ``train_pg`` / ``train_rg`` (a few epochs: quality does
not matter here, plumbing does). Each test points ``FUSIONPLAN_WEIGHTS_DIR`` at that
directory; xdist workers share one copy through a file lock.
"""

from __future__ import annotations

import random
import shutil

import pytest

from tests.shared_dirs import shared_dir

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric")

from torch_geometric.data import Batch, Data  # noqa: E402

from accel_model import Accelerator, make_cost_model  # noqa: E402
from accel_model.lbdf import LBDF  # noqa: E402
from explainers.checkpoints import WEIGHTS_ENV, CheckpointError, save_checkpoint  # noqa: E402
from explainers.gin import GINClassifier, GINConfig  # noqa: E402
from fusionplan.app.api import plan  # noqa: E402
from fusionplan.data.features import (  # noqa: E402
    FEATURE_VERSION,
    group_features,
    model_input,
    node_feature_table,
)
from fusionplan.ir.graph import bits, is_weakly_connected, mask_of  # noqa: E402
from fusionplan.planning.split import SPLITTERS, make_splitter  # noqa: E402
from tests.random_dags import random_dag, small_buffer  # noqa: E402

SCHEME = "lbdf"
GIN_CONFIG = GINConfig(hidden=16)


def plan_graph():
    graph = random_dag(7, n_nodes=16)
    return graph, small_buffer(LBDF, graph, 7, quantile=0.9)


def samples(n_graphs=40, seed=0):
    rng = random.Random(seed)
    out = []
    for k in range(n_graphs):
        g = random_dag(100 + k, n_nodes=rng.randint(6, 14))
        beta = small_buffer(LBDF, g, k)
        cm = make_cost_model(g, Accelerator(beta, SCHEME))
        table = node_feature_table(g)
        for _ in range(6):
            i = rng.randrange(len(g))
            grp = mask_of(range(i, rng.randint(i, len(g) - 1) + 1))
            if not is_weakly_connected(g, grp):
                continue
            x, ei = group_features(g, table, grp)
            out.append(
                Data(
                    x=torch.from_numpy(model_input(x, ei, beta)),
                    edge_index=torch.from_numpy(ei),
                    y=torch.tensor([int(cm.is_valid(grp))]),
                )
            )
    return out


def train_tiny_gin(data, seed=0, epochs=15):
    torch.manual_seed(seed)
    model = GINClassifier(GIN_CONFIG)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        for k in range(0, len(data), 32):
            b = Batch.from_data_list(data[k : k + 32])
            loss = torch.nn.functional.cross_entropy(model(b.x, b.edge_index, b.batch), b.y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    return model.eval()


def save_gin(model, directory, scheme=SCHEME):
    meta = {"gin_config": model.config_dict(), "config": model.config_dict(),
            "feature_version": FEATURE_VERSION, "dataset": "tests: random DAG groups"}  # fmt: skip
    save_checkpoint(model.state_dict(), "gin", scheme, meta, directory)


@pytest.fixture(scope="session")
def trained_weights(tmp_path_factory):
    """A weights directory with gin/pg/rg checkpoints for LBDF (trained once)."""
    from filelock import FileLock

    from explainers.train_explainers import train_pg, train_rg

    torch.set_num_threads(1)
    root = shared_dir(tmp_path_factory, "explainer-splitter-weights")
    weights = root / "weights"
    with FileLock(str(root / ".lock")):
        if not (weights / "rg-lbdf.pt").is_file():
            tmp = root / "building"
            shutil.rmtree(tmp, ignore_errors=True)
            data = samples()
            gin = train_tiny_gin(data)
            save_gin(gin, tmp)
            train_pg(SCHEME, data, epochs=2, max_samples=64, model=gin, directory=tmp)
            train_rg(SCHEME, data, pretrain_epochs=1, epochs=1, max_samples=32, model=gin,
                     directory=tmp)  # fmt: skip
            tmp.rename(weights)
    return weights


@pytest.fixture
def weights(trained_weights, monkeypatch):
    from explainers.splitters import clear_cache

    monkeypatch.setenv(WEIGHTS_ENV, str(trained_weights))
    clear_cache()
    yield trained_weights
    clear_cache()


def copy_weights(src, dst, kinds=("gin", "pg", "rg")):
    import json

    dst.mkdir(exist_ok=True)
    manifest = json.loads((src / "manifest.json").read_text())
    keep = {f"{k}-{SCHEME}.pt" for k in kinds}
    manifest["checkpoints"] = {k: v for k, v in manifest["checkpoints"].items() if k in keep}
    for name in keep:
        shutil.copy(src / name, dst / name)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


# ----------------------------------------------------------------------------- planning
def test_explainer_splitters_are_registered():
    assert {"gnne", "pg", "rg", "tree", "random"} <= set(SPLITTERS.names())


@pytest.mark.parametrize("search", ["rs", "ls", "nsga2"])
@pytest.mark.parametrize("name", ["gnne", "pg", "rg"])
def test_plan_with_explainer_splitter_in_every_search(weights, name, search):
    graph, beta = plan_graph()
    p = plan(graph, beta, SCHEME, search=search, splitter=name, budget=8, seed=0)
    p.validate()
    info = p.info
    assert info["splitter"] == name and info["proposed"] == 8
    assert info["invalid_groups_split"] > 0  # the explainer was actually asked
    assert p.result.explained_groups > 0 and p.result.explain_seconds > 0


@pytest.mark.parametrize("name", ["gnne", "pg", "rg"])
def test_explainer_splitter_returns_valid_cover(weights, name):
    graph, beta = plan_graph()
    cm = make_cost_model(graph, Accelerator(beta, SCHEME))
    splitter = make_splitter(name, cm, 0)
    assert splitter.name == f"tree[{name}]"
    group = graph.all_nodes
    assert not cm.is_valid(group)
    parts = splitter.split(group)
    assert sum(p.bit_count() for p in parts) == group.bit_count()
    assert mask_of(v for p in parts for v in bits(p)) == group
    assert all(cm.is_valid(p) or p.bit_count() == 1 for p in parts)
    ranker = splitter.ranker
    assert ranker.stats.explained >= 1 and splitter.stats.invalid_groups == 1


def test_explainer_splitters_are_deterministic(weights):
    graph, beta = plan_graph()
    for name in ("gnne", "rg"):
        a = plan(graph, beta, SCHEME, search="rs", splitter=name, budget=4, seed=3)
        b = plan(graph, beta, SCHEME, search="rs", splitter=name, budget=4, seed=3)
        assert a.groups == b.groups


# ----------------------------------------------------------------------------- checkpoints
def _cm(scheme=SCHEME):
    graph, beta = plan_graph()
    return make_cost_model(graph, Accelerator(beta, scheme))


def test_missing_gin_names_the_training_command(tmp_path, monkeypatch):
    from explainers.splitters import clear_cache

    monkeypatch.setenv(WEIGHTS_ENV, str(tmp_path))
    clear_cache()
    for name in ("gnne", "pg", "rg"):
        with pytest.raises(CheckpointError, match="fusionplan train gin --scheme lbdf"):
            make_splitter(name, _cm(), 0)
    with pytest.raises(CheckpointError, match="fusionplan train gin --scheme brr"):
        make_splitter("rg", _cm("brr"), 0)


@pytest.mark.parametrize("kind", ["pg", "rg"])
def test_missing_explainer_names_its_training_command(trained_weights, tmp_path, monkeypatch,
                                                      kind):  # fmt: skip
    from explainers.splitters import clear_cache

    monkeypatch.setenv(WEIGHTS_ENV, str(copy_weights(trained_weights, tmp_path / "w", ["gin"])))
    clear_cache()
    with pytest.raises(CheckpointError, match=f"fusionplan train {kind} --scheme lbdf"):
        make_splitter(kind, _cm(), 0)
    with pytest.raises(CheckpointError, match=f"fusionplan train {kind} --scheme lbdf"):
        plan(plan_graph()[0], plan_graph()[1], SCHEME, search="rs", splitter=kind, budget=2)
    make_splitter("gnne", _cm(), 0)  # needs only the GIN


@pytest.mark.parametrize("kind", ["pg", "rg"])
def test_explainer_trained_for_another_gin_is_refused(trained_weights, tmp_path, monkeypatch,
                                                      kind):  # fmt: skip
    from explainers.splitters import clear_cache

    w = copy_weights(trained_weights, tmp_path / "w")
    save_gin(train_tiny_gin(samples(8, seed=1), seed=1, epochs=1), w)  # a retrained GIN
    monkeypatch.setenv(WEIGHTS_ENV, str(w))
    clear_cache()
    with pytest.raises(CheckpointError, match=f"different GIN.*fusionplan train {kind} --scheme"):
        make_splitter(kind, _cm(), 0)


@pytest.mark.parametrize("kind", ["pg", "rg"])
def test_malformed_explainer_checkpoint_is_a_clear_error(trained_weights, tmp_path, monkeypatch,
                                                         kind):  # fmt: skip
    import json

    from explainers.splitters import clear_cache

    w = copy_weights(trained_weights, tmp_path / "w")
    entry = json.loads((w / "manifest.json").read_text())["checkpoints"][f"{kind}-lbdf.pt"]
    meta = {k: v for k, v in entry.items() if k not in ("kind", "scheme", "checkpoint_version")}
    save_checkpoint({"junk": torch.zeros(3)}, kind, SCHEME, meta, w)
    monkeypatch.setenv(WEIGHTS_ENV, str(w))
    clear_cache()
    with pytest.raises(CheckpointError, match=f"fusionplan train {kind} --scheme lbdf"):
        make_splitter(kind, _cm(), 0)


def test_training_records_what_it_used(weights):
    import json

    from explainers.gin import gin_fingerprint, load_gin_model

    manifest = json.loads((weights / "manifest.json").read_text())["checkpoints"]
    fp = gin_fingerprint(load_gin_model(SCHEME))
    for kind in ("pg", "rg"):
        entry = manifest[f"{kind}-lbdf.pt"]
        assert entry["gin_fingerprint"] == fp
        assert entry["samples"] > 0 and entry["seed"] == 0
        assert entry["sample_rule"] == "GIN-predicted invalid"
    assert manifest["rg-lbdf.pt"]["pretrain_epochs"] == 1


def test_train_rg_is_deterministic(tmp_path):
    from explainers.train_explainers import train_rg

    data = samples(10)
    gin = train_tiny_gin(data, epochs=3)
    states = []
    for d in ("a", "b"):
        out = train_rg(SCHEME, data, pretrain_epochs=1, epochs=1, max_samples=12, model=gin,
                       directory=tmp_path / d)  # fmt: skip
        states.append(torch.load(out.path, weights_only=True))
    a, b = (s["modules"] for s in states)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- GIN judge
@pytest.mark.parametrize("search", ["rs", "ls", "nsga2"])
def test_gin_judged_splitter_plans_validly_in_every_search(weights, search):
    graph, beta = plan_graph()
    p = plan(graph, beta, SCHEME, search=search, splitter="gin-pg", budget=8, seed=0)
    p.validate()  # a part the GIN wrongly called valid was split again
    assert p.info["splitter"] == "gin-pg" and p.info["invalid_groups_split"] > 0


def _split_all(name, graph, beta, judge=None):
    """Split the whole graph with splitter ``name`` (optionally another judge): the parts
    and the oracle queries it took."""
    cm = make_cost_model(graph, Accelerator(beta, SCHEME))
    splitter = make_splitter(name, cm, 0)
    if judge is not None:
        splitter.judge = judge(cm, splitter)
    parts = splitter.split(graph.all_nodes)
    assert mask_of(v for p in parts for v in bits(p)) == graph.all_nodes
    assert all(cm.is_valid(p) or p.bit_count() == 1 for p in parts)
    return parts, cm.stats.misses, splitter


def test_an_untrusted_gin_judge_is_the_plain_tree(weights):
    """Before it has scored well on the oracle's answers the judge defers to the oracle:
    the same parts and the same queries as the explainer's own tree."""
    for seed in range(3):
        graph = random_dag(200 + seed, n_nodes=16)
        beta = small_buffer(LBDF, graph, seed, quantile=0.9)
        plain, asked, _ = _split_all("pg", graph, beta)
        judged, asked_judged, splitter = _split_all("gin-pg", graph, beta)
        assert splitter.name == "tree[pg, gin judge]"
        assert (judged, asked_judged) == (plain, asked)
        assert not splitter.judge.trusted and not splitter.judge.trusted_screening


def test_a_trusted_gin_judge_asks_only_about_parts_kept(weights):
    """Trusted from its first score (error bounds of 1), the judge classifies the probed
    cuts with the GIN and screens: fewer oracle queries than the plain tree, covers still
    valid (every part kept was asked)."""
    from explainers.judge import Adaptation, GinJudge

    def trusting(cm, splitter):
        return GinJudge(cm, splitter.judge.model, Adaptation(every=1, steps=1,
                        max_false_invalid=1.0, max_false_valid=1.0))  # fmt: skip

    asked = {"pg": 0, "gin": 0}
    for seed in range(4):
        graph = random_dag(200 + seed, n_nodes=16)
        beta = small_buffer(LBDF, graph, seed, quantile=0.9)
        asked["pg"] += _split_all("pg", graph, beta)[1]
        _, n, splitter = _split_all("gin-pg", graph, beta, judge=trusting)
        asked["gin"] += n
        stats = splitter.judge.stats
        assert stats.updates > 0 and stats.classifying_from >= 0 and stats.predicted > 0
    assert asked["gin"] < asked["pg"]


def test_the_judge_acts_only_on_verdicts_its_probability_backs(weights):
    """A verdict is the likelier class where its probability reaches the confidence, None
    (ask the oracle) elsewhere; a confidence under 1/2 would flip verdicts and is refused."""
    from explainers.judge import Adaptation, GinJudge
    from explainers.ranking import group_batch

    graph = random_dag(201, n_nodes=16)
    cm = make_cost_model(graph, Accelerator(small_buffer(LBDF, graph, 1, quantile=0.9), SCHEME))
    gin = make_splitter("gin-pg", cm, 0).judge.model
    groups = [mask_of(range(a, min(16, a + k))) for a in range(0, 14, 3) for k in (2, 5, 9)]
    with torch.no_grad():
        p = torch.softmax(gin(*group_batch(cm, GinJudge(cm, gin).table, groups)), -1)[:, 1]
    for sure in (0.5, 0.9, 0.99):
        verdicts = GinJudge(cm, gin, Adaptation(confidence=sure))._labels(groups)
        expected = [(q >= 0.5) if max(q, 1 - q) >= sure else None for q in p.tolist()]
        assert verdicts == expected
        assert sure > 0.5 or None not in verdicts
    with pytest.raises(ValueError, match="confidence must be in"):
        Adaptation(confidence=0.3)


def test_the_judge_is_trusted_per_use_by_the_error_that_use_pays_for(weights):
    from explainers.judge import Adaptation, GinJudge

    graph, beta = plan_graph()
    cm = make_cost_model(graph, Accelerator(beta, SCHEME))
    judge = GinJudge(cm, make_splitter("gin-pg", cm, 0).judge.model,
                     Adaptation(max_false_invalid=0.25, max_false_valid=0.0))  # fmt: skip
    truth = [True, True, True, True, False, False]
    # one fitting group called invalid (1/4 <= 0.25: screening trusted), one overflowing
    # group called valid (1/2 > 0: classifying cuts not trusted)
    judge._labels = lambda groups: [True, True, True, False, True, False]
    judge._score(list(range(3, 9)), truth)
    s = judge.stats
    assert (s.last_false_invalid, s.last_false_valid) == (0.25, 0.5)
    assert s.last_accuracy == 4 / 6
    assert judge.trusted_screening and not judge.trusted
    judge._labels = lambda groups: list(truth)
    judge._score(list(range(3, 9)), truth)
    assert judge.trusted_screening and judge.trusted
    # a judge that drifts loses its trust at the next score: 2 of 4 fitting called invalid
    judge._labels = lambda groups: [False, False, True, True, False, False]
    judge._score(list(range(3, 9)), truth)
    assert not judge.trusted_screening and judge.trusted
    assert (judge.stats.screening_from, judge.stats.classifying_from) == (0, 0)


def test_the_judge_fine_tunes_its_own_copy_of_the_gin(weights):
    from explainers.judge import Adaptation, GinJudge

    graph, beta = plan_graph()
    cm = make_cost_model(graph, Accelerator(beta, SCHEME))
    gin = make_splitter("gin-pg", cm, 0).judge.model
    before = [p.clone() for p in gin.parameters()]
    judge = GinJudge(cm, gin, Adaptation(every=4, steps=3))
    for v in range(len(graph) - 1):  # the oracle answers pairs of ops, singles and a chain
        cm.cost((1 << v) | (1 << (v + 1)) if v % 2 else 1 << v)
    judge.rules_out(graph.all_nodes)  # any use reads the new answers first
    assert judge.stats.updates == 1
    assert all(torch.equal(a, b) for a, b in zip(before, gin.parameters(), strict=True))
    assert any(not torch.equal(a, b) for a, b in
               zip(before, judge.model.parameters(), strict=True))  # fmt: skip
