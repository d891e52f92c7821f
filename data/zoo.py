"""The model zoo: the paper's twelve networks, and every other torchvision classification
and semantic-segmentation model by name, built from torchvision and cached as ONNX.

The twelve paper networks have fixed entries (:data:`ZOO`; their names and aliases win).
Any other name in ``torchvision.models.list_models(module=torchvision.models)`` or
``list_models(module=torchvision.models.segmentation)`` is a *torchvision model*
(:func:`torchvision_models`), exported and cached exactly like the paper's at a square input
of its documented size (:func:`default_input_size`): the ``crop_size`` of its ``DEFAULT``
weights' transforms for classification (224 for most; 299 Inception-V3, 240-600 EfficientNet
B1-B7 and V2, 256 Swin-V2, 384 RegNet-Y-128GF, 518 ViT-H/14), the ``resize_size`` (520) for
segmentation, whose transforms resize without cropping; where torchvision documents neither,
224 for classification and 520 for segmentation. Only the ``'out'`` map of a segmentation
model is exported (no auxiliary head, backbone not pre-trained); GoogLeNet and Inception-V3
are built without their training-only auxiliary classifiers, and a ViT's position embedding
is built for its input size. Which models exist, their sizes and parameter counts are read
from torchvision once per torchvision version and kept in a small JSON index in the cache, so
that resolving a name does not import torch. Models with more than 2 GiB of float32 weights
(ViT-H/14, RegNet-Y-128GF) are refused before anything is built: the in-memory export below
cannot serialise them (protobuf's 2 GiB limit).

Every network is built with ``weights=None`` (no download; the planner only needs shapes),
seeded with ``torch.manual_seed(0)`` so that exports are byte-for-byte reproducible, and
exported with the TorchScript exporter (``dynamo=False``: fast, no onnxscript) at a fixed
static input shape.

Weights are written as ONNX *external data* (``<file>.onnx.data`` beside ``<file>.onnx``).
Measured on the 2-core development machine (export + import, seconds), external data wins
wherever it matters: VGG16 8.0 vs 13.5, ResNet-152 3.7 vs 5.4, ResNet-50 1.1 vs 1.9. The
importer opens models with ``load_external_data=False``, so it checks and shape-infers a
10-100 kB graph instead of a protobuf holding every weight (VGG16 import: 0.01 s instead of
5.6 s), while writing the weights separately costs 1-2 s for VGG16. For the small networks
(< 25 MB of weights) the two are within 0.2 s of each other, so one format is used for
all. The pair of files is a normal ONNX model: onnxruntime runs it as long as the ``.data``
file stays beside the ``.onnx`` file under its original name.

Cache files are keyed by model name, input size, torch and torchvision versions and
:data:`ZOO_FORMAT_VERSION`, and are published with atomic renames (data file first, then the
graph), so concurrent processes never see a half-written or weightless model.

``torch``/``torchvision`` are imported inside functions: ``import fusionplan.data.zoo``,
``list_zoo()`` and, once the index exists, resolving any name stay fast.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import io
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import onnx
import platformdirs

from fusionplan.data.optimus_nets import NETWORKS as OPTIMUS_NETWORKS
from fusionplan.data.optimus_nets import build_module
from fusionplan.data.synthetic import SYNTHETIC
from fusionplan.ir.errors import ModelError
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.ir.onnx_import import load_model

if TYPE_CHECKING:
    from fusionplan.ir.graph import OpGraph

ZOO_FORMAT_VERSION = 1
"""Bump when the export recipe changes (opset, wrapping, external data) to invalidate caches."""

OPSET_VERSION = 17
CACHE_ENV = "FUSIONPLAN_CACHE_DIR"
"""Overrides the fusionplan cache root; the zoo lives in ``$FUSIONPLAN_CACHE_DIR/zoo``."""

Role = Literal["train", "unseen"]
Task = Literal["classification", "segmentation"]

FALLBACK_SIZE: dict[str, int] = {"classification": 224, "segmentation": 520}
"""Input size where torchvision documents none for a model (see the module docstring)."""
MAX_WEIGHT_BYTES = 2**31
"""Protobuf's limit on one serialised ONNX model: larger float32 weights cannot be exported."""


