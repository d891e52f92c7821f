"""How an ONNX tensor's array maps to the cost models' normalised ``(C, H, W)`` view.

The importer normalises every tensor to ``(C, H, W)`` around its row axis
(docs/cost-model.md, "Units and scope"; :func:`fusionplan.ir.shapes.chw`). That view is a
transpose of the ONNX array followed by a reshape, so a schedule's rows, channels and columns
address ONNX elements exactly; :class:`Layout` performs the two conversions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusionplan.ir.shapes import Dims, chw


@dataclass(frozen=True)
class Layout:
    """``dims``: the ONNX shape (batch 1 included); ``perm``: the axis order that puts the
    channel axes first, then the row axis, then the column axes; ``shape``: ``(C, H, W)``."""

    dims: Dims
    perm: tuple[int, ...]
    shape: tuple[int, int, int]

    @staticmethod
    def of(dims: Dims, row: int | None) -> Layout:
        """The layout :func:`chw` gives ``dims`` with row axis ``row``."""
        rank = len(dims)
        perm = tuple(range(rank))
        features_last = row == 0 or (row == 1 and dims[0] == 1)
        if rank > 1 and row is not None and row != rank - 1 and features_last:
            # tokens and channels-last: the features (last axis) are the channels
            perm = (*range(row), rank - 1, row, *range(row + 1, rank - 1))
        layout = Layout(tuple(dims), perm, chw(dims, row))
        if math.prod(layout.shape) != math.prod(dims):
            raise ValueError(f"layout {layout} does not cover dims {dims}")
        return layout

    def to_chw(self, array: np.ndarray) -> np.ndarray:
        """The ``(C, H, W)`` view of an ONNX-shaped array (a copy)."""
        return np.ascontiguousarray(np.transpose(array.reshape(self.dims), self.perm)).reshape(
            self.shape
        )

    def to_onnx(self, array: np.ndarray) -> np.ndarray:
        """The ONNX-shaped array of a ``(C, H, W)`` one (a copy)."""
        permuted = tuple(self.dims[a] for a in self.perm)
        return np.ascontiguousarray(np.transpose(array.reshape(permuted), np.argsort(self.perm)))
