"""The on-chip buffer of a numeric replay: one store per schedule region.

A tensor region (:class:`accel_model.schedule.Region`) is addressed one of two ways:

* as a **ring** (:class:`RingRegion`, the fused schemes' regions, shaped by rows x channels
  x columns): element ``(c, r, w)`` of a tensor it holds lives in slot ``(c mod channels,
  r mod rows, w mod width)``, so a new row or channel slice overwrites the one the region
  held ``rows`` (``channels``) earlier, and an in-place op's rows overwrite its producer's;
* as a **pool** of ``elements`` cells (:class:`PoolRegion`, a single layer's regions, sized
  to the most data they hold at once): any element may take any free cell and frees it
  after its last read; the replay records when each element is stored and last read, and
  the most elements live at once must fit the region.

Each slot remembers which element it holds and whether that value is final or still partial
(a sum over input slices, or an input being assembled slice by slice), so a read of anything
else finds nothing (docs/cost-model.md, "Numeric replay").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from accel_model.replay import ReplayError
from accel_model.schedule import Range, Region

Block = tuple[Range, Range, Range]
"""Channels, rows, columns of a tensor: half-open ranges in its ``(C, H, W)`` layout."""


def block_size(block: Block) -> int:
    (c0, c1), (r0, r1), (w0, w1) = block
    return max(c1 - c0, 0) * max(r1 - r0, 0) * max(w1 - w0, 0)


def block_index(block: Block) -> tuple[slice, slice, slice]:
    """The numpy index of ``block`` in a whole ``(C, H, W)`` array."""
    return tuple(slice(lo, hi) for lo, hi in block)  # type: ignore[return-value]


@dataclass
class RingRegion:
    """The slots of one tensor region addressed as a ring (module docstring). ``tensor``,
    ``chan``, ``row`` and ``col`` tag each slot with the element it holds (tensor -1:
    empty); ``partial`` marks a value that is not final, and ``consumed`` the input lanes
    (channels x rows) a partial sum has taken in so far."""

    region: Region
    value: np.ndarray = field(init=False)
    tensor: np.ndarray = field(init=False)
    chan: np.ndarray = field(init=False)
    row: np.ndarray = field(init=False)
    col: np.ndarray = field(init=False)
    partial: np.ndarray = field(init=False)
    consumed: np.ndarray | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        r = self.region
        dims = (r.channels, r.rows, r.width)
        if min(dims) < 0 or r.elements != r.channels * r.rows * r.width:
            raise ReplayError(
                f"the region of tensor {r.key} has {r.elements} elements for "
                f"{r.channels} channels x {r.rows} rows x {r.width} columns"
            )
        self.value = np.zeros(dims)
        self.tensor = np.full(dims, -1, np.int64)
        self.chan = np.full(dims, -1, np.int64)
        self.row = np.full(dims, -1, np.int64)
        self.col = np.full(dims, -1, np.int64)
        self.partial = np.zeros(dims, bool)

    @property
    def holds(self) -> tuple[int, ...]:
        """The tensors this region holds: its key and the tensors written in place over it."""
        return (self.region.key, *self.region.aliases)

    def _slots(self, block: Block, *, check: bool = True):
        """Slot indices of every element of ``block`` and the element coordinates (open
        meshes); refuses a block larger than the region in any axis."""
        (c0, c1), (r0, r1), (w0, w1) = block
        shape = self.value.shape
        if check and (c1 - c0 > shape[0] or r1 - r0 > shape[1] or w1 - w0 > shape[2]):
            raise ReplayError(
                f"a block of {c1 - c0} channels x {r1 - r0} rows x {w1 - w0} columns does not "
                f"fit its region ({shape[0]} x {shape[1]} x {shape[2]})"
            )
        cs, rs, ws = np.arange(c0, c1), np.arange(r0, r1), np.arange(w0, w1)
        if 0 in shape:
            return None, np.ix_(cs, rs, ws)
        return np.ix_(cs % shape[0], rs % shape[1], ws % shape[2]), np.ix_(cs, rs, ws)

    def _tag(self, slots, coords, tensor: int) -> None:
        cs, rs, ws = coords
        self.tensor[slots] = tensor
        self.chan[slots] = cs
        self.row[slots] = rs
        self.col[slots] = ws

    def _holding(self, slots, coords, tensor: int) -> np.ndarray:
        cs, rs, ws = coords
        return (
            (self.tensor[slots] == tensor)
            & (self.chan[slots] == cs)
            & (self.row[slots] == rs)
            & (self.col[slots] == ws)
        )

    def store(self, tensor: int, block: Block, values: np.ndarray, *, partial=False) -> None:
        """Write ``values`` into ``block`` of ``tensor``: final, or ``partial``."""
        slots, coords = self._slots(block)
        self.value[slots] = values
        self._tag(slots, coords, tensor)
        self.partial[slots] = partial

    def accumulate(
        self,
        tensor: int,
        block: Block,
        values: np.ndarray,
        passed: np.ndarray,
        needed: np.ndarray,
        combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray]:
        """Fold one pass's partial results ``values`` into ``block``: ``passed`` (bool per
        input lane) is what the pass consumed, ``needed`` (block channels x block rows x
        lanes) what each output element reduces over. An element the pass does not feed
        (none of its lanes passed: another group of a grouped conv, rows outside its
        window) is left as it is; one fed while its slot holds no partial value of it starts
        afresh. Returns the running values and the mask of fed elements that have now
        consumed every lane they need; they stay partial until :meth:`finish`."""
        slots, coords = self._slots(block)
        lanes = passed.size
        if self.consumed is None or self.consumed.shape[-1] != lanes:
            if self.consumed is not None and self.partial.any():
                raise ReplayError("a region holds partial sums over two kinds of input lanes")
            self.consumed = np.zeros((*self.value.shape, lanes), bool)
        needed = needed[:, :, None, :]
        # an element that reduces over no lane (a class token's row, which a Concat makes
        # from its weights) is a constant of the op: every pass makes it whole
        fed = np.broadcast_to((needed & passed).any(axis=-1) | ~needed.any(axis=-1), values.shape)
        fresh = ~(self._holding(slots, coords, tensor) & self.partial[slots])
        consumed = np.where(fresh[..., None], False, self.consumed[slots])
        twice = consumed & passed & needed & fed[..., None]
        if twice.any():
            c, r, w, i = (int(a[0]) for a in np.nonzero(twice))
            raise ReplayError(
                f"element (channel {coords[0].flat[c]}, row {coords[1].flat[r]}, column "
                f"{coords[2].flat[w]}) consumes input lane {i} a second time"
            )
        total = np.where(fresh, values, combine(self.value[slots], values))
        consumed = consumed | passed
        done = fed & (consumed | ~needed).all(axis=-1)
        self.value[slots] = np.where(fed, total, self.value[slots])
        self.consumed[slots] = np.where(fed[..., None], consumed, self.consumed[slots])
        self.partial[slots] = np.where(fed, True, self.partial[slots])
        cs, rs, ws = (np.broadcast_to(a, values.shape) for a in coords)
        self.tensor[slots] = np.where(fed, tensor, self.tensor[slots])
        self.chan[slots] = np.where(fed, cs, self.chan[slots])
        self.row[slots] = np.where(fed, rs, self.row[slots])
        self.col[slots] = np.where(fed, ws, self.col[slots])
        return total, done

    def finish(self, tensor: int, block: Block, done: np.ndarray, values: np.ndarray) -> None:
        """Make the elements of ``block`` marked ``done`` final, with ``values``."""
        slots, _ = self._slots(block)
        self.value[slots] = np.where(done, values, self.value[slots])
        self.partial[slots] = self.partial[slots] & ~done

    def resident(self, tensor: int, block: Block, *, partial: bool = False) -> np.ndarray:
        """Mask over ``block``: the elements of ``tensor`` held here, final (or partial)."""
        slots, coords = self._slots(block, check=False)
        if slots is None:
            return np.zeros(tuple(hi - lo for lo, hi in block), bool)
        state = self.partial[slots] if partial else ~self.partial[slots]
        return self._holding(slots, coords, tensor) & state

    def read(self, tensor: int, block: Block) -> np.ndarray:
        """The values in the slots of ``block`` (whatever they hold: check first)."""
        slots, _ = self._slots(block)
        return self.value[slots].copy()

    def fill(self, tensor: int, out: np.ndarray) -> None:
        """Copy every final element of ``tensor`` held here into ``out`` (its whole
        ``(C, H, W)`` array)."""
        mask = (self.tensor == tensor) & ~self.partial
        if mask.any():
            out[self.chan[mask], self.row[mask], self.col[mask]] = self.value[mask]


class PoolRegion:
    """A region addressed as a pool (module docstring): each tensor it holds keeps its
    elements in a ring the size of the whole tensor (so nothing collides), an element an
    in-place op overwrites is dropped, and every element's life, from the action that
    stores it to the last that reads it, is recorded for :meth:`peak`. The run sets
    ``clock`` to the index of the action it executes."""

    def __init__(self, region: Region, shapes: dict[int, tuple[int, int, int]]) -> None:
        self.region = region
        self.clock = 0
        self.cells = {
            t: RingRegion(Region("tensor", t, h, c, w, c * h * w))
            for t, (c, h, w) in shapes.items()
        }
        self.born = {t: np.full(shape, -1) for t, shape in shapes.items()}
        self.last = {t: np.full(shape, -1) for t, shape in shapes.items()}
        self.lives: list[tuple[np.ndarray, np.ndarray]] = []

    @property
    def holds(self) -> tuple[int, ...]:
        return (self.region.key, *self.region.aliases)

    def _born(self, tensor: int, block: Block, mask: np.ndarray | None = None) -> None:
        """Elements of ``block`` (where ``mask``) are stored now: end their previous lives,
        start new ones; an in-place write ends the lives of the elements it overwrites."""
        index = block_index(block)
        new = np.ones(self.born[tensor][index].shape, bool) if mask is None else mask
        self._end(tensor, index, new)
        self.born[tensor][index][new] = self.clock
        self.last[tensor][index][new] = self.clock
        for other, cells in self.cells.items():
            if other != tensor and cells.value.shape == self.cells[tensor].value.shape:
                self._end(other, index, new)
                cells.tensor[index][new] = -1

    def _end(self, tensor: int, index, where: np.ndarray) -> None:
        """End the lives of ``tensor``'s elements at ``index`` (where ``where``) because
        their cells take a new value now: a value read by this very action (an input
        overwritten in place, an accumulator) hands its cell over, so its life ends
        before now."""
        born, last = self.born[tensor][index], self.last[tensor][index]
        ending = where & (born >= 0)
        end = np.minimum(np.maximum(last, born), self.clock - 1)
        kept = ending & (end >= born)
        self.lives.append((born[kept], end[kept]))
        born[ending] = -1

    def touch(self, tensor: int, mask: np.ndarray) -> None:
        """The elements of ``tensor`` where ``mask`` (its whole shape) are read now."""
        held = self.cells[tensor].tensor == tensor
        self.last[tensor][mask & held] = self.clock

    def store(self, tensor: int, block: Block, values: np.ndarray, *, partial=False) -> None:
        self._born(tensor, block)
        self.cells[tensor].store(tensor, block, values, partial=partial)

    def accumulate(self, tensor: int, block: Block, values, passed, needed, combine):
        index = block_index(block)
        cells = self.cells[tensor]
        ongoing = cells.resident(tensor, block, partial=True)
        total, done = cells.accumulate(tensor, block, values, passed, needed, combine)
        fed = (cells.tensor[index] == tensor) & cells.partial[index]
        self._born(tensor, block, fed & ~ongoing)
        self.last[tensor][index][fed] = self.clock
        return total, done

    def finish(self, tensor: int, block: Block, done: np.ndarray, values: np.ndarray) -> None:
        self.cells[tensor].finish(tensor, block, done, values)

    def resident(self, tensor: int, block: Block, *, partial: bool = False) -> np.ndarray:
        return self.cells[tensor].resident(tensor, block, partial=partial)

    def read(self, tensor: int, block: Block) -> np.ndarray:
        return self.cells[tensor].read(tensor, block)

    def fill(self, tensor: int, out: np.ndarray) -> None:
        self.cells[tensor].fill(tensor, out)

    def peak(self, actions: int) -> tuple[int, int]:
        """The most elements live at once and the first action where that happens."""
        starts = [s for s, _ in self.lives] + [b[b >= 0] for b in self.born.values()]
        ends = [e for _, e in self.lives] + [
            np.maximum(self.last[t], b)[b >= 0] for t, b in self.born.items()
        ]
        timeline = np.zeros(actions + 2, np.int64)
        np.add.at(timeline, np.concatenate(starts).astype(np.int64), 1)
        np.add.at(timeline, np.concatenate(ends).astype(np.int64) + 1, -1)
        live = np.cumsum(timeline)
        return int(live.max()), int(live.argmax())
