"""Schedules as data: the loop order a cost model priced for one group, step by step
(docs/cost-model.md, "Schedules and replay").

A cost figure is a claim that a schedule exists; a :class:`Schedule` is that schedule written
out, so that :mod:`accel_model.replay` can execute it against the buffer and count its DRAM
bytes without the closed-form formulas. Coordinates are the cost models' normalised
``(C, H, W)`` (docs/cost-model.md, "Units and scope"): *rows* index H, *channels* C and
*columns* W; every range is half-open ``(start, stop)``; sizes are elements (times
``bytes_per_element`` for bytes).

The model, outermost first:

* :class:`Schedule`: one group under one cost model. ``order`` names the loop order
  (``brr-resident``, ``brr-streamed``, ``lbdf``, ``layer:<order>``, ``epilogue:<order>``,
  ``free``); ``regions`` is what the group allocates in the buffer, for its whole run;
  ``steps`` run in order.
* :class:`Region`: one allocation. A tensor region holds rows x channels x columns of the
  tensor ``key`` (a ring: slots are reused as rows die) and, in ``aliases``, the tensors
  written in place over it; a weights region holds op ``key``'s weights.
* :class:`Step`: one tile pass of the loop order (BRR: one sink row when weights are resident,
  one tile of ``h_tile`` sink rows when they stream). ``actions`` run in order and mix
  :class:`Compute` and :class:`Transfer`: a tensor read must come before the compute that
  needs it, a write after the compute that finished its rows.
* :class:`Compute`: op ``op`` produces output ``rows`` x ``channels`` x ``cols``. With
  ``in_channels`` set it is a *partial* pass: it consumes only those channels of each input
  it reduces over (a channel-mixing op accumulating over input-channel slices, a barrier
  assembling its input slice by slice) and its outputs are complete once every input
  channel has been consumed.
* :class:`Transfer`: one DRAM transfer: ``read`` or ``write`` of a block of tensor
  ``tensor`` (``op`` = -1), or a ``read`` of op ``op``'s weights (``tensor`` = -1; streamed
  weights pass to the PEs and take no region, resident ones fill their weights region).

``dram`` is the traffic the schedule claims, per :class:`TrafficKey`; ``peak`` the elements
it allocates at once. :func:`build_schedule` turns a cost model's decision into a schedule
through :data:`SCHEDULE_BUILDERS` (one builder per scheme, plus ``layer`` for an op run on its
own and a layer with an epilogue); :meth:`Schedule.compact` is the plan file's summary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from fusionplan.ir.errors import FusionPlanError
from fusionplan.ir.graph import Group, OpGraph, bits
from fusionplan.ir.registry import Registry

if TYPE_CHECKING:
    from accel_model.base import CostModel

Range = tuple[int, int]
"""A half-open index range ``(start, stop)`` over rows, channels or columns."""

Direction = Literal["read", "write"]


class ScheduleError(FusionPlanError):
    """A group has no schedule of this kind (the builder names what it cannot express)."""


class Compute(NamedTuple):
    """Op ``op`` computes its output ``rows`` x ``channels`` x ``cols``.

    ``in_channels`` None: a complete computation (every input channel the op needs is read
    now). A range: a partial pass over those channels of the inputs it reduces over; the
    output stays a partial sum until passes over every input channel have run.
    ``cols`` None: the whole width. ``in_rows`` a range: a partial pass over those rows of
    its inputs only (a reduction over the row axis streaming its input row by row, LBDF);
    the output is complete once every input row has been consumed.
    """

    op: int
    rows: Range
    channels: Range
    in_channels: Range | None = None
    cols: Range | None = None
    in_rows: Range | None = None


class Transfer(NamedTuple):
    """One DRAM transfer of ``elements`` elements.

    A tensor block (``tensor`` >= 0, ``op`` -1): ``rows`` x ``channels`` x ``cols`` (None:
    whole width) of that tensor, read into its region or written from it. Weights
    (``tensor`` -1, ``op`` >= 0): op ``op``'s weights for output ``channels``; ``rows`` is
    (0, 0).
    """

    direction: Direction
    tensor: int
    op: int
    rows: Range
    channels: Range
    elements: int
    cols: Range | None = None

    @property
    def is_weights(self) -> bool:
        return self.tensor < 0

    @property
    def key(self) -> TrafficKey:
        """The tensor or op's weights this transfer is counted against."""
        return (
            TrafficKey("weights", self.op) if self.tensor < 0 else TrafficKey("tensor", self.tensor)
        )


class TrafficKey(NamedTuple):
    """What DRAM bytes are counted against: a tensor (``kind`` "tensor", ``index`` its id)
    or an op's weights (``kind`` "weights", ``index`` the op)."""

    kind: Literal["tensor", "weights"]
    index: int


class Region(NamedTuple):
    """One buffer allocation of the group, held from its first step to its last.

    ``kind`` "tensor": room for ``rows`` x ``channels`` x ``width`` elements of tensor
    ``key``; ``aliases`` are tensors written in place over it (an activation overwriting
    its producer's rows); ``elements`` = rows x channels x width. ``kind`` "weights": op
    ``key``'s weights, ``elements`` of them (``rows``, ``channels`` and ``width`` are 0).
    """

    kind: Literal["tensor", "weights"]
    key: int
    rows: int
    channels: int
    width: int
    elements: int
    aliases: tuple[int, ...] = ()


Action = Compute | Transfer


class Step(NamedTuple):
    """One pass of the loop order: ``tile`` is the tile it belongs to, ``sink_rows`` the rows
    of the tallest sink it completes; ``actions`` run in order."""

    tile: int
    sink_rows: Range
    actions: tuple[Action, ...]

    @property
    def computes(self) -> tuple[Compute, ...]:
        return tuple(a for a in self.actions if isinstance(a, Compute))

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        return tuple(a for a in self.actions if isinstance(a, Transfer))


