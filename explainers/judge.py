"""The GIN as Algorithm 1's judge: candidate cuts classified without asking the oracle.

The tree splitter (fusionplan/planning/split.py) probes several topological cuts per level;
with the cost model as judge each new part of each probed cut is an oracle query. Here the
GIN predicts whether each part fits, in batches (answers the cost model already has are
read for free), and a cut's DRAM is estimated by its parts' compulsory traffic (io and
weights: graph facts, no query). It also *screens*: a group it calls invalid is split
without asking whether it fits. Only groups it calls valid are asked about, and one it
wrongly called valid is split again, so every part kept fits; one it wrongly called invalid
is split needlessly, which can cost DRAM, never validity (docs/design.md, "Oracles").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch_geometric.data import Batch

from explainers.base import VALID, torch_threads
from explainers.ranking import group_sample
from fusionplan.data.features import node_feature_table
from fusionplan.ir.graph import Group

if TYPE_CHECKING:
    from accel_model.base import CostModel

BATCH = 64  # groups per GIN forward pass


@dataclass
class JudgeStats:
    known: int = 0  # parts answered from the cost model's memo (queried before)
    predicted: int = 0  # distinct parts the GIN classified
    batches: int = 0
    seconds: float = 0.0

    @property
    def ms_per_batch(self) -> float:
        return 1000 * self.seconds / self.batches if self.batches else 0.0


class GinJudge:
    """:class:`~fusionplan.planning.split.PartJudge` by the GIN of the cost model's scheme."""

    name = "gin"
    screens = True  # a group it calls invalid is split unasked

    def __init__(self, cost_model: CostModel, gin: torch.nn.Module) -> None:
        self.cost_model = cost_model
        self.gin = gin.eval()
        self.table = node_feature_table(cost_model.graph)
        self.stats = JudgeStats()
        self._verdicts: dict[Group, bool] = {}

    def fits(self, parts: list[Group]) -> list[bool]:
        cm, verdicts = self.cost_model, self._verdicts
        todo = []
        for p in parts:
            if p in verdicts or p & (p - 1) == 0:
                continue
            known = cm.known(p)
            if known is not None:
                self.stats.known += 1
                verdicts[p] = known.valid
            else:
                todo.append(p)
        self._predict(list(dict.fromkeys(todo)))
        return [p & (p - 1) == 0 or verdicts[p] for p in parts]

    def dram(self, parts: list[Group]) -> int:
        """The parts' compulsory traffic: one estimate for every cut, asked or not, so that
        cuts compare like with like (the cut moving the fewest boundary bytes wins)."""
        return sum(self.cost_model.compulsory(p) for p in parts)

    @torch.no_grad()
    def _predict(self, groups: list[Group]) -> None:
        """Classify ``groups`` in batches of :data:`BATCH` into the verdict memo."""
        for start in range(0, len(groups), BATCH):
            chunk = groups[start : start + BATCH]
            t0 = time.perf_counter()
            batch = Batch.from_data_list(
                [group_sample(self.cost_model, self.table, g) for g in chunk]
            )
            with torch_threads():
                labels = self.gin(batch.x, batch.edge_index, batch.batch).argmax(-1).tolist()
            self._verdicts.update((g, y == VALID) for g, y in zip(chunk, labels, strict=True))
            self.stats.seconds += time.perf_counter() - t0
            self.stats.batches += 1
            self.stats.predicted += len(chunk)
