"""The torch_geometric dataset class and GIN training, evaluation, saving and loading.

A small dataset is generated from the tiny CNNs of tests/dataset_models.py (a fraction of
a second); training on it takes a few seconds on one thread.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from explainers import train_gin as tg
from explainers.active import ROUND, adaptation_curve
from explainers.checkpoints import CheckpointError, load_checkpoint
from explainers.dataset import FusionGroupDataset, training_samples
from explainers.eval_gin import score_samples
from explainers.gin import GINClassifier, load_gin
from explainers.judge import Adaptation
from fusionplan.data import dataset as ds
from fusionplan.data import reader
from fusionplan.data.features import (
    FEATURE_NAMES,
    FEATURE_VERSION,
    GRAPH_NAMES,
    LOG_FLOOR,
    NUM_FEATURES,
    REL_CAP,
    group_features,
    model_input,
    node_feature_table,
    with_structure,
)
from fusionplan.ir.graph import Node, OpGraph, Tensor
from tests.dataset_models import TINY_BUFFERS_KB, save_tiny


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gin-models")
    models = [
        save_tiny(d, "tiny_a"),
        save_tiny(d, "tiny_b", seed=1, width=12, hw=24, blocks=4),
        save_tiny(d, "tiny_c", seed=3, width=16, hw=16, blocks=5),
    ]
    unseen = [save_tiny(d, "tiny_u", seed=2, width=10, hw=28, blocks=4)]
    out = tmp_path_factory.mktemp("gin-data") / "set"
    ds.generate_dataset(
        out, seed=0, groups=300, unseen_groups=150, models=models, unseen_models=unseen,
        buffers_kb=TINY_BUFFERS_KB, processes=1,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def trained(dataset_dir, tmp_path_factory):
    weights = tmp_path_factory.mktemp("weights")
    metrics = tg.train_gin(
        dataset_dir, "lbdf", epochs=15, seed=0, lr=3e-3, out_dir=weights, threads=1
    )
    return weights, metrics


# ----------------------------------------------------------------------------- features
def test_relative_columns_are_the_nodes_bytes_over_the_buffer():
    """A 3x3 conv (4 -> 8 channels, 16x16, int16) and a global pool at a 4 KB buffer: every
    relative column by hand."""
    tensors = [Tensor("x", (4, 16, 16), -1), Tensor("y", (8, 16, 16), 0),
               Tensor("z", (8, 1, 1), 1)]  # fmt: skip
    nodes = [
        Node("conv", "Conv", "conv", (0,), (1,), kernel=(3, 3), pads=(1, 1, 1, 1),
             weights=8 * 4 * 9 + 8),
        Node("pool", "GlobalAveragePool", "global_pool", (1,), (2,), whole_input=True),
    ]  # fmt: skip
    g = OpGraph.build("two", nodes, tensors, [0], [2])
    conv = 0
    x, ei = group_features(g, node_feature_table(g), 0b11)
    f = model_input(x, ei, 4096, bytes_per_element=2)
    col = {name: f[:, i] for i, name in enumerate(FEATURE_NAMES)}
    b = 2 / 4096
    expected_conv = {"weights": 296 * b, "in_row": 64 * b, "window": 192 * b,
                     "out_row": 128 * b, "in_tensor": 1024 * b, "out_tensor": 2048 * b,
                     "held": 0.0}  # fmt: skip
    expected_pool = {"weights": 0.0, "in_row": 128 * b, "window": 128 * b, "out_row": 8 * b,
                     "in_tensor": 2048 * b, "out_tensor": 8 * b, "held": 2048 * b}  # fmt: skip
    for v, expected in ((conv, expected_conv), (1, expected_pool)):
        for name, value in expected.items():
            assert col[f"rel_{name}"][v] == pytest.approx(min(value, REL_CAP), rel=1e-5)
            logged = np.clip(np.log2(max(value, 2**-LOG_FLOOR)), -LOG_FLOOR, 1) + LOG_FLOOR
            assert col[f"log_rel_{name}"][v] == pytest.approx(logged / LOG_FLOOR, rel=1e-5)
    assert np.all(col["log_buffer"] == 2.0)
    assert f.shape == (2, NUM_FEATURES)


def test_structure_columns_are_the_pipeline_depth_and_skip_by_hand():
    """stem 3x3 -> conv1 3x3 -> conv2 3x3 -> add(conv2, stem): lags 1, 1, 1, 0; depths 1, 2,
    3, 3; the add starts 3 rows after the stem's first row, conv1 1 row after: skip 2."""
    shape = (4, 8, 8)
    tensors = [Tensor(n, shape, -1) for n in ("x", "s", "a", "b", "y")]
    conv = dict(kernel=(3, 3), pads=(1, 1, 1, 1), weights=148)
    nodes = [
        Node("stem", "Conv", "conv", (0,), (1,), **conv),
        Node("conv1", "Conv", "conv", (1,), (2,), **conv),
        Node("conv2", "Conv", "conv", (2,), (3,), **conv),
        Node("add", "Add", "eltwise", (3, 1), (4,)),
    ]
    g = OpGraph.build("res", nodes, tensors, [0], [4])
    x, ei = group_features(g, node_feature_table(g), 0b1111)
    both = with_structure(x, ei)
    depth = np.exp2(both[:, GRAPH_NAMES.index("log_lag_depth")]) - 1
    skip = np.exp2(both[:, GRAPH_NAMES.index("log_skip_rows")]) - 1
    np.testing.assert_allclose(depth, [1, 2, 3, 3], atol=1e-5)
    np.testing.assert_allclose(skip, [2, 0, 0, 0], atol=1e-5)
    # a batch of two copies (the second one's labels shifted) gives each copy the same rows
    batch = with_structure(np.concatenate([x, x]), np.concatenate([ei, ei + 4], axis=1))
    np.testing.assert_array_equal(batch, np.concatenate([both, both]))
    model = model_input(x, ei, 1024)
    rel_skip = model[:, FEATURE_NAMES.index("rel_skip")]
    np.testing.assert_allclose(rel_skip, [2 * 32 / 1024, 0, 0, 0], rtol=1e-5)


