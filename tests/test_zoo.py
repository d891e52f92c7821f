"""Model zoo: registry, name resolution, atomic cached export, and imported graph structure.

Every test runs against a throw-away ``FUSIONPLAN_CACHE_DIR`` (one per module, so the few
real exports are shared between tests); nothing touches the user's cache.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fusionplan.data import zoo
from fusionplan.ir.errors import ModelError
from fusionplan.ir.onnx_import import load_model

REPO = Path(__file__).resolve().parents[1]
PAPER_MODELS = {
    "vgg16": 224,
    "squeezenet": 224,
    "mobilenet_v2": 224,
    "mobilenet_v3_small": 224,
    "mobilenet_v3_large": 224,
    "resnet18": 224,
    "resnet50": 224,
    "resnet101": 224,
    "resnet152": 224,
    "efficientnet_b0": 224,
    "efficientnet_b3": 300,
    "deeplabv3_mobilenet_v3_large": 513,
}
VIEW_AND_BN_OPS = {"BatchNormalization", "Identity", "Flatten", "Dropout", "Reshape"}


@pytest.fixture(scope="module", autouse=True)
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A module-wide temporary cache, so real exports happen once per test run."""
    patch = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("fusionplan-cache")
    patch.setenv(zoo.CACHE_ENV, str(root))
    yield root
    patch.undo()


def _no_export(*args, **kwargs):
    raise AssertionError("the cache should have been hit; nothing may be exported")


def _assert_topological(graph) -> None:
    assert graph.edges
    assert all(e.src < e.dst for e in graph.edges)
    assert all(graph.tensors[e.tensor].producer == e.src for e in graph.edges)


# ----------------------------------------------------------------------------- registry
def test_registry_has_the_papers_networks_and_input_sizes():
    assert set(zoo.zoo_names()) == set(PAPER_MODELS)
    for name, size in PAPER_MODELS.items():
        entry = zoo.zoo_entry(name)
        assert entry.name == name
        assert entry.input_shape == (1, 3, size, size)
        assert entry.input_size == f"{size}x{size}"
        assert entry.description and "\n" not in entry.description
        assert callable(entry.constructor)


def test_unseen_models_are_held_out_of_training():
    assert set(zoo.UNSEEN_MODELS) == {"resnet50", "resnet152", "deeplabv3_mobilenet_v3_large"}
    assert zoo.zoo_names("unseen") == zoo.UNSEEN_MODELS
    assert zoo.zoo_names("train") == zoo.TRAIN_MODELS
    assert set(zoo.TRAIN_MODELS) | set(zoo.UNSEEN_MODELS) == set(zoo.zoo_names())
    assert not set(zoo.TRAIN_MODELS) & set(zoo.UNSEEN_MODELS)
    with pytest.raises(ValueError):
        zoo.zoo_names("test")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("ResNet18", "resnet18"),
        ("VGG16", "vgg16"),
        ("deeplabv3", "deeplabv3_mobilenet_v3_large"),
        ("DeepLabV3", "deeplabv3_mobilenet_v3_large"),
        ("squeezenet1_0", "squeezenet"),
        ("mobilenet-v3-small", "mobilenet_v3_small"),
        ("EfficientNet-B3", "efficientnet_b3"),
        (" resnet50 ", "resnet50"),
    ],
)
def test_names_are_case_insensitive_with_aliases(spec, canonical):
    assert zoo.zoo_entry(spec).name == canonical


def test_unknown_name_lists_close_matches_and_the_zoo():
    with pytest.raises(ModelError) as info:
        zoo.zoo_entry("resnet19")
    message = str(info.value)
    assert message.startswith("unknown model 'resnet19': not a zoo model; did you mean resnet18")
    assert "vgg16, squeezenet, mobilenet_v2" in message
    assert f"{len(zoo.torchvision_models())} more torchvision models" in message
    assert "\n" not in message
    with pytest.raises(ModelError, match="did you mean convnext_tiny"):  # a torchvision name
        zoo.zoo_entry("convnxt-tiny")