@dataclass(frozen=True)
class ZooEntry:
    """One network: how to build it, at which input shape, and its role in the dataset.

    ``role`` is ``"unseen"`` for the networks held out of GNN training (the paper's test
    models, and every torchvision model beyond the paper's) so that dataset generation and
    evaluation can never mix them up.
    """

    name: str
    constructor: Callable[[], Any]  # () -> torch.nn.Module, untrained, not yet in eval mode
    input_shape: tuple[int, int, int, int]  # (1, 3, H, W)
    description: str
    role: Role = "train"
    aliases: tuple[str, ...] = ()

    @property
    def input_size(self) -> str:
        """``"HxW"``, as used in cache file names and tables."""
        return f"{self.input_shape[2]}x{self.input_shape[3]}"


@dataclass(frozen=True)
class ZooRow:
    """One row of ``fusionplan zoo list``; ``dataclasses.asdict`` gives its JSON form."""

    name: str
    input_size: str
    description: str
    role: Role
    cached: bool


@dataclass(frozen=True)
class TorchvisionModel:
    """A torchvision classification or segmentation model, as the zoo's index records it."""

    name: str
    task: Task
    size: int  # square input side, see default_input_size
    params: int | None  # parameter count documented by its weights, None if undocumented


# ----------------------------------------------------------------------------- builders
def _torchvision(fn_name: str) -> Callable[[], Any]:
    """A constructor for ``torchvision.models.<fn_name>(weights=None)``, importing lazily."""

    def build() -> Any:
        # torchvision loads only when a model is built
        import torchvision.models

        return getattr(torchvision.models, fn_name)(weights=None)

    build.__name__ = build.__qualname__ = f"build_{fn_name}"
    return build


def _out_only(inner: Any) -> Any:
    """``inner`` (a torchvision segmentation model) returning only its ``'out'`` tensor.

    torchvision's segmentation models return a dict; the exporter flattens that into
    several outputs, but the planner (and the paper) needs the single segmentation map.
    """
    # torch loads only when a model is built
    import torch

    class OutOnly(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)["out"]

    return OutOnly(inner)


def _deeplabv3_mobilenet_v3_large() -> Any:
    """DeepLabV3 with a MobileNetV3-Large backbone, returning only the ``'out'`` tensor.

    ``aux_loss=False`` keeps the auxiliary FCN head out of the graph.
    """
    # torchvision loads only when a model is built
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

    inner = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, aux_loss=False)
    return _out_only(inner)


_BUILD_OPTIONS: dict[str, dict[str, Any]] = {
    # the auxiliary classifiers only run in training; init_weights=True is what None means,
    # without the FutureWarning
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}


def _torchvision_builder(model: TorchvisionModel) -> Callable[[], Any]:
    """A constructor for torchvision model ``model`` (untrained, ``'out'`` only for
    segmentation); it refuses, before building anything, a model the export cannot hold."""

    def build() -> Any:
        if model.params is not None and 4 * model.params > MAX_WEIGHT_BYTES:
            raise ModelError(
                f"{model.name} has {model.params / 1e6:.0f}M parameters "
                f"({4 * model.params / 2**30:.1f} GiB as float32), over the 2 GiB protobuf "
                "limit of the zoo's in-memory ONNX export"
            )
        # torchvision loads only when a model is built
        import torchvision.models

        options: dict[str, Any] = {"weights": None, **_BUILD_OPTIONS.get(model.name, {})}
        if model.task == "segmentation":
            # weights_backbone=None: the default would download ImageNet backbone weights
            options.update(weights_backbone=None, aux_loss=False)
            return _out_only(torchvision.models.get_model(model.name, **options))
        if model.name.startswith("vit_"):  # the position embedding is sized for the input
            options["image_size"] = model.size
        return torchvision.models.get_model(model.name, **options)

    build.__name__ = build.__qualname__ = f"build_{model.name}"
    return build


def _entry(
    name: str,
    size: int,
    description: str,
    *,
    role: Role = "train",
    aliases: tuple[str, ...] = (),
    constructor: Callable[[], Any] | None = None,
) -> ZooEntry:
    return ZooEntry(
        name=name,
        constructor=constructor or _torchvision(name),
        input_shape=(1, 3, size, size),
        description=description,
        role=role,
        aliases=aliases,
    )