@dataclass(frozen=True)
class Schedule:
    """The schedule a cost model priced for ``group`` (module docstring).

    ``order``: the loop order's tag. ``core``: the op whose single-layer loop order runs
    (layer and epilogue orders), else -1. ``parity`` and ``sliced``: BRR's channel-slicing
    parity (2: no op sliced, ``brr.NO_SLICES``) and the ops keeping a slice of ``pe_unroll``
    channels (None / 0 elsewhere).
    ``h_tile``: sink rows per tile; ``tiles``: each tile's sink rows. ``weights_resident``:
    weights loaded once into weight regions (else streamed once per step that uses them);
    ``resident``: ops whose weights are loaded once into their region and stay although the
    others stream (an epilogue's bias beside its layer's streamed weights). ``in_place``:
    ops that write over an input's rows (they have no region of their own).
    ``peak``: the elements the schedule allocates at once (its regions); ``dram``: the
    elements it moves per tensor and per op's weights. ``bytes_per_element`` and
    ``buffer_bytes`` are the accelerator's.
    """

    group: Group
    scheme: str
    order: str
    bytes_per_element: int
    buffer_bytes: int
    core: int = -1
    parity: int | None = None
    sliced: Group = 0
    pe_unroll: int = 0
    h_tile: int = 0
    tiles: tuple[Range, ...] = ()
    weights_resident: bool = True
    resident: Group = 0
    in_place: Group = 0
    regions: tuple[Region, ...] = ()
    steps: tuple[Step, ...] = ()
    dram: Mapping[TrafficKey, int] = field(default_factory=dict)

    def holds_weights(self, op: int) -> bool:
        """Whether ``op``'s weights are loaded once into its weights region and stay."""
        return self.weights_resident or bool(self.resident >> op & 1)

    @property
    def peak(self) -> int:
        """Elements allocated at once: every region is held for the group's whole run."""
        return sum(r.elements for r in self.regions)

    @property
    def peak_bytes(self) -> int:
        return self.peak * self.bytes_per_element

    @property
    def dram_elements(self) -> int:
        return sum(self.dram.values())

    @property
    def dram_bytes(self) -> int:
        return self.dram_elements * self.bytes_per_element

    def compact(self, graph: OpGraph) -> dict[str, Any]:
        """The plan file's summary of this schedule: names instead of ids, no steps."""
        names = [n.name for n in graph.nodes]
        weights: dict[str, int] = {}
        tensors: dict[str, int] = {}
        for key, n in sorted(self.dram.items()):
            if key.kind == "weights":
                weights[names[key.index]] = n * self.bytes_per_element
            else:
                tensors[graph.tensors[key.index].name] = n * self.bytes_per_element
        out: dict[str, Any] = {"order": self.order}
        if self.core >= 0:
            out["core"] = names[self.core]
        if self.parity is not None:
            out["parity"] = self.parity
        if self.sliced:
            out["sliced"] = [names[v] for v in bits(self.sliced)]
        if self.in_place:
            out["in_place"] = [names[v] for v in bits(self.in_place)]
        out.update(
            h_tile=self.h_tile,
            tiles=len(self.tiles),
            steps=len(self.steps),
            weights="resident" if self.weights_resident else "streamed",
            peak_bytes=self.peak_bytes,
            dram_bytes={"tensors": tensors, "weights": weights},
        )
        return out


def traffic(steps: Iterable[Step]) -> dict[TrafficKey, int]:
    """Elements moved per tensor and per op's weights by the transfers of ``steps``: the
    ``dram`` a builder records (the replay counts its own)."""
    out: dict[TrafficKey, int] = {}
    for step in steps:
        for a in step.actions:
            if isinstance(a, Transfer):
                out[a.key] = out.get(a.key, 0) + a.elements
    return out


ScheduleBuilder = Callable[["CostModel", Group], Schedule]

SCHEDULE_BUILDERS: Registry[ScheduleBuilder] = Registry("schedule builder")
"""Builder per loop-order family: a scheme's name (``brr``, ``lbdf``) for its fused
schedules, :data:`LAYER` for an op run on its own or with an epilogue."""

LAYER = "layer"

# the builtin builders, imported when first asked for (each module registers itself too)
SCHEDULE_BUILDERS.register_lazy("brr", "accel_model.brr_schedule:brr_schedule")
SCHEDULE_BUILDERS.register_lazy("lbdf", "accel_model.schedule_lbdf:lbdf_schedule")
SCHEDULE_BUILDERS.register_lazy(LAYER, "accel_model.schedule_layer:layer_schedule")


def build_schedule(cost_model: CostModel, group: Group) -> Schedule:
    """The schedule ``cost_model`` priced for ``group``: the builder of the loop order that
    :meth:`CostModel.priced_order` says set the group's cost."""
    kind, _ = cost_model.priced_order(group)
    if kind == "free":
        return Schedule(group, cost_model.name, "free", cost_model.b, cost_model.beta)
    if kind == "scheme" and "optimus-groups" in cost_model.accel.conventions:
        # a fused group priced by Optimus's formulas: its tiles read no halo and may be
        # rounded up past the buffer, so there is no schedule to lay out, only Optimus's figure
        raise ScheduleError(
            "the optimus profile prices a fused group by Optimus's own formulas "
            "(docs/cost-model.md, \"The optimus profile\"), which read inputs without halo: "
            "no schedule computes the graph with that traffic"
        )
    name = cost_model.name if kind == "scheme" else LAYER
    if name not in SCHEDULE_BUILDERS:
        raise ScheduleError(f"no schedule builder for {name} loop orders yet")
    return SCHEDULE_BUILDERS.get(name)(cost_model, group)
