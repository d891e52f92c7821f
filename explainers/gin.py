"""The GIN validity classifier: is this fusion group valid at this buffer?
(docs/design.md, "GNN pipeline")

``layers`` ``GINConv`` layers (``hidden`` wide, ReLU), sum readout, a linear head with two
logits (0 = invalid, 1 = valid) divided by a *temperature* fitted after training on the
validation split, so that softmax probabilities are calibrated (the judge and the active
learner act on them). The buffer enters as node features (its size and each node's bytes
relative to it), so one model per scheme covers every buffer size. ``forward`` takes
``edge_weight`` (a soft edge mask) as well, because the explainers learn masks over edges
and need the model to honour them.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch_geometric.nn import MessagePassing, global_add_pool

from explainers.checkpoints import (
    CheckpointError,
    checkpoint_name,
    load_checkpoint,
    rebuild_command,
    weights_dir,
)
from fusionplan.data.features import FEATURE_VERSION, NUM_FEATURES

INVALID, VALID = 0, 1


@dataclass(frozen=True)
class GINConfig:
    in_features: int = NUM_FEATURES
    hidden: int = 64
    layers: int = 4


class MaskableGINConv(MessagePassing):
    """GIN layer ``MLP((1 + eps) x_i + sum_j w_ji x_j)``: PyG's GINConv plus edge weights,
    so a learned edge mask can switch messages off (PyG's explainers also inject masks
    into every ``MessagePassing`` layer; the explicit weight serves our RG-Explainer)."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__(aggr="add")
        self.mlp = mlp
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, x, edge_index, edge_weight=None):
        out = self.propagate(edge_index, x=x, edge_weight=edge_weight)
        return self.mlp((1 + self.eps) * x + out)

    def message(self, x_j, edge_weight):
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j


class GINClassifier(nn.Module):
    def __init__(self, config: GINConfig | None = None) -> None:
        super().__init__()
        self.config = config or GINConfig()
        c = self.config
        dims = [c.in_features] + [c.hidden] * c.layers
        self.convs = nn.ModuleList(
            MaskableGINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b), nn.ReLU()))
            for a, b in itertools.pairwise(dims)
        )
        self.head = nn.Linear(c.hidden, 2)
        self.register_buffer("temperature", torch.ones(1))

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        """Logits (num_graphs, 2); ``batch`` maps nodes to graphs (all one graph if None)."""
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        h = x
        for conv in self.convs:
            h = conv(h, edge_index, edge_weight)
        return self.head(global_add_pool(h, batch)) / self.temperature

    def config_dict(self) -> dict:
        return asdict(self.config)


class FeatureClip:
    """Forward pre-hook clamping node features to the per-column range seen in training.

    The GIN extrapolates wildly outside its training domain: DeepLabV3's dilated ASPP
    convs have 25-73-row windows (the training networks' largest is 7) and drove the
    summed logits of groups needing 5-20 MB to "valid" at 128 KB. Clipped, such a node
    looks like the largest window the classifier knows; op kinds absent from training
    (Resize, Pad, ...: one-hot columns that were always 0) are clipped to 0. On data within
    the training range this is the identity. Picklable (no closures).
    """

    def __init__(self, low: Sequence[float], high: Sequence[float]) -> None:
        self.low = torch.tensor(low, dtype=torch.float32)
        self.high = torch.tensor(high, dtype=torch.float32)

    def __call__(self, module, args, kwargs):
        if args:
            return (self.clip(args[0]), *args[1:]), kwargs
        if "x" in kwargs:
            return args, {**kwargs, "x": self.clip(kwargs["x"])}
        return args, kwargs

    def clip(self, x: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(x, self.low.to(x)), self.high.to(x))


def attach_feature_clip(model: GINClassifier, feature_range: dict[str, Sequence[float]]) -> None:
    """Clamp ``model``'s input features to ``{"min": [...], "max": [...]}`` on every call
    (see :class:`FeatureClip`); the clip is also kept as ``model.feature_clip``."""
    clip = FeatureClip(feature_range["min"], feature_range["max"])
    model.register_forward_pre_hook(clip, with_kwargs=True)
    model.feature_clip = clip


# ----------------------------------------------------------------------------- loading
KIND = "gin"  # checkpoint kind: gin-<scheme>.pt
_LOADED: dict[tuple, GINClassifier] = {}


def load_gin(scheme: str, directory: str | os.PathLike | None = None) -> GINClassifier:
    """The trained GIN for ``scheme`` (eval mode) from the shipped weights (or
    ``FUSIONPLAN_WEIGHTS_DIR`` / ``directory``); :class:`CheckpointError` naming
    ``fusionplan train gin --scheme <scheme>`` if missing or stale.

    The model clamps its input features to the training range recorded with the weights
    (:class:`FeatureClip`, a forward pre-hook; ``model.feature_clip``). Loading the
    ``state_dict`` by hand skips that clamp.
    """
    scheme = scheme.lower()
    state, entry = load_checkpoint(KIND, scheme, Path(directory) if directory else None)
    fix = f"rebuild it with `{rebuild_command(KIND, scheme)}`"
    if entry.get("feature_version") != FEATURE_VERSION:
        raise CheckpointError(
            f"GIN weights for '{scheme}' were trained on features v{entry.get('feature_version')}, "
            f"this fusionplan computes v{FEATURE_VERSION}; {fix}"
        )
    config = GINConfig(**entry.get("gin_config", {}))
    model = GINClassifier(config)
    if entry.get("feature_range"):
        attach_feature_clip(model, entry["feature_range"])
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise CheckpointError(
            f"GIN weights for '{scheme}' do not fit the model ({exc}); {fix}"
        ) from None
    return model.eval()


def gin_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a GIN's weights (identifies the GIN a PG/RG was trained against)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def checkpoint_stamp(kind: str, scheme: str) -> tuple[str, int]:
    """(path, modification time) of a checkpoint: a cache key that changes on retraining."""
    path = weights_dir() / checkpoint_name(kind, scheme)
    return str(path), path.stat().st_mtime_ns if path.is_file() else -1


def load_gin_model(scheme: str) -> torch.nn.Module:
    """The trained GIN of ``scheme`` in eval mode, with its feature clamp (cached per process)."""
    key = (scheme, *checkpoint_stamp(KIND, scheme))
    model = _LOADED.get(key)
    if model is None:
        model = _LOADED[key] = load_gin(scheme)
    return model


def clear_loaded() -> None:
    """Forget loaded GINs (tests that rewrite checkpoints in place call this)."""
    _LOADED.clear()
