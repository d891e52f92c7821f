"""How well the trained GIN tells a fitting group from an overflowing one on a given model
(``fusionplan train eval``): what a user should know before letting it guide splitting.

Groups of the model are drawn and labelled by the cost model exactly as the training data is
(:func:`fusionplan.data.dataset.generate_dataset`, into a temporary directory), then the
shipped (or ``$FUSIONPLAN_WEIGHTS_DIR``) GIN of the scheme predicts each (group, buffer)
sample. Reported per buffer and overall: accuracy, F1 of the valid class, and the
false-valid rate, the share of overflowing groups called valid: the error that would put an
invalid group into a plan if the GIN were trusted without asking the cost model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from explainers.gin import load_gin_model
from explainers.train_gin import PackedSamples, binary_metrics, predict
from fusionplan.data.dataset import generate_dataset
from fusionplan.data.reader import load_dataset

DEFAULT_EVAL_GROUPS = 500
EVAL_BUFFERS_KB: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
"""From a small NPU's buffer to a large one (the GIN trained on 128 KB - 2 MB)."""


@dataclass(frozen=True)
class BufferScore:
    """The GIN's score on one buffer size (``buffer_kb`` None: all buffers together)."""

    buffer_kb: int | None
    samples: int
    valid_share: float
    accuracy: float
    f1: float
    false_valid: float
    """Invalid (overflowing) samples predicted valid, over all invalid samples."""

    @classmethod
    def of(cls, buffer_kb: int | None, y: np.ndarray, pred: np.ndarray) -> BufferScore:
        m = binary_metrics(y, pred)
        (tn, fp), _ = m["confusion"]
        return cls(
            buffer_kb,
            m["samples"],
            m["valid_fraction"],
            m["accuracy"],
            m["f1"],
            fp / (tn + fp) if tn + fp else 0.0,
        )


def evaluate_gin_on(
    model: str,
    scheme: str,
    *,
    groups: int = DEFAULT_EVAL_GROUPS,
    buffers_kb: Sequence[int] = EVAL_BUFFERS_KB,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[BufferScore, ...]:
    """The GIN of ``scheme`` on ``groups`` groups of ``model`` (a zoo name or an ONNX path)
    at every buffer of ``buffers_kb``: one :class:`BufferScore` per buffer, then the overall
    one. The same seed draws the same groups."""
    gin = load_gin_model(scheme)  # a missing checkpoint fails before any labelling
    packed = labelled_samples(model, scheme, groups, buffers_kb, seed, progress)
    return score_samples(gin, packed)


def labelled_samples(
    model: str,
    scheme: str,
    groups: int,
    buffers_kb: Sequence[int],
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> PackedSamples:
    """``groups`` groups of ``model`` drawn and labelled at every buffer exactly as the
    training data is (a temporary dataset), as packed (group, buffer) samples."""
    with tempfile.TemporaryDirectory(prefix="fusionplan-eval-") as tmp:
        generate_dataset(
            tmp, seed=seed, groups=0, unseen_groups=groups, models=[], unseen_models=[model],
            buffers_kb=buffers_kb, schemes=[scheme], processes=1, progress=progress,
        )  # fmt: skip
        data = load_dataset(tmp, verify=False)
    return PackedSamples(data, scheme, np.arange(len(data.labels[scheme]["valid"])))


def score_samples(gin: torch.nn.Module, packed: PackedSamples) -> tuple[BufferScore, ...]:
    """One :class:`BufferScore` per buffer of ``packed``, then the overall one."""
    pred = predict(gin, packed)
    kbs = [int(b) // 1024 for b in packed.data.buffers]
    scores = [
        BufferScore.of(kb, packed.y[sel], pred[sel])
        for bi, kb in enumerate(kbs)
        if (sel := packed.buffer_index == bi).any()
    ]
    return (*scores, BufferScore.of(None, packed.y, pred))


def scores_json(scores: Sequence[BufferScore]) -> list[dict[str, Any]]:
    """The scores as JSON rows (``buffer_kb`` null for the overall one)."""
    return [asdict(s) for s in scores]
