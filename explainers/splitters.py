"""Explainer-guided splitters: one per registered explainer (``gnne``, ``pg``, ``rg``).

:func:`explainers.registry.register_explainer` puts each in the splitter registry. Each is
the paper's Algorithm 1 -- :class:`fusionplan.planning.split.TreeSplitter` -- over an
:class:`explainers.ranking.ExplainerRanker` with the GIN of the cost model's scheme and, for
PG and RG, the trained explainer of that scheme. Weights come from
:func:`explainers.checkpoints.weights_dir` (the shipped ones, or
``$FUSIONPLAN_WEIGHTS_DIR``) and are loaded with ``weights_only=True``; a missing or
mismatched checkpoint is a :class:`~explainers.checkpoints.CheckpointError` naming the
command that rebuilds it, raised when the splitter is made (before any search starts).

The ``gin-`` splitters (``gin-pg``, ...) are the same tree with the GIN judging the cuts it
probes, so that only the parts kept are asked about (docs/design.md, "Oracles").

PG and RG checkpoints record the fingerprint of the GIN they were trained against; after the
GIN is retrained they are refused (their masks/policies read that GIN's embeddings).
Loaded explainers are cached per process, keyed by checkpoint file and modification time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from explainers.base import Explainer
from explainers.gin import checkpoint_stamp, clear_loaded, load_gin_model
from explainers.judge import GinJudge
from explainers.ranking import ExplainerRanker
from explainers.registry import EXPLAINERS
from fusionplan.planning.split import TreeSplitter

if TYPE_CHECKING:
    from accel_model.base import CostModel


_EXPLAINERS: dict[tuple, Explainer] = {}


def load_explainer(kind: str, scheme: str, seed: int = 0) -> Explainer:
    """A ready explainer (GIN + algorithm) of registered ``kind`` for ``scheme``, cached per
    process: by seed for an untrained explainer, by checkpoint for a trained one."""
    spec = EXPLAINERS.get(kind)
    gin = load_gin_model(scheme)
    key: tuple = (kind, scheme, id(gin))
    key += checkpoint_stamp(kind, scheme) if spec.trained else (seed,)
    explainer = _EXPLAINERS.get(key)
    if explainer is None:
        explainer = _EXPLAINERS[key] = Explainer(gin, spec.build(scheme, gin, seed))
    return explainer


def make_explainer_splitter(
    kind: str, cost_model: CostModel, seed: int = 0, *, gin_judge: bool = False
) -> TreeSplitter:
    """Algorithm 1 over the ``kind`` explainer for ``cost_model``'s scheme and buffer; with
    ``gin_judge`` the GIN, not the oracle, classifies the candidate cuts
    (:class:`explainers.judge.GinJudge`)."""
    explainer = load_explainer(kind, cost_model.accel.scheme, seed)
    judge = GinJudge(cost_model, explainer.model) if gin_judge else None
    ranker = ExplainerRanker(cost_model, explainer, kind)
    return TreeSplitter(cost_model, ranker, seed, judge=judge)


def clear_cache() -> None:
    """Forget loaded models (tests that rewrite checkpoints in place call this)."""
    _EXPLAINERS.clear()
    clear_loaded()
