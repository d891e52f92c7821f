"""One interface for the graph explainers: ``explain(sample) -> ranked edges``.

A *sample* is one fusion group as the GIN sees it: a ``torch_geometric.data.Data`` (or any
object) with ``x`` (node features, :mod:`fusionplan.data.features`) and ``edge_index``
(producer -> consumer, local node indices). An explanation ranks the sample's edges, most
responsible for the explained class first. For splitting (docs/design.md, "Splitting") the explained
class is "invalid".

The layout follows ``torch_geometric.explain``: a front class, :class:`Explainer`, owns the
classifier (switched to ``eval()`` once) and the bookkeeping shared by every method (the
prediction, the target class, the deterministic ranking of edge scores), and delegates to
an *algorithm* that scores edges:

* :class:`explainers.gnnexplainer.GNNExplainerAlgorithm` — PyG's GNNExplainer, a mask
  optimised per sample;
* :class:`explainers.pgexplainer.PGExplainerAlgorithm` — PyG's PGExplainer, a trained
  edge-mask MLP over GIN embeddings;
* :class:`explainers.rgexplainer.RGExplainerAlgorithm` — RG-Explainer, a trained seed
  locator and subgraph-growing policy (implemented here).

An algorithm returns one score per edge, higher = more responsible; the front sorts by score
and breaks ties by (source, destination) so that rankings are deterministic.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import MessagePassing

INVALID, VALID = 0, 1  # the GIN's classes (explainers.gin)
LocalEdge = tuple[int, int]


@dataclass(frozen=True)
class RankedEdges:
    """An explanation: the sample's edges, most responsible for ``target`` first.

    ``edges`` are local (source, destination) index pairs; ``scores`` are the algorithm's
    scores in the same order (higher = more responsible); ``predicted`` is the classifier's
    class for the whole sample and ``target`` the class that was explained.
    """

    edges: list[LocalEdge]
    scores: list[float]
    target: int
    predicted: int
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def top(self, k: int) -> list[LocalEdge]:
        return self.edges[:k]


class ExplainerAlgorithm(Protocol):
    """What the front delegates to: score every edge of one sample for one class."""

    name: str

    def edge_scores(
        self, model: torch.nn.Module, x: torch.Tensor, edge_index: torch.Tensor, target: int
    ) -> torch.Tensor:
        """One float per column of ``edge_index``; higher = more responsible for ``target``."""
        ...


class SupportsExplain(Protocol):
    """The one-method interface the rankers and tests rely on."""

    name: str

    def explain(self, sample: Any, target: int | None = None) -> RankedEdges: ...


def rank_edges(edge_index: torch.Tensor, scores: torch.Tensor) -> list[int]:
    """Edge positions by descending score, ties by ascending (source, destination)."""
    src = edge_index[0].tolist()
    dst = edge_index[1].tolist()
    vals = scores.detach().double().tolist()
    return sorted(range(len(vals)), key=lambda i: (-vals[i], src[i], dst[i]))


class Explainer:
    """Front: a trained classifier plus one explanation algorithm.

    ``explain(sample, target=None)`` explains ``target`` (default: the class the classifier
    predicts for the sample, as docs/design.md, "GNN pipeline", asks for PyG's phenomenon
    explanations).
    The classifier is switched to ``eval()`` and its parameters are frozen
    (``requires_grad=False``): explainers only read it, and backward passes get cheaper.
    """

    def __init__(self, model: torch.nn.Module, algorithm: ExplainerAlgorithm) -> None:
        model.eval()  # explainers read the trained model; dropout/batch-norm never train
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model
        self.algorithm = algorithm
        self.name = algorithm.name

    def predict(self, x: torch.Tensor, edge_index: torch.Tensor) -> int:
        with torch.no_grad():
            return int(self.model(x, edge_index).argmax(dim=-1)[0])

    def explain(self, sample: Any, target: int | None = None) -> RankedEdges:
        """Rank the edges of ``sample`` (needs ``x`` and ``edge_index``) for ``target``."""
        start = time.perf_counter()
        x, edge_index = sample_tensors(sample)
        with torch_threads():
            predicted = self.predict(x, edge_index)
            target = predicted if target is None else int(target)
            if edge_index.size(1) == 0:
                return RankedEdges([], [], target, predicted, time.perf_counter() - start)
            scores = self.algorithm.edge_scores(self.model, x, edge_index, target)
        order = rank_edges(edge_index, scores)
        pairs = edge_index.t().tolist()
        values = scores.detach().double().tolist()
        return RankedEdges(
            [(pairs[i][0], pairs[i][1]) for i in order],
            [values[i] for i in order],
            target,
            predicted,
            time.perf_counter() - start,
        )

    __call__ = explain


def model_config() -> dict[str, str]:
    """The PyG ``ModelConfig`` of the GIN: two raw logits per graph."""
    return {"mode": "multiclass_classification", "task_level": "graph", "return_type": "raw"}


THREADS_ENV = "FUSIONPLAN_TORCH_THREADS"


class torch_threads:
    """Context manager: torch's intra-op thread count for explaining and explainer training.

    Samples are tens of nodes, so extra threads only add synchronisation; on the shared
    2-core development machine under load, a PG/GIN training step on 2 threads took 0.44 s
    against 3.7 ms on one. Default 1; ``$FUSIONPLAN_TORCH_THREADS`` overrides.
    """

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or int(os.environ.get(THREADS_ENV, "0") or 0) or 1

    def __enter__(self) -> None:
        self._saved = torch.get_num_threads()
        if self._saved != self.threads:
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc: object) -> None:
        if torch.get_num_threads() != self._saved:
            torch.set_num_threads(self._saved)


class seeded:
    """Context manager: torch's CPU RNG seeded inside, restored afterwards, so explaining
    is deterministic and leaves the caller's random stream untouched."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self._state = torch.random.get_rng_state()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        torch.random.set_rng_state(self._state)