_ENTRIES: tuple[ZooEntry, ...] = (
    _entry("vgg16", 224, "VGG-16: 13 plain 3x3 convs + 3 FC layers, 138M weights"),
    # SqueezeNet 1.0, not 1.1: 1.0 is the network of the SqueezeNet paper (7x7/96 stem, late
    # pooling) that "SqueezeNet" denotes in the layer-fusion literature; 1.1 is a later
    # cheaper variant whose early pooling shrinks the big early feature maps that make
    # fusion decisions interesting.
    _entry(
        "squeezenet",
        224,
        "SqueezeNet 1.0: fire modules (squeeze 1x1 -> expand 1x1 | 3x3 -> concat)",
        aliases=("squeezenet1_0", "squeezenet1.0", "squeezenet_1_0"),
        constructor=_torchvision("squeezenet1_0"),
    ),
    _entry(
        "mobilenet_v2",
        224,
        "MobileNetV2: inverted residuals with depthwise convs",
        aliases=("mobilenetv2",),
    ),
    _entry(
        "mobilenet_v3_small",
        224,
        "MobileNetV3-Small: depthwise blocks, squeeze-excite, hard-swish",
        aliases=("mobilenetv3_small",),
    ),
    _entry(
        "mobilenet_v3_large",
        224,
        "MobileNetV3-Large: depthwise blocks, squeeze-excite, hard-swish",
        aliases=("mobilenetv3_large",),
    ),
    _entry("resnet18", 224, "ResNet-18: basic residual blocks"),
    _entry("resnet50", 224, "ResNet-50: bottleneck residual blocks", role="unseen"),
    _entry("resnet101", 224, "ResNet-101: bottleneck residual blocks"),
    _entry("resnet152", 224, "ResNet-152: bottleneck residual blocks", role="unseen"),
    _entry("efficientnet_b0", 224, "EfficientNet-B0: MBConv blocks with squeeze-excite, SiLU"),
    _entry("efficientnet_b3", 300, "EfficientNet-B3 at 300x300: wider and deeper MBConv network"),
    _entry(
        "deeplabv3_mobilenet_v3_large",
        513,
        "DeepLabV3 segmentation (ASPP head) on a MobileNetV3-Large backbone, 513x513",
        role="unseen",
        aliases=("deeplabv3", "deeplab", "deeplabv3_mobilenet", "deeplabv3_mobilenetv3_large"),
        constructor=_deeplabv3_mobilenet_v3_large,
    ),
)

ZOO: dict[str, ZooEntry] = {e.name: e for e in _ENTRIES}
UNSEEN_MODELS: tuple[str, ...] = tuple(e.name for e in _ENTRIES if e.role == "unseen")
"""The paper's held-out networks (resnet50, resnet152, deeplabv3_mobilenet_v3_large): the
``role`` of ``zoo list``. The default GNN dataset draws on graph families instead
(:data:`fusionplan.data.dataset.TRAINING_FAMILIES`)."""
TRAIN_MODELS: tuple[str, ...] = tuple(e.name for e in _ENTRIES if e.role == "train")

_LOOKUP: dict[str, str] = {
    key: e.name for e in _ENTRIES for key in (e.name, *(a.lower() for a in e.aliases))
}


# ----------------------------------------------------------------------------- registry
def zoo_names(role: Role | None = None) -> tuple[str, ...]:
    """Canonical zoo names in table order, optionally only the ``train`` or ``unseen`` ones."""
    if role not in (None, "train", "unseen"):
        raise ValueError(f"role must be 'train', 'unseen' or None, not {role!r}")
    return tuple(e.name for e in _ENTRIES if role is None or e.role == role)


def _canonical(name: str) -> str | None:
    """The canonical zoo name for ``name`` (any case, ``-`` for ``_``, aliases), or None."""
    key = name.strip().lower()
    return _LOOKUP.get(key) or _LOOKUP.get(key.replace("-", "_"))