def test_resolve_model_unknown_spec_message():
    with pytest.raises(ModelError) as info:
        zoo.resolve_model("foo")
    assert str(info.value) == (
        "unknown model 'foo': not a file, a zoo model or a synthetic graph (zoo: "
        + ", ".join(PAPER_MODELS)
        + f"; and {len(zoo.torchvision_models())} more torchvision models by name, "
        "see 'fusionplan zoo list --all'; synthetic graphs such as randwire-n32-s0, nasnet-c3)"
    )
    with pytest.raises(ModelError, match="did you mean randwire-n32-s2, randwire-n32-s1"):
        zoo.resolve_model("randwire-n32-s9")


def test_a_synthetic_graph_plans_by_name_from_one_cached_file(tmp_path, monkeypatch):
    """``fusionplan plan nasnet-c3`` works as ``bench`` and ``dataset`` do: the graph is
    written to the cache once, under a hash of its bytes, and read from there."""
    monkeypatch.setenv("FUSIONPLAN_CACHE_DIR", str(tmp_path))
    path = zoo.model_source("nasnet-c3")
    assert path.parent.name == "synthetic" and path.name.startswith("nasnet-c3-")
    stamp = path.stat().st_mtime_ns
    graph = zoo.resolve_model("nasnet-c3")
    assert graph.name == "nasnet-c3" and len(graph) == 75
    assert zoo.model_source("nasnet-c3") == path and path.stat().st_mtime_ns == stamp


def test_export_unknown_name_raises_and_writes_nothing(tmp_path):
    with pytest.raises(ModelError, match="unknown model 'resnet19'"):
        zoo.export_model("resnet19", tmp_path / "out.onnx")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- cache
def test_cache_dir_and_file_name(cache, monkeypatch):
    assert zoo.cache_dir() == cache / "zoo"
    name = zoo.cache_file_name("RESNET18")
    assert re.fullmatch(r"resnet18-224x224-torch\d+\.\d+[\w.]*-tv\d+\.\d+[\w.]*-v\d+\.onnx", name)
    assert "+" not in name
    assert zoo.cache_file_name("deeplabv3").startswith("deeplabv3_mobilenet_v3_large-513x513-")
    monkeypatch.delenv(zoo.CACHE_ENV)
    assert zoo.cache_dir().name == "zoo"
    assert zoo.cache_dir() != cache / "zoo"


def test_import_is_light():
    """``import fusionplan.data.zoo`` and ``list_zoo()`` must not pull in torch (CLI start-up
    time)."""
    code = "import sys, fusionplan.data.zoo as z; z.list_zoo(); print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_cache_hit_does_not_re_export(monkeypatch):
    path = zoo.zoo_path("resnet18")
    assert path.parent == zoo.cache_dir() and path.is_file()
    assert zoo.data_path(path).is_file()
    mtime = path.stat().st_mtime_ns
    monkeypatch.setattr(zoo, "export_model", _no_export)
    monkeypatch.setattr(zoo, "_export_proto", _no_export)
    assert zoo.zoo_path("ResNet18") == path
    assert zoo.load_zoo_model("resnet18").name == "resnet18"
    assert path.stat().st_mtime_ns == mtime


def test_missing_weights_file_triggers_re_export(monkeypatch):
    path = zoo.zoo_path("resnet18")
    calls = []
    monkeypatch.setattr(zoo, "export_model", lambda name, p: calls.append((name, p)))
    data = zoo.data_path(path)
    saved = data.read_bytes()
    data.unlink()
    try:
        assert not zoo.is_cached("resnet18")
        zoo.zoo_path("resnet18")
        assert calls == [("resnet18", path)]
    finally:
        data.write_bytes(saved)


def test_list_zoo_rows():
    rows = zoo.list_zoo()
    assert [r.name for r in rows] == list(PAPER_MODELS)
    by_name = {r.name: r for r in rows}
    assert by_name["efficientnet_b3"].input_size == "300x300"
    assert by_name["resnet152"].role == "unseen"
    assert by_name["vgg16"].role == "train"
    zoo.zoo_path("resnet18")
    assert {r.name: r.cached for r in zoo.list_zoo()}["resnet18"] is True