def sample_tensors(sample: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(x float32, edge_index int64 of shape (2, e)) of a sample."""
    x = torch.as_tensor(sample.x, dtype=torch.float32)
    edge_index = torch.as_tensor(sample.edge_index, dtype=torch.long).reshape(2, -1)
    return x, edge_index


def collate(samples: list[Any]):
    """One ``torch_geometric`` batch of ``samples`` (only ``x`` and ``edge_index`` kept)."""
    return Batch.from_data_list([Data(*sample_tensors(s)) for s in samples])


def predict_classes(model: torch.nn.Module, samples: list[Any], batch_size: int = 256) -> list[int]:
    """The classifier's class for every sample, in batches."""
    out: list[int] = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(samples), batch_size):
            b = collate(samples[i : i + batch_size])
            out.extend(model(b.x, b.edge_index, b.batch).argmax(dim=-1).tolist())
    return out


def clear_explain_state(model: torch.nn.Module) -> None:
    """Undo what ``torch_geometric.explain`` leaves on a model's message-passing layers.

    PyG's GNNExplainer installs its edge mask as a ``Parameter`` named ``_edge_mask`` on every
    ``MessagePassing`` layer; ``clear_masks`` then sets it to ``None`` but leaves the name
    registered as a parameter. Any later mask on that model (PGExplainer's, which must carry
    gradients back to its MLP) is then wrapped into a fresh leaf ``Parameter`` by
    ``set_masks`` -- silently cutting the MLP off from the classifier loss, so PGExplainer
    training diverges on a model GNNExplainer has touched. This removes the stale entry.
    """

    for module in model.modules():
        params = module._parameters
        if (
            isinstance(module, MessagePassing)
            and "_edge_mask" in params
            and params["_edge_mask"] is None
        ):
            del params["_edge_mask"]
            object.__setattr__(module, "_edge_mask", None)