def _key(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def _optimus_entry(name: str) -> ZooEntry:
    layers, size, description = OPTIMUS_NETWORKS[name]
    return _entry(
        name, size, description, role="unseen", constructor=lambda: build_module(layers())
    )


def _find(name: str) -> ZooEntry | None:
    """The entry for a paper network (its names and aliases win), one of Optimus's networks
    (``data/optimus_nets.py``) or a torchvision model."""
    canonical = _canonical(name)
    if canonical is not None:
        return ZOO[canonical]
    if _key(name) in OPTIMUS_NETWORKS:
        return _optimus_entry(_key(name))
    model = torchvision_models().get(_key(name))
    return None if model is None else _torchvision_entry(model)


def _unknown(name: str, what: str = "not a zoo model") -> ModelError:
    """One line: the close matches among every name the zoo knows, and the paper zoo."""
    others = torchvision_models()
    known = [*zoo_names(), *others, *SYNTHETIC]
    close = difflib.get_close_matches(_key(name), known, n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return ModelError(
        f"unknown model '{name}': {what}{hint} (zoo: {', '.join(zoo_names())}; and "
        f"{len(others)} more torchvision models by name, see 'fusionplan zoo list --all'; "
        f"synthetic graphs such as randwire-n32-s0, nasnet-c3)"
    )


def zoo_entry(name: str) -> ZooEntry:
    """The entry for ``name``; ``ModelError`` naming close matches if there is none."""
    entry = _find(name)
    if entry is None:
        raise _unknown(name)
    return entry


# ----------------------------------------------------------------------------- torchvision
_INDEXES: dict[Path, dict[str, TorchvisionModel]] = {}


def _index() -> dict[str, TorchvisionModel]:
    """Every torchvision classification and segmentation model, paper ones included, by name.

    Read from ``torchvision-models-tv<version>-v<format>.json`` in the zoo cache; building
    it imports torchvision (seconds), once per torchvision version and cache directory.
    """
    path = cache_dir() / (
        f"torchvision-models-tv{_dist_version('torchvision')}-v{ZOO_FORMAT_VERSION}.json"
    )
    index = _INDEXES.get(path)
    if index is None:
        if path.is_file():
            rows = json.loads(path.read_text(encoding="utf-8"))
        else:
            rows = _read_torchvision()
            write_text_atomic(path, json.dumps(rows, indent=1) + "\n")
        index = _INDEXES[path] = {r["name"]: TorchvisionModel(**r) for r in rows}
    return index


def _read_torchvision() -> list[dict[str, Any]]:
    """The index rows, from torchvision's model lists and their weights' documentation."""
    # torchvision (and torch) load only when the index is built
    import torchvision.models

    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task, module in (
            ("classification", torchvision.models),
            ("segmentation", torchvision.models.segmentation),
        ):
            for name in torchvision.models.list_models(module=module):
                try:
                    weights = torchvision.models.get_model_weights(name).DEFAULT
                except ValueError:  # no weights enum: nothing documented
                    weights = None
                rows.append(
                    {
                        "name": name,
                        "task": task,
                        "size": _documented_size(weights, task),
                        "params": weights.meta.get("num_params") if weights else None,
                    }
                )
    return rows


def _documented_size(weights: Any, task: Task) -> int:
    """The square input side torchvision documents for ``weights`` (module docstring)."""
    if weights is not None:
        transform = weights.transforms()
        sides = getattr(transform, "crop_size" if task == "classification" else "resize_size", None)
        if sides:
            return int(sides[0])
    return FALLBACK_SIZE[task]


def torchvision_models() -> dict[str, TorchvisionModel]:
    """The torchvision models the zoo builds by name beyond the paper's twelve (names that a
    paper entry answers to, such as ``squeezenet1_0``, stay with the paper entry)."""
    return {n: m for n, m in _index().items() if _canonical(n) is None}


def default_input_size(name: str) -> int:
    """torchvision's documented input side for model ``name`` (module docstring). A paper
    entry keeps its own size (DeepLabV3 is 513 in the zoo, 520 here)."""
    model = _index().get(_key(name))
    if model is None:
        raise _unknown(name, "not a torchvision classification or segmentation model")
    return model.size


def _torchvision_entry(model: TorchvisionModel) -> ZooEntry:
    weights = "" if model.params is None else f", {model.params / 1e6:.1f}M weights"
    return ZooEntry(
        name=model.name,
        constructor=_torchvision_builder(model),
        input_shape=(1, 3, model.size, model.size),
        description=f"{model.task}{weights}",
        role="unseen",
    )


# ----------------------------------------------------------------------------- cache
def cache_root() -> Path:
    """The fusionplan cache root: ``$FUSIONPLAN_CACHE_DIR`` or the user cache dir.

    Every cache (zoo exports, trained batching tables) sits in a folder under it, which lets
    tests and CI point everything at a throw-away directory.
    """
    root = os.environ.get(CACHE_ENV)
    if not root:
        root = platformdirs.user_cache_dir("fusionplan")
    return Path(root).expanduser()


def cache_dir() -> Path:
    """Where cached zoo exports live: ``cache_root() / "zoo"``."""
    return cache_root() / "zoo"


def _dist_version(dist: str) -> str:
    """Installed version without a local build tag (``2.4.0+cu121`` -> ``2.4.0``).

    Read from package metadata so that computing a cache key does not import torch.
    """

    try:
        version = metadata.version(dist)
    except metadata.PackageNotFoundError:
        module = __import__(dist)
        version = module.__version__
    return version.split("+", 1)[0]


def cache_file_name(name: str, size: int | None = None) -> str:
    """E.g. ``resnet18-224x224-torch2.14.1-tv0.29.1-v1.onnx``; ``size`` names a square-input
    variant of the network (default: the zoo's own input size).

    A new torch/torchvision may export a different graph, so versions are part of the key.
    """
    entry = zoo_entry(name)
    hw = f"{size}x{size}" if size is not None else entry.input_size
    return (
        f"{entry.name}-{hw}-torch{_dist_version('torch')}"
        f"-tv{_dist_version('torchvision')}-v{ZOO_FORMAT_VERSION}.onnx"
    )


def data_path(onnx_path: str | os.PathLike) -> Path:
    """The external-weights file that belongs to ``onnx_path`` (``<file>.onnx.data``)."""
    onnx_path = Path(onnx_path)
    return onnx_path.with_name(onnx_path.name + ".data")


def is_cached(name: str) -> bool:
    """True if ``name`` has a complete cached export (graph and its weights file)."""
    path = cache_dir() / cache_file_name(name)
    return path.is_file() and data_path(path).is_file()


def synthetic_path(name: str) -> Path:
    """The ONNX file of synthetic graph ``name`` (:data:`fusionplan.data.synthetic.SYNTHETIC`),
    written to the cache on first use. Its file name carries a hash of its bytes (the graph is
    built each time, in well under a second), so a changed generator never reads a stale
    file."""
    data = SYNTHETIC[name]().SerializeToString()
    path = cache_root() / "synthetic" / f"{name}-{hashlib.sha256(data).hexdigest()[:12]}.onnx"
    if not path.is_file():
        write_atomic(path, lambda tmp: tmp.write_bytes(data))
    return path


def zoo_path(name: str) -> Path:
    """The cached ONNX file for zoo model ``name``, exported on first use.

    Safe under concurrency: two processes may both export, but each publishes complete
    files with atomic renames, so a reader sees either no file or a whole one.
    """
    path = cache_dir() / cache_file_name(name)
    if not (path.is_file() and data_path(path).is_file()):
        export_model(name, path)
    return path


def zoo_variant_path(name: str, size: int) -> Path:
    """The cached ONNX export of zoo network ``name`` at a square ``size`` input, exported
    on first use exactly as the zoo exports its own (seeded, TorchScript exporter, external
    weights, atomic publication). At the zoo's own size this is the zoo file itself."""
    entry = zoo_entry(name)
    if entry.input_shape[2:] == (size, size):
        return zoo_path(entry.name)
    path = cache_dir() / cache_file_name(entry.name, size)
    if not (path.is_file() and data_path(path).is_file()):
        if entry.name in ZOO:
            variant = dataclasses.replace(entry, input_shape=(1, 3, size, size))
        else:  # rebuilt: a ViT's position embedding depends on the size
            model = dataclasses.replace(torchvision_models()[entry.name], size=size)
            variant = _torchvision_entry(model)
        proto = _export_proto(variant)
        write_atomic(path, lambda tmp: _save_external(proto, path, tmp))
    return path


# ----------------------------------------------------------------------------- export
def export_model(name: str, path: str | os.PathLike, *, external_data: bool = True) -> Path:
    """Build zoo model ``name`` and write it to ``path`` as ONNX; returns ``path``.

    With ``external_data`` (the default, see the module docstring for why) the weights go
    to ``<path>.data``. Raises ``ModelError`` for an unknown name. If anything fails, no
    file is left at ``path``.
    """
    entry = zoo_entry(name)
    proto = _export_proto(entry)
    path = Path(path)
    if external_data:
        return write_atomic(path, lambda tmp: _save_external(proto, path, tmp))
    return write_atomic(path, lambda tmp: tmp.write_bytes(proto.SerializeToString()))


def _export_proto(entry: ZooEntry) -> Any:
    """Build ``entry`` deterministically and return its ``onnx.ModelProto``.

    Exporting to memory avoids writing the weights once inline and then again as external
    data. The TorchScript exporter's deprecation and tracer warnings are silenced here
    only: they are about the exporter, not about anything the user can fix.
    """
    # torch (6 s to import) loads only when a model is exported
    import torch

    buffer = io.BytesIO()
    with _single_thread(), _exportable_attention(), warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        torch.manual_seed(0)
        model = entry.constructor().eval()
        torch.onnx.export(
            model,
            (torch.zeros(entry.input_shape),),
            buffer,
            dynamo=False,
            opset_version=OPSET_VERSION,
            input_names=["input"],
            output_names=["output"],
            do_constant_folding=True,
        )
    proto = onnx.load_model_from_string(buffer.getvalue())
    proto.graph.doc_string = f"fusionplan zoo: {entry.name} {entry.input_size}"
    return proto


@contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, restoring the previous setting afterwards.

    Export time is serialisation and graph passes, not arithmetic, and torch's OpenMP
    threads spin badly when the cores are shared (pytest-xdist, parallel dataset workers,
    two exports at once): measured on 2 cores with one other busy process, ResNet-152
    exports in ~3 s on one thread but ~11 s on two.
    """
    # torch (6 s to import) loads only when a model is exported
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@contextmanager
def _exportable_attention() -> Iterator[None]:
    """Turn off ``nn.MultiheadAttention``'s inference fast path while exporting.

    In eval mode without grad it calls ``aten::_native_multi_head_attention``, which the
    TorchScript exporter cannot translate (every ViT failed at opset 17); the regular path
    is the same computation in exportable ops. Networks without that module are unaffected.
    """
    # torch (6 s to import) loads only when a model is exported
    import torch

    previous = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(previous)


def _save_external(proto: Any, final: Path, tmp: Path) -> None:
    """Write the graph to ``tmp`` and its weights to ``<final>.data``, both atomically.

    The weights are saved in a private staging directory and renamed into place *before*
    the graph is (``write_atomic`` renames ``tmp`` onto ``final`` afterwards), so a
    visible ``.onnx`` always has its ``.data``. The ``.onnx`` records the weights file by
    its final base name, which is why it is staged under that name.
    """

    data = data_path(final)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".staging", dir=tmp.parent))
    try:
        onnx.save_model(
            proto,
            str(staging / final.name),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data.name,
            size_threshold=1024,
        )
        os.replace(staging / data.name, data)
        os.replace(staging / final.name, tmp)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ----------------------------------------------------------------------------- loading
def load_zoo_model(name: str) -> OpGraph:
    """Import zoo model ``name`` (exporting it to the cache first if needed)."""
    entry = zoo_entry(name)
    return load_model(zoo_path(entry.name), name=entry.name)


def model_source(spec: str | os.PathLike) -> Path:
    """The ONNX file behind a command-line model argument: a file path, a zoo name or a
    synthetic graph's name (``randwire-n32-s0``, ``nasnet-c3``, ...).

    A path wins over a zoo name (a local file named ``resnet18`` is what the user means);
    anything ending in ``.onnx`` is treated as a path so that a typo reports a missing
    file rather than an unknown zoo model. Zoo models are exported on first use, synthetic
    graphs written (:func:`synthetic_path`).
    """
    text = os.fspath(spec)
    if Path(text).is_file() or text.lower().endswith(".onnx"):
        if not Path(text).is_file():
            raise ModelError(f"model file not found: {text}")
        return Path(text)
    if text in SYNTHETIC:
        return synthetic_path(text)
    entry = _find(text)
    if entry is None:
        raise _unknown(text, "not a file, a zoo model or a synthetic graph")
    return zoo_path(entry.name)


def resolve_model(spec: str | os.PathLike, **import_options: Any) -> OpGraph:
    """Turn a command-line model argument into an op graph (see :func:`model_source`).

    ``import_options`` go to :func:`fusionplan.ir.onnx_import.load_model` (``input_shapes``,
    ``strict_ops``).
    """

    text = os.fspath(spec)
    path = model_source(text)
    if Path(text).is_file():
        name = path.stem
    else:
        entry = _find(text)
        name = entry.name if entry else text  # a zoo model, or a synthetic graph
    return load_model(path, name=name, **import_options)


def list_zoo() -> list[ZooRow]:
    """One row per zoo model for ``fusionplan zoo list`` (cheap: does not import torch)."""
    return [
        ZooRow(e.name, e.input_size, e.description, e.role, is_cached(e.name)) for e in _ENTRIES
    ]


def list_torchvision() -> list[ZooRow]:
    """One row per torchvision model beyond the paper's, for ``fusionplan zoo list --all``."""
    rows = []
    for model in torchvision_models().values():
        entry = _torchvision_entry(model)
        rows.append(
            ZooRow(
                entry.name, entry.input_size, entry.description, entry.role, is_cached(model.name)
            )
        )
    return rows
