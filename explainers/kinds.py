"""The builtin explainers as registry entries: GNNExplainer, PGExplainer, RG-Explainer.

GNNExplainer optimises a mask per group and has nothing to train; PG and RG load trained
weights that record the fingerprint of the GIN they were trained against, and are refused
after that GIN changes (their masks/policies read its embeddings).
"""

from __future__ import annotations

from typing import Any

from explainers.checkpoints import CheckpointError, load_checkpoint, rebuild_command, weights_dir
from explainers.gin import gin_fingerprint
from explainers.gnnexplainer import GNNExplainerAlgorithm
from explainers.pgexplainer import PGExplainerAlgorithm
from explainers.registry import ExplainerKind
from explainers.rgexplainer import RGExplainerAlgorithm
from explainers.train_explainers import train_pg, train_rg


def load_trained(kind: str, cls: Any, scheme: str, gin: Any) -> Any:
    """The trained algorithm ``cls`` of ``kind`` for ``scheme`` from its checkpoint."""
    state, meta = load_checkpoint(kind, scheme)
    fix = f"rebuild them with `{rebuild_command(kind, scheme)}`"
    if meta.get("gin_fingerprint") != gin_fingerprint(gin):
        raise CheckpointError(
            f"{kind.upper()} weights for scheme '{scheme}' were trained against a different "
            f"GIN than the one in {weights_dir()}; {fix}"
        )
    try:
        return cls.from_state(state)
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
        raise CheckpointError(
            f"{kind.upper()} weights for scheme '{scheme}' do not match this version "
            f"({type(exc).__name__}); {fix}"
        ) from None


GNNE = ExplainerKind("gnne", build=lambda scheme, gin, seed: GNNExplainerAlgorithm(seed=seed))
PG = ExplainerKind(
    "pg",
    build=lambda scheme, gin, seed: load_trained("pg", PGExplainerAlgorithm, scheme, gin),
    train=train_pg,
)
RG = ExplainerKind(
    "rg",
    build=lambda scheme, gin, seed: load_trained("rg", RGExplainerAlgorithm, scheme, gin),
    train=train_rg,
)
