"""The GIN as Algorithm 1's judge, learning from the oracle's answers as the search asks.

The tree splitter (fusionplan/planning/split.py) probes several topological cuts per level;
with the cost model as judge each new part of each probed cut is an oracle query. The GIN
can classify those parts in batches instead, and *screen*: split a group it calls invalid
without asking whether it fits. Where it is wrong that costs DRAM (a valid group split) or a
query (an invalid part kept, asked, split again), never validity: every part kept is asked.

A GIN trained on other networks can be confidently wrong on a new one (issue 28: it calls
almost every overflowing group of a NASNet stack valid under BRR). So the judge earns its
place per model: every oracle answer the search pays for anyway is a label. Each time
``every`` new answers have arrived the judge first scores its copy of the GIN on them
(test-then-train: answers it has not trained on), then fine-tunes the copy on all answers so
far. The two uses are trusted apart, by the error each one pays for: *screening* while at
most ``max_false_invalid`` of the fitting groups were called invalid (each such mistake
splits a group that fits: DRAM), *classifying cuts* while at most ``max_false_valid`` of the
overflowing ones were called valid (each such mistake keeps a part that is then asked and
split again: queries, and a worse cut). Untrusted, the judge defers to the oracle exactly as
the plain tree; it keeps being scored, so it stops trusting itself when it drifts
(docs/design.md, "Oracles").

Trusted, it still asks where it is unsure: a verdict is taken only when the GIN's
(temperature-calibrated) probability for it is at least ``confidence``; an unsure part is
asked, and its answer is one more label. The errors that gate trust are counted the same
way, over confident verdicts only, since those are the ones the judge acts on.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from explainers.base import VALID, torch_threads
from explainers.ranking import group_batch
from fusionplan.data.features import node_feature_table
from fusionplan.ir.graph import Group
from fusionplan.planning.split import OracleJudge

if TYPE_CHECKING:
    from accel_model.base import CostModel

BATCH = 64  # groups per GIN forward pass


@dataclass(frozen=True)
class Adaptation:
    """How the judge learns: fine-tune after ``every`` new oracle answers, ``steps`` Adam
    steps of ``batch`` answers (learning rate ``lr``); each use trusted while the last
    test-then-train score's error rate for it is at most the bound."""

    every: int = 256
    steps: int = 40
    batch: int = 64
    lr: float = 3e-4
    max_false_invalid: float = 0.02  # screening
    max_false_valid: float = 0.03  # classifying cuts
    confidence: float = 0.9  # the least probability of a verdict the judge acts on

    def __post_init__(self) -> None:
        if not 0.5 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0.5, 1], got {self.confidence}")


@dataclass
class JudgeStats:
    predicted: int = 0  # parts the GIN classified
    unsure: int = 0  # of those, asked because the GIN was unsure
    batches: int = 0  # GIN forward batches (of up to BATCH groups)
    seconds: float = 0.0  # in those batches
    updates: int = 0  # fine-tunes
    train_seconds: float = 0.0
    screening_from: int = -1  # oracle answers when screening was first trusted (-1: never)
    classifying_from: int = -1  # the same for classifying cuts
    last_accuracy: float = 0.0  # last test-then-train score: share called confidently and right
    last_false_valid: float = 1.0
    last_false_invalid: float = 1.0

    @property
    def ms_per_batch(self) -> float:
        return 1000 * self.seconds / self.batches if self.batches else 0.0