# ----------------------------------------------------------------------------- export
def test_resnet18_graph_structure():
    graph = zoo.load_zoo_model("resnet18")
    ops = Counter(n.op_type for n in graph.nodes)
    kinds = Counter(n.kind for n in graph.nodes)
    assert ops["Conv"] == 20  # BatchNormalization folded away
    assert ops["Add"] == 8
    assert kinds["matmul"] == 1
    assert ops["Relu"] == 17
    assert not VIEW_AND_BN_OPS & set(ops)
    assert kinds["other"] == 0
    _assert_topological(graph)
    assert [graph.tensors[t].shape for t in graph.inputs] == [(3, 224, 224)]
    assert [graph.tensors[t].shape for t in graph.outputs] == [(1000, 1, 1)]
    assert sum(n.macs for n in graph.nodes if n.kind in ("conv", "matmul")) == pytest.approx(
        1.814e9, rel=0.01
    )


def test_mobilenet_v3_small_graph_structure():
    graph = zoo.load_zoo_model("mobilenet_v3_small")
    ops = Counter(n.op_type for n in graph.nodes)
    kinds = Counter(n.kind for n in graph.nodes)
    assert ops["Conv"] == 52
    assert kinds["matmul"] == 2
    assert ops["GlobalAveragePool"] == 10  # 9 squeeze-excite blocks + the classifier pool
    assert ops["HardSigmoid"] == ops["Mul"] == 9  # squeeze-excite gates
    assert ops["HardSwish"] > 0
    assert not VIEW_AND_BN_OPS & set(ops)
    assert kinds["other"] == 0
    _assert_topological(graph)
    depthwise = [n for n in graph.nodes if n.kind == "conv" and n.groups > 1]
    assert depthwise and all(
        n.groups == graph.out_shape(i)[0] for i, n in _indexed(graph, depthwise)
    )


def _indexed(graph, nodes):
    return [(graph.node_index[n.name], n) for n in nodes]


def test_deeplabv3_exports_only_the_segmentation_map():
    graph = zoo.load_zoo_model("deeplabv3")
    assert graph.name == "deeplabv3_mobilenet_v3_large"
    assert [graph.tensors[t].shape for t in graph.inputs] == [(3, 513, 513)]
    assert [graph.tensors[t].shape for t in graph.outputs] == [(21, 513, 513)]
    kinds = Counter(n.kind for n in graph.nodes)
    assert kinds["resize"] == 2 and kinds["concat"] == 1 and kinds["other"] == 0
    _assert_topological(graph)


def test_export_is_deterministic(tmp_path):
    a = zoo.export_model("squeezenet", tmp_path / "a" / "m.onnx")
    b = zoo.export_model("squeezenet", tmp_path / "b" / "m.onnx")
    assert a.read_bytes() == b.read_bytes()
    assert zoo.data_path(a).read_bytes() == zoo.data_path(b).read_bytes()
    assert sorted(p.name for p in a.parent.iterdir()) == ["m.onnx", "m.onnx.data"]


def test_exported_model_runs_with_its_external_weights(tmp_path):
    """The .onnx/.data pair is a real ONNX model, not just something our importer reads."""
    ort = pytest.importorskip("onnxruntime")
    import numpy as np
    import torch

    path = zoo.export_model("squeezenet", tmp_path / "sq.onnx")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    (got,) = ort.InferenceSession(str(path)).run(["output"], {"input": x})
    torch.manual_seed(0)
    model = zoo.zoo_entry("squeezenet").constructor().eval()
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_export_without_external_data(tmp_path):
    path = zoo.export_model("squeezenet", tmp_path / "sq.onnx", external_data=False)
    assert [p.name for p in tmp_path.iterdir()] == ["sq.onnx"]
    assert path.stat().st_size > 4_000_000  # the weights are inside
    assert Counter(n.kind for n in load_model(path).nodes)["concat"] == 8


