"""The numpy reader of fusion-group datasets: the manifest check and :class:`GroupDataset`.

No torch here; the ``torch_geometric`` dataset class over it is
:class:`explainers.dataset.FusionGroupDataset`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fusionplan.data.features import STORED_VERSION, with_buffer, with_structure
from fusionplan.data.shards import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    DatasetError,
    _regenerate_hint,
    file_sha256,
    read_npz,
)


def _read_manifest_raw(root: Path) -> dict | None:
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path} is not valid JSON ({exc.msg}); {_regenerate_hint(root)}"
        ) from None


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a complete dataset of this format version; DatasetError otherwise."""
    root = Path(path)
    m = _read_manifest_raw(root)
    if m is None:
        raise DatasetError(f"no dataset at {root} (no {MANIFEST}); {_regenerate_hint(root)}")
    if m.get("format") != FORMAT_NAME:
        raise DatasetError(f"{root} is not a fusionplan group dataset")
    if m.get("format_version") != FORMAT_VERSION:
        raise DatasetError(
            f"{root} has format version {m.get('format_version')}, this fusionplan reads "
            f"{FORMAT_VERSION}; {_regenerate_hint(root)}"
        )
    if not m.get("complete"):
        raise DatasetError(f"dataset at {root} is incomplete; {_regenerate_hint(root)}")
    return m


