"""Figure 3: the share of randomly sampled fusion groups that fit, per buffer size.

The groups are a fusion-group dataset (:mod:`fusionplan.data.dataset`) drawn over the figure's
models, so the figure says how often a random search's groups are valid -- why invalid groups, and
the splitter that repairs them, dominate the search at small buffers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fusionplan.data.dataset import generate_dataset
from fusionplan.data.reader import load_dataset
from fusionplan.engines import Engine, LocalEngine


@dataclass(frozen=True)
class ValidShare:
    model: str
    scheme: str
    buffers_kb: tuple[int, ...]
    share: tuple[float, ...]  # fraction of the model's groups valid at each buffer
    groups: int


def dataset_valid_share(path: str | os.PathLike) -> list[ValidShare]:
    """Valid share per model, scheme and buffer of the dataset at ``path``."""
    ds = load_dataset(path)
    kb = tuple(int(b) // 1024 for b in ds.buffers)
    rows = []
    for m, name in enumerate(ds.models):
        idx = np.flatnonzero(ds.model_index == m)
        if not len(idx):
            continue
        for scheme in ds.schemes:
            valid = ds.labels[scheme]["valid"][idx].astype(bool)
            rows.append(ValidShare(name, scheme, kb, tuple(valid.mean(axis=0).tolist()), len(idx)))
    return rows


def valid_share(
    models: Sequence[str],
    directory: str | os.PathLike,
    *,
    groups: int,
    buffers_kb: Sequence[int],
    seed: int = 0,
    engine: Engine | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[ValidShare]:
    """Generate (or resume) a dataset of ``groups`` groups over ``models`` in ``directory``
    and return its valid shares."""

    generate_dataset(
        Path(directory),
        seed=seed,
        groups=groups,
        unseen_groups=0,
        models=list(models),
        unseen_models=[],
        buffers_kb=list(buffers_kb),
        profile="paper",  # a paper figure: the paper's BRR
        engine=engine or LocalEngine(1),
        progress=progress,
    )
    return dataset_valid_share(directory)
