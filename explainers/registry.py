"""The explainer registry: name -> :class:`ExplainerKind` (docs/design.md, "Plug points").

Registering an explainer also registers the splitter of the same name (the paper's
Algorithm 1 over that explainer), so ``--splitter NAME`` works at once. Entries are lazy
(``"module:attr"``): the explainer modules need torch, which loads only when one is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusionplan.ir.registry import Registry
from fusionplan.planning.split import SPLITTERS, Splitter

if TYPE_CHECKING:
    from accel_model.base import CostModel


@dataclass(frozen=True)
class ExplainerKind:
    """An explainer plug-in: how to build its algorithm, and how to train it if it learns.

    ``build(scheme, gin, seed)`` returns an algorithm for :class:`explainers.base.Explainer`;
    ``train(scheme, dataset, **options)`` (None for an explainer with nothing to train)
    writes its checkpoint and returns a :class:`explainers.train_explainers.TrainedExplainer`.
    """

    name: str
    build: Callable[[str, Any, int], Any]
    train: Callable[..., Any] | None = None

    @property
    def trained(self) -> bool:
        return self.train is not None


EXPLAINERS: Registry[ExplainerKind] = Registry("explainer")


@dataclass(frozen=True)
class _ExplainerSplitterFactory:
    """``factory(cost_model, seed)`` for the explainer-guided splitter of one explainer."""

    kind: str
    gin_judge: bool = False

    def __call__(self, cost_model: CostModel, seed: int) -> Splitter:
        # explainers.splitters imports torch: load it only when such a splitter is made
        splitters = importlib.import_module("explainers.splitters")
        return splitters.make_explainer_splitter(
            self.kind, cost_model, seed, gin_judge=self.gin_judge
        )


def register_explainer(name: str, target: str, *, help: str) -> None:
    """Register the :class:`ExplainerKind` at ``"module:attr"`` and its two splitters:
    ``name`` (Algorithm 1 over its edges) and ``gin-name`` (the same, with a GIN that learns
    from the oracle's answers judging the cuts it probes, once trusted: explainers/judge.py)."""
    EXPLAINERS.register_lazy(name, target, help=help)
    SPLITTERS.register(name, _ExplainerSplitterFactory(name), help=f"Algorithm 1 over {help}")
    SPLITTERS.register(
        f"gin-{name}",
        _ExplainerSplitterFactory(name, gin_judge=True),
        help=f"Algorithm 1 over {help}, cuts judged by a GIN that learns from the oracle",
    )
