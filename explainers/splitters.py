"""Explainer-guided splitters: ``gnne``, ``pg`` and ``rg`` in :data:`fusionplan.planning.split.SPLITTERS`.

Importing this module registers the three names (``fusionplan.app.api`` imports it when an
unknown splitter name is asked for). Each is the paper's Algorithm 1 --
:class:`fusionplan.planning.split.TreeSplitter` -- over an :class:`explainers.ranking.ExplainerRanker`
with the GIN of the cost model's scheme and, for PG and RG, the trained explainer of that
scheme. Weights come from :func:`explainers.checkpoints.weights_dir` (the shipped ones, or
``$FUSIONPLAN_WEIGHTS_DIR``) and are loaded with ``weights_only=True``; a missing or
mismatched checkpoint is a :class:`~explainers.checkpoints.CheckpointError` naming the
command that rebuilds it, raised when the splitter is made (before any search starts).

PG and RG checkpoints record the fingerprint of the GIN they were trained against; after the
GIN is retrained they are refused (their masks/policies read that GIN's embeddings).
Loaded explainers are cached per process, keyed by checkpoint file and modification time.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from explainers.checkpoints import CheckpointError, load_checkpoint, rebuild_command, weights_dir
from fusionplan.planning.split import SPLITTERS, TreeSplitter

if TYPE_CHECKING:
    import torch

    from accel_model.base import CostModel
    from explainers.base import Explainer

EXPLAINER_KINDS = ("gnne", "pg", "rg")
_CACHE: dict[tuple, Any] = {}


def gin_fingerprint(model: torch.nn.Module) -> str:
    """A short hash of a GIN's weights (identifies the GIN a PG/RG was trained against)."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _mtime(kind: str, scheme: str) -> tuple[str, int]:
    from explainers.checkpoints import checkpoint_name

    path = weights_dir() / checkpoint_name(kind, scheme)
    return str(path), path.stat().st_mtime_ns if path.is_file() else -1


def load_gin_model(scheme: str) -> torch.nn.Module:
    """The trained GIN of ``scheme`` in eval mode, with its feature clamp (cached per process)."""
    from explainers.train_gin import load_gin

    key = ("gin", scheme, *_mtime("gin", scheme))
    model = _CACHE.get(key)
    if model is None:
        model = _CACHE[key] = load_gin(scheme)
    return model


def _check_gin(kind: str, scheme: str, meta: dict[str, Any], gin: torch.nn.Module) -> None:
    if meta.get("gin_fingerprint") != gin_fingerprint(gin):
        raise CheckpointError(
            f"{kind.upper()} weights for scheme '{scheme}' were trained against a different "
            f"GIN than the one in {weights_dir()}; rebuild them with "
            f"`{rebuild_command(kind, scheme)}`"
        )


def load_explainer_algorithm(kind: str, scheme: str, gin: torch.nn.Module):
    """The trained PG or RG algorithm of ``scheme`` from its checkpoint."""
    from explainers.pgexplainer import PGExplainerAlgorithm
    from explainers.rgexplainer import RGExplainerAlgorithm

    state, meta = load_checkpoint(kind, scheme)
    _check_gin(kind, scheme, meta, gin)
    cls = PGExplainerAlgorithm if kind == "pg" else RGExplainerAlgorithm
    try:
        return cls.from_state(state)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise CheckpointError(
            f"{kind.upper()} weights for scheme '{scheme}' do not match this version "
            f"({type(exc).__name__}); rebuild them with `{rebuild_command(kind, scheme)}`"
        ) from None


def load_explainer(kind: str, scheme: str, seed: int = 0) -> Explainer:
    """A ready explainer (GIN + algorithm) for ``kind`` in gnne/pg/rg and ``scheme``."""
    from explainers.base import Explainer
    from explainers.gnnexplainer import GNNExplainerAlgorithm

    if kind not in EXPLAINER_KINDS:
        raise ValueError(f"unknown explainer '{kind}' (choose from {', '.join(EXPLAINER_KINDS)})")
    gin = load_gin_model(scheme)
    key: tuple = (kind, scheme, id(gin))
    if kind == "gnne":
        key += (seed,)
    else:
        key += _mtime(kind, scheme)
    explainer = _CACHE.get(key)
    if explainer is None:
        if kind == "gnne":
            algorithm = GNNExplainerAlgorithm(seed=seed)
        else:
            algorithm = load_explainer_algorithm(kind, scheme, gin)
        explainer = Explainer(gin, algorithm)
        _CACHE[key] = explainer
    return explainer


def make_explainer_splitter(kind: str, cost_model: CostModel, seed: int = 0) -> TreeSplitter:
    """Algorithm 1 over the ``kind`` explainer for ``cost_model``'s scheme and buffer."""
    from explainers.ranking import ExplainerRanker

    explainer = load_explainer(kind, cost_model.accel.scheme, seed)
    return TreeSplitter(cost_model, ExplainerRanker(cost_model, explainer, kind), seed)


def clear_cache() -> None:
    """Forget loaded models (tests that rewrite checkpoints in place call this)."""
    _CACHE.clear()


def _register() -> None:
    for kind in EXPLAINER_KINDS:
        SPLITTERS.register(
            kind, lambda cm, seed, kind=kind: make_explainer_splitter(kind, cm, seed)
        )


_register()
