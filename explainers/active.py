"""Teaching the GIN a new network with few oracle queries: ask where it is unsure.

A GIN trained on other families can be confidently wrong on a new one; the cure is labels
from the new network, and each label is an oracle query (a compile, a simulator run). Active
learning spends them where the GIN is least sure: each round, the (group, buffer) samples of
a pool whose calibrated P(valid) is nearest 1/2 are asked, and the GIN is fine-tuned on
every answer so far (:func:`explainers.judge.fine_tune`, the judge's own settings). Picking
at random is the baseline it must beat.

:func:`adaptation_curve` measures it: the pool and a separate evaluation draw of the network
are labelled up front (the evaluation labels are the referee, never shown to the learner;
a pool label counts as a query only once the learner asks for it), and the GIN is scored on
the evaluation draw before learning and after every round. ``fusionplan train eval MODEL
--adapt N`` prints the curve.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from explainers.eval_gin import BufferScore, labelled_samples, score_samples
from explainers.judge import Adaptation, fine_tune
from explainers.train_gin import PackedSamples, logits_of

PICKS = ("uncertain", "random")
ROUND = 64
"""Queries per round: small rounds let the uncertainty follow what the GIN has learnt."""


@dataclass(frozen=True)
class CurvePoint:
    """The GIN's scores on the evaluation draw after ``queries`` answers."""

    queries: int
    scores: tuple[BufferScore, ...]  # per buffer, then overall
    picked: tuple[int, ...] = ()  # the pool samples asked in the round that ended here

    @property
    def overall(self) -> BufferScore:
        return self.scores[-1]


def adaptation_curve(
    gin: torch.nn.Module,
    pool: PackedSamples,
    held_out: PackedSamples,
    *,
    queries: int,
    pick: str = "uncertain",
    adaptation: Adaptation | None = None,
    seed: int = 0,
) -> list[CurvePoint]:
    """Scores of a copy of ``gin`` on ``held_out`` before learning and after each round of
    :data:`ROUND` answers from ``pool`` picked by ``pick``, up to ``queries`` answers (or the
    whole pool). Deterministic for a seed on one thread count."""
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {', '.join(PICKS)}, got {pick!r}")
    a = adaptation or Adaptation()
    model = copy.deepcopy(gin).train(False)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    rng = np.random.default_rng(seed)
    asked = np.zeros(len(pool), dtype=bool)
    curve = [CurvePoint(0, score_samples(model, held_out))]
    budget = min(int(queries), len(pool))
    while asked.sum() < budget:
        left = np.flatnonzero(~asked)
        take = min(ROUND, budget - int(asked.sum()))
        if pick == "uncertain":
            p_valid = torch.softmax(logits_of(model, pool), 1)[:, 1].numpy()[left]
            chosen = left[np.argsort(np.abs(p_valid - 0.5), kind="stable")[:take]]
        else:
            chosen = rng.choice(left, size=take, replace=False)
        asked[chosen] = True
        known = np.flatnonzero(asked)

        def draw(known: np.ndarray = known) -> tuple[torch.Tensor, ...]:
            return pool.batch(rng.choice(known, size=a.batch))

        fine_tune(model, opt, draw, a.steps)
        picked = tuple(int(i) for i in chosen)
        curve.append(CurvePoint(int(asked.sum()), score_samples(model, held_out), picked))
    return curve


def adapt_gin_on(
    gin: torch.nn.Module,
    model: str,
    scheme: str,
    *,
    queries: int,
    pick: str = "uncertain",
    groups: int,
    buffers_kb: Sequence[int],
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> list[CurvePoint]:
    """:func:`adaptation_curve` on ``model``: the evaluation draw is ``train eval``'s
    (``groups`` groups, ``seed``), the pool another draw of as many groups (``seed + 1``)
    without the evaluation draw's groups."""
    held_out = labelled_samples(model, scheme, groups, buffers_kb, seed, progress)
    pool = labelled_samples(model, scheme, groups, buffers_kb, seed + 1, progress)
    seen = set(held_out.data.mask.tolist())
    fresh = np.flatnonzero([m not in seen for m in pool.data.mask.tolist()])
    pool = PackedSamples(pool.data, scheme, fresh)
    return adaptation_curve(gin, pool, held_out, queries=queries, pick=pick, seed=seed)