@dataclass
class GroupDataset:
    """A loaded dataset: every group of every shard, concatenated in manifest order.

    Group ``i`` has nodes ``x[node_ptr[i]:node_ptr[i+1]]`` (the graph columns,
    ``features.GRAPH_NAMES``: the stored ones and those derived from the group's edges),
    local edges ``edge_index[:, edge_ptr[i]:edge_ptr[i+1]]``, model
    ``models[model_index[i]]`` and bitmask ``int(mask[i], 16)``. ``labels[scheme]`` holds
    ``buffer`` (F_beta bytes), ``dram`` (F_D bytes) and ``valid`` arrays of shape
    (groups, len(buffers)).
    """

    root: Path
    manifest: dict[str, Any]
    models: list[str]
    roles: list[str]
    model_index: np.ndarray  # (G,) int32
    mask: np.ndarray  # (G,) str hex
    node_ptr: np.ndarray  # (G+1,) int64
    edge_ptr: np.ndarray  # (G+1,) int64
    x: np.ndarray  # (N, NUM_GRAPH) float32
    node_id: np.ndarray  # (N,) int32
    edge_index: np.ndarray  # (2, E) int64, local to each group
    buffers: np.ndarray  # (B,) int64 bytes
    labels: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.mask)

    @property
    def schemes(self) -> list[str]:
        return list(self.labels)

    @property
    def bytes_per_element(self) -> int:
        return int(self.manifest.get("bytes_per_element", 1))

    @property
    def content_sha256(self) -> str:
        return self.manifest["content_sha256"]

    @cached_property
    def role_of_group(self) -> np.ndarray:
        return np.array(self.roles, dtype=np.str_)[self.model_index]

    def group_mask(self, i: int) -> int:
        return int(self.mask[i], 16)

    def group_arrays(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(graph columns, local edge_index) of group ``i``."""
        a, b = self.node_ptr[i], self.node_ptr[i + 1]
        c, d = self.edge_ptr[i], self.edge_ptr[i + 1]
        return self.x[a:b], self.edge_index[:, c:d]

    def features(self, i: int, buffer_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, edge_index) of group ``i`` exactly as ``model_input(*group_features(...),
        buffer_bytes, bytes_per_element)`` would give them (the dataset's bytes per element)."""
        x, ei = self.group_arrays(i)
        return with_buffer(x, int(buffer_bytes), self.bytes_per_element), ei

    def indices(self, role: str) -> np.ndarray:
        """Group indices of models with ``role`` ("train" or "unseen")."""
        return np.flatnonzero(self.role_of_group == role)

    def split(self, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
              hold_out: Sequence[str] = ()) -> dict[str, np.ndarray]:  # fmt: skip
        """Deterministic train/val/test split **by group** of the training models' groups
        (all buffer sizes of a group land in the same part), plus ``unseen``: every group
        of the held-out models. Sizes are floor(0.8 G), floor(0.1 G), the rest.

        ``hold_out`` names training models to treat as held out (their groups join
        ``unseen``): one dataset serves a model trained on every family and the models
        that leave one family out to measure generalisation to it."""
        if isinstance(hold_out, str):
            hold_out = [hold_out]
        trained = [m for m, r in zip(self.models, self.roles, strict=True) if r == "train"]
        unknown = sorted(set(hold_out) - set(trained))
        if unknown:
            raise DatasetError(
                f"cannot hold out {', '.join(unknown)}: not a training model of the dataset "
                f"at {self.root} ({', '.join(trained)})"
            )
        out = np.isin(self.model_index, [self.models.index(m) for m in hold_out])
        idx = np.flatnonzero((self.role_of_group == "train") & ~out)
        perm = idx[np.random.default_rng(seed).permutation(len(idx))]
        n_train = math.floor(fractions[0] * len(idx))
        n_val = math.floor(fractions[1] * len(idx))
        return {
            "train": np.sort(perm[:n_train]),
            "val": np.sort(perm[n_train : n_train + n_val]),
            "test": np.sort(perm[n_train + n_val :]),
            "unseen": np.flatnonzero((self.role_of_group == "unseen") | out),
        }


def load_dataset(path: str | os.PathLike, *, verify: bool = True) -> GroupDataset:
    """Read a complete dataset; with ``verify``, check every shard's sha256 first."""
    root = Path(path)
    m = read_manifest(root)
    if m.get("feature_version") != STORED_VERSION:
        raise DatasetError(
            f"dataset {root} stores features v{m.get('feature_version')}, this fusionplan "
            f"reads v{STORED_VERSION}; {_regenerate_hint(root)}"
        )
    models = [mi["name"] for mi in m["models"]]
    roles = [mi["role"] for mi in m["models"]]
    schemes = m["schemes"]
    parts: dict[str, list[np.ndarray]] = {}
    model_index: list[np.ndarray] = []
    node_off = edge_off = 0
    for s in m["shards"]:
        path_s = root / s["file"]
        if not path_s.is_file():
            raise DatasetError(f"shard {path_s} is missing; {_regenerate_hint(root)}")
        if verify and file_sha256(path_s) != s["sha256"]:
            raise DatasetError(
                f"shard {path_s} does not match its sha256; {_regenerate_hint(root)}"
            )
        try:
            a = read_npz(path_s)
        except Exception as exc:
            raise DatasetError(
                f"cannot read shard {path_s} ({exc}); {_regenerate_hint(root)}"
            ) from None
        g = len(a["mask"])
        model_index.append(np.full(g, models.index(s["model"]), np.int32))
        parts.setdefault("mask", []).append(a["mask"])
        parts.setdefault("node_ptr", []).append(a["node_ptr"][:-1] + node_off)
        parts.setdefault("edge_ptr", []).append(a["edge_ptr"][:-1] + edge_off)
        node_off += int(a["node_ptr"][-1])
        edge_off += int(a["edge_ptr"][-1])
        for k in ("x", "node_id"):
            parts.setdefault(k, []).append(a[k])
        parts.setdefault("edge_index", []).append(a["edge_index"].astype(np.int64))
        for sc in schemes:
            for k in ("buffer", "dram", "valid"):
                parts.setdefault(f"{sc}_{k}", []).append(a[f"{sc}_{k}"])
    nb = len(m["buffers_kb"])
    width = len(m["feature_names"])

    def cat(k: str, empty: np.ndarray, axis: int = 0) -> np.ndarray:
        return np.concatenate(parts[k], axis=axis) if parts.get(k) else empty

    node_ptr = np.append(cat("node_ptr", np.zeros(0, np.int64)), node_off).astype(np.int64)
    edge_ptr = np.append(cat("edge_ptr", np.zeros(0, np.int64)), edge_off).astype(np.int64)
    edge_index = cat("edge_index", np.zeros((2, 0), np.int64), axis=1)
    # the structure columns once for every group: one disjoint graph of global node indices
    owner_offset = np.repeat(node_ptr[:-1], np.diff(edge_ptr))
    x = with_structure(cat("x", np.zeros((0, width), np.float32)), edge_index + owner_offset)
    return GroupDataset(
        root=root,
        manifest=m,
        models=models,
        roles=roles,
        model_index=np.concatenate(model_index) if model_index else np.zeros(0, np.int32),
        mask=cat("mask", np.zeros(0, "<U1")),
        node_ptr=node_ptr,
        edge_ptr=edge_ptr,
        x=x,
        node_id=cat("node_id", np.zeros(0, np.int32)),
        edge_index=edge_index,
        buffers=np.array([kb * 1024 for kb in m["buffers_kb"]], np.int64),
        labels={
            sc: {k: cat(f"{sc}_{k}", np.zeros((0, nb))) for k in ("buffer", "dram", "valid")}
            for sc in schemes
        },
    )  # fmt: skip