def test_failed_export_leaves_no_file(tmp_path, monkeypatch):
    def broken(entry):
        raise RuntimeError("exporter crashed")

    monkeypatch.setattr(zoo, "_export_proto", broken)
    target = tmp_path / "m.onnx"
    with pytest.raises(RuntimeError, match="exporter crashed"):
        zoo.export_model("resnet18", target)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    """A crash halfway through writing weights leaves neither graph, weights nor temp files."""
    import onnx

    def half_written(proto, path, **kwargs):
        Path(path).write_bytes(b"partial")
        Path(path).with_name(kwargs["location"]).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(onnx, "save_model", half_written)
    target = tmp_path / "m.onnx"
    with pytest.raises(OSError, match="disk full"):
        zoo.export_model("squeezenet", target)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- resolve
def test_resolve_model_paths_and_names(tmp_path):
    path = zoo.zoo_path("resnet18")
    by_path = zoo.resolve_model(str(path))
    assert by_path.name == path.stem
    assert zoo.resolve_model(path).name == path.stem
    by_name = zoo.resolve_model("ResNet18")
    assert by_name.name == "resnet18"
    assert len(by_name) == len(by_path)
    with pytest.raises(ModelError, match="model file not found"):
        zoo.resolve_model(str(tmp_path / "resnet18.onnx"))
    with pytest.raises(ModelError, match="model file not found"):
        zoo.resolve_model("no_such_model.ONNX")


def test_resolve_model_prefers_an_existing_file(tmp_path, monkeypatch):
    local = tmp_path / "resnet18"
    local.write_bytes(zoo.zoo_path("squeezenet").read_bytes())
    # The graph refers to its weights by file name; put them beside the copy.
    (tmp_path / zoo.data_path(zoo.zoo_path("squeezenet")).name).write_bytes(
        zoo.data_path(zoo.zoo_path("squeezenet")).read_bytes()
    )
    monkeypatch.chdir(tmp_path)
    assert Counter(n.kind for n in zoo.resolve_model("resnet18").nodes)["concat"] == 8


# ----------------------------------------------------------------------------- torchvision
def test_every_torchvision_model_is_known_by_name():
    """Paper names (and aliases such as squeezenet1_0) stay with the paper entries."""
    import torchvision.models

    listed = {
        *torchvision.models.list_models(module=torchvision.models),
        *torchvision.models.list_models(module=torchvision.models.segmentation),
    }
    others = zoo.torchvision_models()
    assert {zoo.zoo_entry(n).name for n in listed} == set(others) | set(PAPER_MODELS)
    assert set(others) == listed - {*PAPER_MODELS, "squeezenet1_0"}
    assert "squeezenet1_0" not in others and "squeezenet1_1" in others
    assert zoo.zoo_entry("squeezenet1_0").name == "squeezenet"
    assert zoo.zoo_entry("deeplabv3_mobilenet_v3_large").input_shape == (1, 3, 513, 513)


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("resnet18", 224),
        ("inception_v3", 299),
        ("efficientnet_b4", 380),
        ("efficientnet_v2_s", 384),
        ("swin_v2_t", 256),
        ("vit_h_14", 518),
        ("fcn_resnet50", 520),
        ("deeplabv3_mobilenet_v3_large", 520),  # torchvision's; the paper entry keeps 513
    ],
)
def test_default_input_size_is_torchvisions_documented_one(name, size):
    assert zoo.default_input_size(name) == size
    if name not in PAPER_MODELS:
        assert zoo.zoo_entry(name).input_shape == (1, 3, size, size)


def test_undocumented_input_size_falls_back_per_task():
    assert zoo._documented_size(None, "classification") == 224
    assert zoo._documented_size(None, "segmentation") == 520


