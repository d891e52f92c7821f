"""Training the parametric explainers: ``fusionplan train pg|rg --scheme ...``.

Both train against the scheme's trained GIN (loaded from the weights directory unless a
model is passed) on samples of the fusion-group dataset, and save their weights with
:func:`explainers.checkpoints.save_checkpoint` (``pg-<scheme>.pt`` / ``rg-<scheme>.pt`` plus a
manifest entry recording the dataset, seed, sample count, losses and the fingerprint of the
GIN they read, so a later GIN retrain makes them refuse to load).

``dataset`` is a sequence of samples (objects with ``x`` and ``edge_index``, e.g. a
:class:`explainers.dataset.FusionGroupDataset`), a dataset directory, or ``None`` for the
training split of the default dataset directory.

Only samples the GIN predicts *invalid* are used (the splitter explains nothing else; see
:mod:`explainers.pgexplainer`); at most ``max_samples`` of them, drawn with the seed.
Training is deterministic for a seed (torch's RNG is seeded inside and restored afterwards).

``progress``, if given, is called as ``progress(done, total)`` after every epoch.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from explainers.base import INVALID, predict_classes, seeded, torch_threads
from explainers.checkpoints import save_checkpoint
from explainers.dataset import training_samples
from explainers.gin import gin_fingerprint, load_gin_model
from explainers.pgexplainer import PGExplainerAlgorithm
from explainers.rgexplainer import RGConfig, RGExplainerAlgorithm, embedding_dim
from explainers.splitters import clear_cache
from fusionplan.ir.errors import ConfigError

Progress = Callable[[int, int], None]


@dataclass
class TrainedExplainer:
    """What a training run produced: the checkpoint path and its manifest entry."""

    kind: str
    scheme: str
    path: Path
    meta: dict[str, Any] = field(default_factory=dict)
    algorithm: Any = None


def _default_dataset(scheme: str, directory: Any = None) -> tuple[Sequence[Any], str]:
    """The training split of the project's fusion-group dataset for ``scheme``
    (:func:`explainers.dataset.training_samples`; its loader names the command that
    generates the dataset when there is none)."""

    ds = training_samples(scheme, directory)
    sha = getattr(getattr(ds, "groups_data", None), "content_sha256", "")
    return ds, f"train split of the fusion-group dataset {sha}".strip()


def _prepare(
    scheme: str,
    dataset: Sequence[Any] | str | os.PathLike | None,
    model: torch.nn.Module | None,
    max_samples: int | None,
    seed: int,
):
    """(gin, invalid-predicted samples, dataset description, samples examined).

    Samples are visited in a seeded random order and classified in chunks until
    ``max_samples`` invalid-predicted ones are found (or the dataset is exhausted), so a
    large dataset is not materialised whole.
    """

    if model is None:
        model = load_gin_model(scheme)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if dataset is None or isinstance(dataset, str | os.PathLike):
        dataset, described = _default_dataset(scheme, dataset)
    else:
        described = getattr(dataset, "description", None) or type(dataset).__name__
    order = list(range(len(dataset)))
    random.Random(seed).shuffle(order)
    limit = max_samples if max_samples is not None else len(order)
    chosen: list[Any] = []
    seen = 0
    for start in range(0, len(order), 512):
        chunk = [dataset[i] for i in order[start : start + 512]]
        seen += len(chunk)
        predicted = predict_classes(model, chunk)
        chosen.extend(s for s, c in zip(chunk, predicted, strict=True) if c == INVALID)
        if len(chosen) >= limit:
            break
    if not chosen:
        raise ConfigError(
            f"none of the {seen} samples is predicted invalid by the {scheme} GIN; "
            "nothing to explain"
        )
    return model, chosen[:limit], described, seen


def _run_meta(described: str, seen: int, samples: Sequence[Any], seed: int, batch_size: int
              ) -> dict[str, Any]:  # fmt: skip
    """Manifest fields every explainer training run records about its data."""
    return {
        "dataset": described,
        "dataset_samples_examined": seen,
        "samples": len(samples),
        "sample_rule": "GIN-predicted invalid",
        "seed": seed,
        "batch_size": batch_size,
    }


def train_pg(
    scheme: str,
    dataset: Sequence[Any] | str | os.PathLike | None = None,
    *,
    epochs: int = 25,
    seed: int = 0,
    progress: Progress | None = None,
    max_samples: int | None = 2000,
    batch_size: int = 8,
    lr: float = 0.003,
    coeffs: dict[str, Any] | None = None,
    model: torch.nn.Module | None = None,
    directory: Path | None = None,
) -> TrainedExplainer:
    """Train PyG's PGExplainer for ``epochs`` epochs and save ``pg-<scheme>.pt``
    (``coeffs`` override :data:`explainers.pgexplainer.DEFAULT_COEFFS`)."""

    start = time.perf_counter()
    with seeded(seed), torch_threads():
        gin, samples, described, seen = _prepare(scheme, dataset, model, max_samples, seed)
        algo = PGExplainerAlgorithm(epochs=epochs, lr=lr, coeffs=coeffs)
        history = algo.fit(gin, samples, batch_size=batch_size, seed=seed, progress=progress)
    meta = {
        **_run_meta(described, seen, samples, seed, batch_size),
        "epochs": epochs,
        "lr": lr,
        "coeffs": algo.pg.coeffs,
        "loss_first": round(history[0], 5),
        "loss_last": round(history[-1], 5),
        "gin_fingerprint": gin_fingerprint(gin),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    path = save_checkpoint(algo.state_dict(), "pg", scheme, meta, directory)
    _forget_cached()
    return TrainedExplainer("pg", scheme, path, meta, algo)


def train_rg(
    scheme: str,
    dataset: Sequence[Any] | str | os.PathLike | None = None,
    *,
    pretrain_epochs: int = 10,
    epochs: int = 10,
    seed: int = 0,
    progress: Progress | None = None,
    max_samples: int | None = 1000,
    batch_size: int = 16,
    config: Any = None,
    model: torch.nn.Module | None = None,
    directory: Path | None = None,
) -> TrainedExplainer:
    """Pre-train (``pretrain_epochs``, imitation of a greedy classifier-guided oracle) and
    then train by REINFORCE (``epochs``) the RG-Explainer; save ``rg-<scheme>.pt``."""

    start = time.perf_counter()
    config = config or RGConfig()
    with seeded(seed), torch_threads():
        gin, samples, described, seen = _prepare(scheme, dataset, model, max_samples, seed)
        algo = RGExplainerAlgorithm(embedding_dim(gin), config)
        history = algo.fit(
            gin,
            samples,
            pretrain_epochs=pretrain_epochs,
            epochs=epochs,
            batch_size=batch_size,
            seed=seed,
            progress=progress,
        )
    meta = {
        **_run_meta(described, seen, samples, seed, batch_size),
        "pretrain_epochs": pretrain_epochs,
        "epochs": epochs,
        "config": asdict(config),
        "pretrain_loss": [round(v, 5) for v in history["pretrain_loss"]],
        "reward": [round(v, 5) for v in history["reward"]],
        "gin_fingerprint": gin_fingerprint(gin),
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    path = save_checkpoint(algo.state_dict(), "rg", scheme, meta, directory)
    _forget_cached()
    return TrainedExplainer("rg", scheme, path, meta, algo)


def _forget_cached() -> None:
    clear_cache()
