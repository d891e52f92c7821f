"""Fusion-group dataset generation: determinism, resumability, atomicity, labels, reader.

Generation runs on two ~25-op CNNs saved as ONNX files (tests/dataset_models.py) at small
buffer sizes, so that every size bin and both labels occur and a whole dataset takes well
under a second; one test spawns two worker processes.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from accel_model import Accelerator, make_cost_model
from fusionplan.data import dataset as ds
from fusionplan.data import reader, shards
from fusionplan.data.features import (
    group_features,
    model_input,
    node_feature_table,
    with_structure,
)
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import bits, is_weakly_connected
from fusionplan.ir.onnx_import import load_model
from tests.dataset_models import TINY_BUFFERS_KB, save_tiny

GROUPS, UNSEEN = 160, 60


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return (
        save_tiny(d, "tiny_a"),
        save_tiny(d, "tiny_b", seed=1, width=12, hw=24, blocks=4),
        save_tiny(d, "tiny_u", seed=2, width=6, hw=40, blocks=3),
    )


def _generate(out, models, **kw):
    a, b, u = models
    opts = dict(
        seed=3,
        groups=GROUPS,
        unseen_groups=UNSEEN,
        models=[a, b],
        unseen_models=[u],
        buffers_kb=TINY_BUFFERS_KB,
        processes=1,
    )
    opts.update(kw)
    return ds.generate_dataset(out, **opts)


@pytest.fixture(scope="module")
def generated(tmp_path_factory, models):
    out = tmp_path_factory.mktemp("data") / "set"
    return out, _generate(out, models)


def _shard_hashes(manifest):
    return {s["file"]: s["sha256"] for s in manifest["shards"]}


# ----------------------------------------------------------------------------- manifest
def test_manifest_describes_the_dataset(generated):
    out, m = generated
    assert m["format"] == shards.FORMAT_NAME and m["format_version"] == shards.FORMAT_VERSION
    assert m["complete"] is True
    assert m["buffers_kb"] == list(TINY_BUFFERS_KB) and m["schemes"] == ["lbdf", "brr"]
    assert [mi["name"] for mi in m["models"]] == ["tiny_a", "tiny_b", "tiny_u"]
    assert [mi["role"] for mi in m["models"]] == ["train", "train", "unseen"]
    counts = m["counts"]
    assert 0 < counts["train"]["groups"] <= GROUPS and 0 < counts["unseen"]["groups"] <= UNSEEN
    assert counts["train"]["samples_per_scheme"] == 5 * counts["train"]["groups"]
    assert json.loads((out / shards.MANIFEST).read_text()) == m
    for s in m["shards"]:
        assert (out / s["file"]).is_file()
        assert shards.file_sha256(out / s["file"]) == s["sha256"]
        assert s["groups"] <= s["quota"]
    # both labels occur under both schemes (the buffers were chosen for this model size)
    for scheme in ("lbdf", "brr"):
        fr = counts["train"]["valid_fraction"][scheme]
        assert min(fr.values()) < 0.6 and max(fr.values()) > 0.6


def test_progress_reports_quota_until_total(tmp_path, models):
    calls = []
    _generate(
        tmp_path / "p",
        models,
        groups=40,
        unseen_groups=0,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1]
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))


# ----------------------------------------------------------------------------- determinism
def test_same_seed_same_bytes_with_one_or_two_processes(tmp_path, models, generated):
    _, first = generated
    second = _generate(tmp_path / "two", models, processes=2)
    assert _shard_hashes(second) == _shard_hashes(first)
    assert second["content_sha256"] == first["content_sha256"]


def test_other_seed_other_groups(tmp_path, models, generated):
    _, first = generated
    other = _generate(tmp_path / "s4", models, seed=4)
    assert other["content_sha256"] != first["content_sha256"]


def test_shard_seeds_are_stable():
    assert shards.shard_seed(0, "resnet18", 3) == shards.shard_seed(0, "resnet18", 3)
    assert (
        len({shards.shard_seed(s, m, b) for s in (0, 1) for m in ("a", "b") for b in (0, 1)}) == 8
    )


def test_split_quota_is_exact_and_proportional():
    assert ds.split_quota(10, [1, 1, 1]) == [4, 3, 3]
    assert sum(ds.split_quota(10_800, [37, 64, 99, 121])) == 10_800
    assert ds.split_quota(0, [1, 2]) == [0, 0]


# ----------------------------------------------------------------------------- resume / atomic
def test_resume_rebuilds_only_the_missing_shard(tmp_path, models, generated):
    out = tmp_path / "r"
    first = _generate(out, models)
    files = [out / s["file"] for s in first["shards"]]
    mtimes = {f: f.stat().st_mtime_ns for f in files}
    victim = files[len(files) // 2]
    victim.unlink()
    again = _generate(out, models)
    assert again["shards_built"] == 1
    assert _shard_hashes(again) == _shard_hashes(first)
    for f in files:
        if f != victim:
            assert f.stat().st_mtime_ns == mtimes[f]
    # a complete dataset is not rebuilt at all
    assert _generate(out, models)["shards_built"] == 0


def test_interrupted_run_leaves_no_partial_file_and_resumes(tmp_path, models, monkeypatch):
    out = tmp_path / "i"
    real = ds.save_shard
    written = []

    def torn(tmp):
        tmp.write_bytes(b"PK\x03\x04 truncated")
        raise KeyboardInterrupt

    def flaky(path, data):
        if len(written) == 3:  # the fourth shard dies half-way through its write
            ds.write_atomic(path, torn)
        written.append(path)
        real(path, data)

    monkeypatch.setattr(ds, "save_shard", flaky)  # the driver saves every shard through it
    with pytest.raises(KeyboardInterrupt):
        _generate(out, models)
    leftovers = sorted(p.name for p in (out / shards.SHARD_DIR).iterdir())
    assert len(leftovers) == 3 and not any(n.startswith(".") for n in leftovers)
    partial = json.loads((out / shards.MANIFEST).read_text())
    assert partial["complete"] is False and len(partial["shards"]) == 3
    with pytest.raises(shards.DatasetError, match="incomplete"):
        reader.load_dataset(out)

    monkeypatch.setattr(ds, "save_shard", real)
    done = _generate(out, models)
    assert done["complete"] and done["shards_built"] == len(done["shards"]) - 3


def test_a_finished_shard_missing_from_the_manifest_is_kept(tmp_path, models):
    """A run killed between writing a shard and recording it keeps that shard."""
    out = tmp_path / "k"
    first = _generate(out, models)
    manifest = json.loads((out / shards.MANIFEST).read_text())
    manifest["shards"] = manifest["shards"][:2]
    manifest["complete"] = False
    (out / shards.MANIFEST).write_text(json.dumps(manifest))
    mtimes = {s["file"]: (out / s["file"]).stat().st_mtime_ns for s in first["shards"]}
    again = _generate(out, models)
    assert again["shards_built"] == 0 and _shard_hashes(again) == _shard_hashes(first)
    assert {f: (out / f).stat().st_mtime_ns for f in mtimes} == mtimes


def test_a_shard_with_another_spec_is_rebuilt(tmp_path, models):
    out = tmp_path / "spec"
    first = _generate(out, models)
    s0 = out / first["shards"][0]["file"]
    s1 = out / first["shards"][1]["file"]
    s0.write_bytes(s1.read_bytes())  # right format, wrong shard
    again = _generate(out, models)
    assert again["shards_built"] == 1 and _shard_hashes(again) == _shard_hashes(first)


def test_other_parameters_need_overwrite(tmp_path, models):
    out = tmp_path / "o"
    _generate(out, models)
    with pytest.raises(ConfigError, match="overwrite"):
        _generate(out, models, seed=9)
    replaced = _generate(out, models, seed=9, overwrite=True)
    assert replaced["seed"] == 9 and reader.load_dataset(out).manifest["seed"] == 9


def test_bad_arguments_are_config_errors(tmp_path, models):
    with pytest.raises(ConfigError):
        _generate(tmp_path / "x", models, processes=0)
    with pytest.raises(ConfigError):
        _generate(tmp_path / "x", models, seed=-1)
    with pytest.raises(ConfigError, match="both"):
        _generate(tmp_path / "x", models, unseen_models=[models[0]])
    with pytest.raises(ConfigError, match="scheme"):
        _generate(tmp_path / "x", models, schemes=["nope"])


# ----------------------------------------------------------------------------- content
def test_every_stored_group_agrees_with_the_cost_model(generated, models):
    out, _ = generated
    data = reader.load_dataset(out)
    graphs = {Path(p).stem: load_model(p, name=Path(p).stem) for p in models}
    seen = set()
    for name, graph in graphs.items():
        table = node_feature_table(graph)
        cms = {
            (s, kb): make_cost_model(graph, Accelerator(kb * 1024, s))
            for s in ("lbdf", "brr")
            for kb in TINY_BUFFERS_KB
        }
        mine = np.flatnonzero(data.model_index == data.models.index(name))
        assert len(mine) > 0
        for i in mine:
            g = data.group_mask(i)
            assert (name, g) not in seen
            seen.add((name, g))
            assert 1 <= g.bit_count() <= 256 and is_weakly_connected(graph, g)
            x, ei = group_features(graph, table, g)
            sx, sei = data.group_arrays(i)
            np.testing.assert_array_equal(sx, with_structure(x, ei))
            np.testing.assert_array_equal(sei, ei)
            a, b = data.node_ptr[i], data.node_ptr[i + 1]
            assert list(data.node_id[a:b]) == bits(g)
            for bi, kb in enumerate(TINY_BUFFERS_KB):
                fx, _ = data.features(i, kb * 1024)
                np.testing.assert_array_equal(fx, model_input(x, ei, kb * 1024))
                for s in ("lbdf", "brr"):
                    c = cms[(s, kb)].cost(g)
                    lab = data.labels[s]
                    assert lab["buffer"][i, bi] == c.buffer
                    assert lab["dram"][i, bi] == c.dram
                    assert bool(lab["valid"][i, bi]) == c.valid
    assert len(seen) == len(data)


def test_groups_fall_in_their_size_bins_and_are_sorted(generated):
    out, m = generated
    for s in m["shards"]:
        arrays = shards.read_npz(out / s["file"])
        masks = [int(h, 16) for h in arrays["mask"]]
        assert masks == sorted(masks) and len(set(masks)) == len(masks)
        lo, hi = s["size_range"]
        assert all(lo <= g.bit_count() <= hi for g in masks)
        assert arrays["meta"].shape == ()
        meta = json.loads(str(arrays["meta"][()]))
        assert meta["spec"] == s["spec"] == shards.read_shard_spec(out / s["file"])


def test_shards_are_plain_npy_members_without_pickles(generated):
    out, m = generated
    path = out / m["shards"][0]["file"]
    with zipfile.ZipFile(path) as zf:
        assert all(i.filename.endswith(".npy") for i in zf.infolist())
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    arrays = shards.read_npz(path)
    assert all(a.dtype != object for a in arrays.values())


def test_object_arrays_are_refused(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickle"):
        shards.read_npz(bad)
    assert shards.read_shard_spec(bad) is None


# ----------------------------------------------------------------------------- reader
def test_split_is_by_group_deterministic_and_80_10_10(generated):
    out, _ = generated
    data = reader.load_dataset(out)
    parts = data.split(0)
    train_groups = data.indices("train")
    joined = np.concatenate([parts["train"], parts["val"], parts["test"]])
    assert sorted(joined) == sorted(train_groups) and len(set(joined)) == len(joined)
    n = len(train_groups)
    assert len(parts["train"]) == int(0.8 * n) and len(parts["val"]) == int(0.1 * n)
    assert set(parts["unseen"]) == set(data.indices("unseen"))
    assert all(data.roles[data.model_index[i]] == "unseen" for i in parts["unseen"])
    again = data.split(0)
    assert all(np.array_equal(parts[k], again[k]) for k in parts)
    assert not np.array_equal(parts["test"], data.split(1)["test"])


def test_a_training_model_can_be_held_out_at_split_time(generated):
    out, _ = generated
    data = reader.load_dataset(out)
    parts = data.split(0, hold_out=["tiny_b"])
    b = data.models.index("tiny_b")
    trained = np.concatenate([parts["train"], parts["val"], parts["test"]])
    assert len(trained) and not np.any(data.model_index[trained] == b)
    assert set(parts["unseen"]) == set(data.indices("unseen")) | set(
        np.flatnonzero(data.model_index == b)
    )
    assert len(trained) + len(parts["unseen"]) == len(data)
    for name in ("nope", "tiny_u"):  # not a model; already unseen
        with pytest.raises(shards.DatasetError, match=f"cannot hold out {name}: not a training"):
            data.split(0, hold_out=[name])
    assert all(np.array_equal(parts[k], data.split(0, hold_out="tiny_b")[k]) for k in parts)


def test_reader_rejects_corrupt_missing_and_foreign_datasets(tmp_path, generated):
    import shutil

    out, m = generated
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    victim = copy / m["shards"][0]["file"]
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(shards.DatasetError, match="sha256"):
        reader.load_dataset(copy)
    victim.unlink()
    with pytest.raises(shards.DatasetError, match="missing"):
        reader.load_dataset(copy)
    with pytest.raises(shards.DatasetError, match="no dataset"):
        reader.load_dataset(tmp_path / "nothing")
    manifest = json.loads((out / shards.MANIFEST).read_text())
    manifest["format_version"] = shards.FORMAT_VERSION + 1
    (copy / shards.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(shards.DatasetError, match=r"format version.*fusionplan dataset generate"):
        reader.load_dataset(copy)


def test_planning_does_not_load_dataset_generation():
    code = (
        "import sys, fusionplan.data.zoo\n"
        "print('fusionplan.data.dataset' in sys.modules, 'fusionplan.data.reader' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]
    assert os.environ.get("FUSIONPLAN_CACHE_DIR")  # tests never touch the user's cache


def test_a_synthetic_graph_is_a_dataset_model_built_where_it_is_sampled():
    """``nasnet-c3`` (fusionplan.data.synthetic) names a model of the dataset, train eval
    and explain-eval: no file, the same graph in every worker."""
    from fusionplan.data.dataset import _model_ref
    from fusionplan.data.sampling import _load_graph
    from fusionplan.data.shards import graph_fingerprint
    from fusionplan.data.synthetic import SYNTHETIC
    from fusionplan.ir.onnx_import import graph_from_proto

    name, source, cache = _model_ref("nasnet-c3")
    assert (name, source, cache) == ("nasnet-c3", "synthetic:nasnet-c3", "")
    built = graph_from_proto(SYNTHETIC["nasnet-c3"](), name="nasnet-c3")
    assert graph_fingerprint(_load_graph(source, name)) == graph_fingerprint(built)


@pytest.mark.parametrize(("args", "message"), [
    (["--buffers", "lots"], "lots"),
    (["--models", "no_such_net"], "no_such_net"),
])  # fmt: skip
def test_dataset_generate_names_a_bad_model_or_buffer(tmp_path, args, message):
    from click.testing import CliRunner

    from fusionplan.app.cli import cli
    from fusionplan.ir.errors import FusionPlanError

    result = CliRunner().invoke(cli, ["dataset", "generate", "-o", str(tmp_path / "d"), *args])
    assert isinstance(result.exception, FusionPlanError) and message in str(result.exception)
    assert not (tmp_path / "d" / "manifest.json").exists()


def test_the_default_families_name_real_models_and_hold_none_out_twice():
    from fusionplan.data.synthetic import SYNTHETIC
    from fusionplan.data.zoo import zoo_entry

    train, unseen = ds.TRAIN_MODELS, ds.UNSEEN_MODELS
    assert train == tuple(m for ms in ds.TRAINING_FAMILIES.values() for m in ms)
    assert len(set(train)) == len(train) and not set(train) & set(unseen)
    for name in (*train, *unseen):
        assert name in SYNTHETIC or zoo_entry(name) is not None, name
    assert ds.BUFFERS_KB[0] == 64 and ds.BUFFERS_KB[-1] == 2048