def test_torchvision_model_resolves_exports_once_is_cached_and_plans(monkeypatch):
    from fusionplan.app import api

    exports = []
    original = zoo._export_proto
    monkeypatch.setattr(zoo, "_export_proto", lambda e: exports.append(e.name) or original(e))
    assert not zoo.is_cached("mnasnet0_5")
    graph = zoo.resolve_model("MNASNet0_5")
    assert graph.name == "mnasnet0_5"
    assert [graph.tensors[t].shape for t in graph.inputs] == [(3, 224, 224)]
    assert [graph.tensors[t].shape for t in graph.outputs] == [(1000, 1, 1)]
    path = zoo.cache_dir() / zoo.cache_file_name("mnasnet0_5")
    assert path.name.startswith("mnasnet0_5-224x224-torch") and zoo.is_cached("mnasnet0_5")
    assert zoo.resolve_model("mnasnet0_5").name == "mnasnet0_5"  # the cache, not an export
    assert exports == ["mnasnet0_5"]
    plan = api.plan("mnasnet0_5", "128KB", "lbdf", budget=30)
    assert plan.metrics.dram_mb > 0 and exports == ["mnasnet0_5"]
    assert {r.name: r.cached for r in zoo.list_torchvision()}["mnasnet0_5"] is True


def test_segmentation_model_exports_only_the_map():
    graph = zoo.load_zoo_model("lraspp_mobilenet_v3_large")
    assert [graph.tensors[t].shape for t in graph.inputs] == [(3, 520, 520)]
    assert [graph.tensors[t].shape for t in graph.outputs] == [(21, 520, 520)]


def test_builders_drop_training_heads_and_size_vit_embeddings():
    import torch

    torch.manual_seed(0)
    assert zoo.zoo_entry("googlenet").constructor().aux1 is None
    assert zoo.zoo_entry("inception_v3").constructor().AuxLogits is None
    vit = zoo.TorchvisionModel("vit_b_32", "classification", 384, None)
    assert zoo._torchvision_builder(vit)().image_size == 384


def test_attention_exports_without_the_inference_fast_path():
    """nn.MultiheadAttention's fast path (eval, no grad) is an op the exporter lacks."""
    import torch

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patches = torch.nn.Conv2d(3, 8, 4, stride=4)
            self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            tokens = self.patches(x).flatten(2).transpose(1, 2)
            return self.attention(tokens, tokens, tokens, need_weights=False)[0]

    entry = zoo.ZooEntry("attention", Attention, (1, 3, 16, 16), "one attention layer")
    ops = {n.op_type for n in zoo._export_proto(entry).graph.node}
    assert {"MatMul", "Softmax"} <= ops
    assert torch.backends.mha.get_fastpath_enabled()  # restored


def test_models_over_the_protobuf_limit_are_refused_before_building(tmp_path):
    with pytest.raises(ModelError, match=r"vit_h_14 has 633M parameters .* 2 GiB protobuf"):
        zoo.export_model("vit_h_14", tmp_path / "vit.onnx")
    assert list(tmp_path.iterdir()) == []


def test_names_resolve_without_torch_once_indexed(cache):
    zoo.torchvision_models()  # builds this cache's index
    code = (
        "import sys, fusionplan.data.zoo as z; z.zoo_entry('convnext_tiny');"
        " z.cache_file_name('fcn_resnet50');"
        " print(len(z.torchvision_models()), 'torch' in sys.modules)"
    )
    env = {**os.environ, zoo.CACHE_ENV: str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [str(len(zoo.torchvision_models())), "False"]


@pytest.mark.slow
def test_concurrent_exports_do_not_corrupt_the_cache(tmp_path):
    """Two processes racing to fill an empty cache both succeed and leave one valid model."""
    env = {**os.environ, zoo.CACHE_ENV: str(tmp_path)}
    code = "import fusionplan.data.zoo as z; print(len(z.load_zoo_model('squeezenet')))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outputs == ["64", "64"]
    files = sorted(p.name for p in (tmp_path / "zoo").iterdir())
    name = zoo.cache_file_name("squeezenet")
    assert files == [name, name + ".data"]


@pytest.mark.bench
@pytest.mark.parametrize("name", list(PAPER_MODELS))
def test_every_zoo_model_imports(name):
    """All twelve networks (about 30 s in total): run with ``pytest -m bench``."""
    graph = zoo.load_zoo_model(name)
    size = PAPER_MODELS[name]
    assert [graph.tensors[t].shape for t in graph.inputs] == [(3, size, size)]
    assert Counter(n.kind for n in graph.nodes)["other"] == 0
    assert not VIEW_AND_BN_OPS & {n.op_type for n in graph.nodes}
    _assert_topological(graph)
