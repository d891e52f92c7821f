"""A ``torch_geometric`` dataset over the on-disk fusion-group format (docs/dataset.md).

:class:`FusionGroupDataset` yields one :class:`torch_geometric.data.Data` per (group, buffer
size) sample of one scheme, ready for the GIN and the explainers::

    from explainers.dataset import FusionGroupDataset
    train = FusionGroupDataset(".cache-data/dataset-v1", "lbdf", split="train")
    data = train[0]   # Data(x, edge_index, y, buffer_bytes, f_beta, dram, model, group, ...)

Sample ``k`` of a split is group ``groups[k // B]`` at buffer index ``k % B`` (B buffer
sizes, 6 in the default dataset). Fields of each ``Data``:

* ``x`` (nodes, NUM_FEATURES) float32: node features at this buffer (``with_buffer``);
* ``edge_index`` (2, edges) int64: producer -> consumer, local node indices;
* ``y`` (1,) int64: 1 if the group is valid at this buffer (``F_beta < beta``), else 0;
* ``buffer_bytes``, ``f_beta``, ``dram`` (1,) int64: buffer size, F_beta and F_D in bytes;
* ``model`` (1,) int64: index into ``dataset.models``; ``group`` (1,) int64: index of the
  group in the loaded :class:`fusionplan.data.reader.GroupDataset` (its bitmask:
  ``dataset.group_mask(int(data.group))``); ``buffer_index`` (1,) int64;
* ``node_id`` (nodes,) int64: the nodes' topological labels in the model's op graph.

Batched by PyG's ``DataLoader`` these become per-graph vectors. Splits (by group, so the
buffer sizes of a group never straddle train and test): ``train``/``val``/``test``
(80/10/10 of the training networks' groups, :meth:`GroupDataset.split`), ``unseen`` (the
held-out networks) and ``all``.

This module lives in ``explainers`` (not ``data``) because it needs torch; the format and
its numpy reader are in :mod:`fusionplan.data.shards` and :mod:`fusionplan.data.reader`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch_geometric.data import Data, Dataset

from fusionplan.data.dataset import default_dataset_dir
from fusionplan.data.reader import GroupDataset, load_dataset
from fusionplan.ir.errors import ConfigError

SPLITS = ("train", "val", "test", "unseen", "all")


class FusionGroupDataset(Dataset):
    """(group, buffer) samples of one scheme from a generated dataset (see module doc).

    ``source`` is a dataset directory or an already loaded :class:`GroupDataset` (share one
    between splits to read the shards once). ``buffers_kb`` restricts the buffer sizes
    (default: all of the dataset's). ``split_seed`` picks the 80/10/10 permutation.
    """

    def __init__(
        self,
        source: str | os.PathLike | GroupDataset,
        scheme: str,
        split: str = "all",
        *,
        buffers_kb: Sequence[int] | None = None,
        split_seed: int = 0,
        transform: Callable[[Data], Data] | None = None,
    ) -> None:

        self.groups_data = source if isinstance(source, GroupDataset) else load_dataset(source)
        gd = self.groups_data
        scheme = scheme.lower()
        if scheme not in gd.labels:
            raise ConfigError(f"dataset has no labels for scheme '{scheme}' (has {gd.schemes})")
        if split not in SPLITS:
            raise ConfigError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
        self.scheme, self.split = scheme, split
        all_kb = [int(b) // 1024 for b in gd.buffers]
        wanted = all_kb if buffers_kb is None else [int(b) for b in buffers_kb]
        missing = [b for b in wanted if b not in all_kb]
        if missing:
            raise ConfigError(f"dataset has no labels at {missing} KB (has {all_kb})")
        self.buffer_columns = np.array([all_kb.index(b) for b in wanted], dtype=np.int64)
        if split == "all":
            self.groups = np.arange(len(gd), dtype=np.int64)
        else:
            self.groups = gd.split(split_seed)[split].astype(np.int64)
        self._labels = gd.labels[scheme]
        super().__init__(None, transform)

    # -- torch_geometric.data.Dataset --------------------------------------------------
    def len(self) -> int:
        return len(self.groups) * len(self.buffer_columns)

    def get(self, idx: int) -> Data:
        gd = self.groups_data
        nb = len(self.buffer_columns)
        g = int(self.groups[idx // nb])
        col = int(self.buffer_columns[idx % nb])
        x, ei = gd.features(g, int(gd.buffers[col]))
        a, b = gd.node_ptr[g], gd.node_ptr[g + 1]
        return Data(
            x=torch.from_numpy(x),
            edge_index=torch.from_numpy(np.ascontiguousarray(ei, dtype=np.int64)),
            y=torch.tensor([int(self._labels["valid"][g, col])], dtype=torch.long),
            buffer_bytes=torch.tensor([int(gd.buffers[col])], dtype=torch.long),
            f_beta=torch.tensor([int(self._labels["buffer"][g, col])], dtype=torch.long),
            dram=torch.tensor([int(self._labels["dram"][g, col])], dtype=torch.long),
            model=torch.tensor([int(gd.model_index[g])], dtype=torch.long),
            group=torch.tensor([g], dtype=torch.long),
            buffer_index=torch.tensor([col], dtype=torch.long),
            node_id=torch.from_numpy(gd.node_id[a:b].astype(np.int64)),
        )

    # -- conveniences ------------------------------------------------------------------
    @property
    def models(self) -> list[str]:
        return self.groups_data.models

    @property
    def labels(self) -> np.ndarray:
        """Every sample's label (0/1), in sample order, without building ``Data`` objects."""
        return (
            self._labels["valid"][np.ix_(self.groups, self.buffer_columns)]
            .reshape(-1)
            .astype(np.int64)
        )

    def sample_of(self, group: int, buffer_kb: int) -> int:
        """The sample index of (group index in the loaded dataset, buffer size in KB)."""
        pos = np.flatnonzero(self.groups == group)
        kb = [int(self.groups_data.buffers[c]) // 1024 for c in self.buffer_columns]
        if not len(pos) or buffer_kb not in kb:
            raise KeyError((group, buffer_kb))
        return int(pos[0]) * len(self.buffer_columns) + kb.index(buffer_kb)

    def group_mask(self, idx: int) -> int:
        """The op-graph bitmask of sample ``idx``'s group."""
        return self.groups_data.group_mask(int(self.groups[idx // len(self.buffer_columns)]))

    def model_name(self, idx: int) -> str:
        g = int(self.groups[idx // len(self.buffer_columns)])
        return self.groups_data.models[int(self.groups_data.model_index[g])]


def training_samples(
    scheme: str, dataset_dir: str | os.PathLike | None = None, split: str = "train"
) -> FusionGroupDataset:
    """The ``split`` samples of ``scheme`` from ``dataset_dir`` (default
    :func:`fusionplan.data.dataset.default_dataset_dir`): what the parametric explainers train
    on."""

    return FusionGroupDataset(dataset_dir or default_dataset_dir(), scheme, split)
