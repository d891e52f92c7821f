"""Counterexamples in words: which input rows and channels a failed compute needed but the
buffer did not hold (docs/cost-model.md, "Numeric replay")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from accel_model.numeric.buffer import Block, block_index
from accel_model.numeric.network import Chw, NumericGraph


def ranges(values: Iterable[int]) -> str:
    """Sorted indices as half-open ranges: ``0..3, 5..6``."""
    spans: list[list[int]] = []
    for x in values:
        if spans and x == spans[-1][1]:
            spans[-1][1] = int(x) + 1
        else:
            spans.append([int(x), int(x) + 1])
    return ", ".join(f"{a}..{b}" for a, b in spans) or "none"


def held_rows(array: np.ndarray) -> str:
    """Rows of a ``(C, H, W)`` array without NaN, as half-open ranges."""
    return ranges(np.nonzero(~np.isnan(array).any(axis=(0, 2)))[0])


def missing_inputs(
    net: NumericGraph, v: int, inputs: Mapping[int, Chw], out: int, block: Block
) -> str:
    """The input rows and channels op ``v`` needed for ``block`` of ``out`` among those
    NaN in ``inputs``: each missing row, then each missing channel of it, is poisoned alone
    (the other missing elements set to 0)."""
    graph = net.graph
    k = graph.nodes[v].outputs.index(out)
    filled = {t: np.nan_to_num(a, nan=0.0) for t, a in inputs.items()}

    def poisons(t: int, r: int, c: int | None) -> bool:
        probe = dict(filled)
        probe[t] = filled[t].copy()
        missing = np.isnan(inputs[t][:, r, :])
        if c is not None:
            missing[np.arange(missing.shape[0]) != c] = False
        probe[t][:, r, :][missing] = np.nan
        return bool(np.isnan(net.evaluate(v, probe)[k][block_index(block)]).any())

    found: list[str] = []
    for t, a in inputs.items():
        for r in np.nonzero(np.isnan(a).any(axis=(0, 2)))[0]:
            if len(found) < 3 and poisons(t, r, None):
                missing = np.nonzero(np.isnan(a[:, r, :]).any(axis=1))[0]
                chans = [c for c in missing if poisons(t, r, c)]
                found.append(
                    f"'{graph.tensors[t].name}' row {r} channels {ranges(chans)} (rows it "
                    f"holds: {held_rows(a)})"
                )
    if not found:
        return "elements the buffer does not hold"
    return f"{'; '.join(found)}, which the buffer does not hold"