# ----------------------------------------------------------------------------- dataset class
def test_dataset_class_yields_one_sample_per_group_and_buffer(dataset_dir):
    data = reader.load_dataset(dataset_dir)
    test = FusionGroupDataset(data, "brr", "test")
    parts = data.split(0)
    assert len(test) == len(parts["test"]) * len(TINY_BUFFERS_KB)
    s = test[7]
    g = int(parts["test"][7 // 5])
    n = data.node_ptr[g + 1] - data.node_ptr[g]
    assert s.x.shape == (n, NUM_FEATURES) and s.x.dtype == torch.float32
    assert s.edge_index.shape[0] == 2 and s.edge_index.dtype == torch.long
    assert int(s.group) == g and int(s.buffer_index) == 2
    assert int(s.buffer_bytes) == TINY_BUFFERS_KB[2] * 1024
    assert int(s.y) == int(data.labels["brr"]["valid"][g, 2])
    assert int(s.f_beta) == int(data.labels["brr"]["buffer"][g, 2])
    assert bool(s.y) == (int(s.f_beta) < int(s.buffer_bytes))
    buffer = FEATURE_NAMES.index("log_buffer")
    assert torch.allclose(s.x[:, buffer], torch.full((n,), float(np.log2(TINY_BUFFERS_KB[2]))))
    x, _ = data.features(g, TINY_BUFFERS_KB[2] * 1024)
    assert torch.equal(s.x, torch.from_numpy(x))
    assert test.group_mask(7) == data.group_mask(g)
    assert test.labels[7] == int(s.y)
    assert test.sample_of(g, TINY_BUFFERS_KB[2]) == 7


def test_splits_do_not_share_groups_and_unseen_is_separate(dataset_dir):
    data = reader.load_dataset(dataset_dir)
    groups = {
        k: set(FusionGroupDataset(data, "lbdf", k).groups)
        for k in ("train", "val", "test", "unseen")
    }
    assert not groups["train"] & groups["test"] and not groups["train"] & groups["val"]
    assert not groups["val"] & groups["test"]
    unseen = FusionGroupDataset(data, "lbdf", "unseen")
    assert {unseen.model_name(i) for i in range(0, len(unseen), 5)} == {"tiny_u"}
    one = FusionGroupDataset(data, "lbdf", "unseen", buffers_kb=[4])
    assert len(one) == len(unseen) // 5 and int(one[0].buffer_bytes) == 4096
    assert len(training_samples("lbdf", dataset_dir)) == len(groups["train"]) * 5


def test_pyg_loader_batches_match_the_fast_batcher(dataset_dir):
    from torch_geometric.loader import DataLoader

    data = reader.load_dataset(dataset_dir)
    test = FusionGroupDataset(data, "lbdf", "test")
    packed = tg.PackedSamples(data, "lbdf", data.split(0)["test"])
    assert len(packed) == len(test)
    batch = next(iter(DataLoader(test, batch_size=23, shuffle=False)))
    x, ei, b, y = packed.batch(np.arange(23))
    assert torch.equal(batch.x, x) and torch.equal(batch.edge_index, ei)
    assert torch.equal(batch.batch, b) and torch.equal(batch.y, y)


def test_bad_split_or_scheme(dataset_dir):
    from fusionplan.ir.errors import ConfigError

    with pytest.raises(ConfigError):
        FusionGroupDataset(dataset_dir, "lbdf", "holdout")
    with pytest.raises(ConfigError):
        FusionGroupDataset(dataset_dir, "xyz", "train")
    with pytest.raises(ConfigError, match="KB"):
        FusionGroupDataset(dataset_dir, "lbdf", buffers_kb=[3])


# ----------------------------------------------------------------------------- training
def test_training_reaches_high_accuracy_and_reports_metrics(trained):
    _, m = trained
    for split in ("test", "unseen"):
        r = m[split]
        assert r["accuracy"] >= 0.9, (split, r)
        (tn, fp), (fn, tp) = r["confusion"]
        assert tn + fp + fn + tp == r["samples"]
        assert r["accuracy"] == pytest.approx((tn + tp) / r["samples"])
        assert set(r["accuracy_per_buffer_kb"]) == {str(k) for k in TINY_BUFFERS_KB}
    assert 1 <= m["best_epoch"] <= 15 and len(m["history"]) == 15
    assert m["val"]["accuracy"] == max(h["val_accuracy"] for h in m["history"])
    assert set(m["unseen_per_model"]) == {"tiny_u"}


def test_checkpoint_roundtrip_with_weights_only(trained, dataset_dir):
    weights, m = trained
    state, entry = load_checkpoint("gin", "lbdf", weights)  # torch.load(weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    assert entry["feature_version"] == FEATURE_VERSION and entry["gin_config"]["hidden"] == 64
    assert entry["temperature"] == pytest.approx(m["temperature"]) and entry["temperature"] > 0
    assert entry["dataset"]["content_sha256"] == reader.read_manifest(dataset_dir)["content_sha256"]
    assert entry["metrics"]["test"]["accuracy"] == pytest.approx(m["test"]["accuracy"], abs=1e-5)
    manifest = json.loads((weights / "manifest.json").read_text())
    assert "gin-lbdf.pt" in manifest["checkpoints"]
    model = load_gin("lbdf", weights)
    assert isinstance(model, GINClassifier) and not model.training
    # inputs are clamped to the training range recorded with the weights
    rng = entry["feature_range"]
    assert len(rng["min"]) == len(rng["max"]) == NUM_FEATURES
    x = torch.zeros(3, NUM_FEATURES)
    x[:, 0] = 1.0
    wild = x.clone()
    wild[:, FEATURE_NAMES.index("kernel_h")] = 73.0  # far beyond any training window
    wild[:, FEATURE_NAMES.index("kind_resize")] = 1.0  # an op kind training never saw
    edges = torch.tensor([[0, 1], [1, 2]])
    clipped = model.feature_clip.clip(wild)
    assert clipped[0, FEATURE_NAMES.index("kernel_h")] == max(
        rng["max"][FEATURE_NAMES.index("kernel_h")], 0
    )
    assert clipped[0, FEATURE_NAMES.index("kind_resize")] == 0.0
    with torch.no_grad():
        assert torch.equal(model(wild, edges), model(clipped, edges))
    data = reader.load_dataset(dataset_dir)
    packed = tg.PackedSamples(data, "lbdf", data.split(0)["test"])
    again = tg.evaluate(model, packed)
    assert again["accuracy"] == pytest.approx(m["test"]["accuracy"])


def test_calibration_error_is_the_hand_counted_one():
    # confidences 0.9, 0.9, 0.8 (one wrong) in the upper of two bins, 0.6 (right) in the lower
    p_valid = np.array([0.9, 0.9, 0.2, 0.6])
    y = np.array([1, 0, 0, 1])
    upper = abs(2 / 3 - (0.9 + 0.9 + 0.8) / 3)
    assert tg.calibration_error(p_valid, y, bins=2) == pytest.approx((3 * upper + 0.4) / 4)


def test_the_fitted_temperature_lowers_the_validation_loss(trained, dataset_dir):
    weights, m = trained
    model = load_gin("lbdf", weights)
    assert float(model.temperature) == pytest.approx(m["temperature"])
    val = tg.PackedSamples(reader.load_dataset(dataset_dir), "lbdf",
                           reader.load_dataset(dataset_dir).split(0)["val"])  # fmt: skip
    y = torch.from_numpy(val.y)

    def nll(t: float) -> float:
        model.temperature.fill_(t)
        return float(torch.nn.functional.cross_entropy(tg.logits_of(model, val), y))

    fitted = m["temperature"]
    assert nll(fitted) <= min(nll(1.0), nll(fitted * 1.5), nll(fitted / 1.5)) + 1e-9


def test_active_learning_asks_where_the_gin_is_least_sure(trained, dataset_dir):
    weights, _ = trained
    gin = load_gin("lbdf", weights)
    data = reader.load_dataset(dataset_dir)
    parts = data.split(0)
    pool = tg.PackedSamples(data, "lbdf", parts["train"][:40])
    held_out = tg.PackedSamples(data, "lbdf", parts["test"])
    frozen = Adaptation(steps=0)  # nothing learnt: every round asks about the same model
    curve = adaptation_curve(gin, pool, held_out, queries=150, adaptation=frozen)
    assert [p.queries for p in curve] == [0, ROUND, 2 * ROUND, 150]
    p_valid = torch.softmax(tg.logits_of(gin, pool), 1)[:, 1].numpy()
    nearest = np.argsort(np.abs(p_valid - 0.5), kind="stable")
    asked = [i for p in curve for i in p.picked]
    assert asked == list(nearest[:150])  # least sure first, each sample once
    assert all(p.scores == curve[0].scores for p in curve)  # steps=0: the GIN never moved
    assert curve[0].scores == score_samples(gin, held_out)
    randomly = adaptation_curve(gin, pool, held_out, queries=150, pick="random",
                                adaptation=frozen)  # fmt: skip
    picks = [i for p in randomly for i in p.picked]
    assert sorted(set(picks)) == sorted(picks) and picks != asked
    learnt = adaptation_curve(gin, pool, held_out, queries=64)
    assert learnt == adaptation_curve(gin, pool, held_out, queries=64)  # deterministic
    assert learnt[1].scores != learnt[0].scores  # and it learns


def test_missing_checkpoint_names_the_training_command(tmp_path):
    with pytest.raises(CheckpointError, match=r"fusionplan train gin --scheme brr"):
        load_gin("brr", tmp_path)


def test_stale_feature_version_is_refused(trained, tmp_path):
    import shutil

    weights, _ = trained
    copy = tmp_path / "w"
    shutil.copytree(weights, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["checkpoints"]["gin-lbdf.pt"]["feature_version"] = -1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"features.*fusionplan train gin --scheme lbdf"):
        load_gin("lbdf", copy)


def test_unknown_scheme_in_dataset_is_a_config_error(dataset_dir):
    from fusionplan.ir.errors import ConfigError

    with pytest.raises(ConfigError, match="scheme"):
        tg.train_gin(dataset_dir, "nope", epochs=1, save=False)


def test_binary_metrics():
    r = tg.binary_metrics(np.array([1, 1, 0, 0, 1]), np.array([1, 0, 0, 1, 1]))
    assert r["confusion"] == [[1, 1], [1, 2]]
    assert r["accuracy"] == pytest.approx(0.6)
    assert r["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert r["f1_invalid"] == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    assert r["f1_macro"] == pytest.approx((r["f1"] + r["f1_invalid"]) / 2)


def test_untrained_model_shapes():
    model = GINClassifier()
    x = torch.randn(5, NUM_FEATURES)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    assert model(x, ei).shape == (1, 2)