class GinJudge:
    """:class:`~fusionplan.planning.split.PartJudge` by a copy of the scheme's GIN, adapted
    to this model from the oracle's answers (the module docstring)."""

    name = "gin"

    def __init__(
        self, cost_model: CostModel, gin: torch.nn.Module, adaptation: Adaptation | None = None
    ) -> None:
        self.cost_model = cost_model
        self._oracle = OracleJudge(cost_model)  # what the judge defers to while untrusted
        self.adaptation = adaptation or Adaptation()
        self.model = copy.deepcopy(gin).train(False)  # the explainers keep the original
        for p in self.model.parameters():
            p.requires_grad_(True)
        self.table = node_feature_table(cost_model.graph)
        self.stats = JudgeStats()
        self.trusted_screening = False
        self.trusted = False  # classifying cuts
        self._verdicts: dict[Group, bool | None] = {}  # None: the GIN is unsure
        self._labelled: list[tuple[Group, bool]] = []
        self._seen = 0  # oracle answers read so far
        self._rng = random.Random(0)
        self._opt = torch.optim.Adam(self.model.parameters(), lr=self.adaptation.lr)

    def rules_out(self, group: Group) -> bool:
        """Whether to split ``group`` without asking: only while trusted to screen, and
        only on the GIN's confident word that it overflows."""
        self._learn()
        if not self.trusted_screening or group & (group - 1) == 0:
            return False
        if self.cost_model.known(group) is not None:
            return False  # asked before: its answer is free and final
        if group not in self._verdicts:
            self._predict([group])
        return self._verdicts[group] is False

    def fits(self, parts: list[Group]) -> list[bool]:
        """Untrusted to classify cuts: the oracle's word on each part. Trusted: the GIN's
        where it is sure, the oracle's where it is unsure or has answered already."""
        cm = self.cost_model
        self._learn()
        if not self.trusted:
            return self._oracle.fits(parts)
        verdicts, todo = self._verdicts, []
        for p in parts:
            if p & (p - 1) == 0 or verdicts.get(p) is not None:
                continue
            known = cm.known(p)
            if known is not None:
                verdicts[p] = known.valid
            elif p not in verdicts:
                todo.append(p)
        self._predict(list(dict.fromkeys(todo)))
        for p in dict.fromkeys(parts):
            if p & (p - 1) and verdicts[p] is None:  # unsure: ask; the answer is a label
                verdicts[p] = cm.cost(p).valid
                self.stats.unsure += 1
        return [p & (p - 1) == 0 or bool(verdicts[p]) for p in parts]

    def dram(self, parts: list[Group]) -> int:
        """Untrusted: the oracle's DRAM. Trusted: the parts' compulsory traffic, one estimate
        for every cut, asked or not, so that cuts compare like with like."""
        if not self.trusted:
            return self._oracle.dram(parts)
        return sum(self.cost_model.compulsory(p) for p in parts)

    # -- the GIN --------------------------------------------------------------------------
    @torch.no_grad()
    def _labels(self, groups: list[Group]) -> list[bool | None]:
        """The GIN's verdicts on ``groups`` (valid?; None where no class reaches the
        ``confidence``), in batches of :data:`BATCH`."""
        out: list[bool | None] = []
        sure = self.adaptation.confidence
        for start in range(0, len(groups), BATCH):
            chunk = groups[start : start + BATCH]
            t0 = time.perf_counter()
            x, edge_index, owner = group_batch(self.cost_model, self.table, chunk)
            with torch_threads():
                p_valid = torch.softmax(self.model(x, edge_index, owner), -1)[:, VALID]
            out += [(p >= 0.5) if max(p, 1 - p) >= sure else None for p in p_valid.tolist()]
            self.stats.seconds += time.perf_counter() - t0
            self.stats.batches += 1
        return out

    def _predict(self, groups: list[Group]) -> None:
        self._verdicts.update(zip(groups, self._labels(groups), strict=True))
        self.stats.predicted += len(groups)

    # -- learning from the oracle ---------------------------------------------------------
    def _learn(self) -> None:
        """Score, then fine-tune on, the oracle's answers since the last update, once there
        are ``every`` of them (single ops are not the GIN's job)."""
        cm, a = self.cost_model, self.adaptation
        if cm.stats.misses - self._seen < a.every:
            return
        fresh = [(g, c.valid) for g, c in cm.answered(self._seen) if g & (g - 1)]
        self._seen = cm.stats.misses
        if not fresh:
            return
        self._score([g for g, _ in fresh], [y for _, y in fresh])
        self._labelled += fresh
        self._fine_tune()
        self._verdicts.clear()  # verdicts of the model before this update

    def _score(self, groups: list[Group], truth: list[bool]) -> None:
        guess = self._labels(groups)
        pairs = list(zip(guess, truth, strict=True))
        overflow = [g for g, t in pairs if not t]
        fitting = [g for g, t in pairs if t]
        s, a = self.stats, self.adaptation
        s.last_accuracy = sum(g == t for g, t in pairs) / len(pairs)
        s.last_false_valid = sum(g is True for g in overflow) / len(overflow) if overflow else 0.0
        s.last_false_invalid = sum(g is False for g in fitting) / len(fitting) if fitting else 0.0
        self.trusted = bool(overflow) and s.last_false_valid <= a.max_false_valid
        self.trusted_screening = bool(fitting) and s.last_false_invalid <= a.max_false_invalid
        answers = self.cost_model.stats.misses
        if self.trusted and s.classifying_from < 0:
            s.classifying_from = answers
        if self.trusted_screening and s.screening_from < 0:
            s.screening_from = answers

    def _fine_tune(self) -> None:
        t0, a, data = time.perf_counter(), self.adaptation, self._labelled

        def draw() -> tuple[torch.Tensor, ...]:
            pick = [data[self._rng.randrange(len(data))] for _ in range(a.batch)]
            x, edge_index, owner = group_batch(self.cost_model, self.table, [g for g, _ in pick])
            return x, edge_index, owner, torch.tensor([int(v) for _, v in pick])

        fine_tune(self.model, self._opt, draw, a.steps)
        self.stats.updates += 1
        self.stats.train_seconds += time.perf_counter() - t0


def fine_tune(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    draw: Callable[[], tuple[torch.Tensor, ...]],
    steps: int,
) -> None:
    """``steps`` optimizer steps of cross-entropy on batches ``draw()`` returns as (x,
    edge_index, batch, y); the model is left in eval mode (the GIN has no dropout, so the
    draws are the only randomness)."""
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    with torch_threads():
        for _ in range(steps):
            x, edge_index, owner, y = draw()
            loss = loss_fn(model(x, edge_index, owner), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.train(False)
