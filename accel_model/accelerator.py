"""Accelerator description: on-chip buffer size, fusion scheme, bytes per element."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields
from typing import Any

from accel_model.registry import COST_MODELS
from fusionplan.ir.errors import ConfigError

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1024,
    "KB": 1024,
    "KIB": 1024,
    "M": 1024**2,
    "MB": 1024**2,
    "MIB": 1024**2,
    "G": 1024**3,
    "GB": 1024**3,
    "GIB": 1024**3,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(value: str | int | float) -> int:
    """Bytes in a size such as ``256KB``, ``0.5MB``, ``131072`` (KB = 1024 bytes).

    Raises ``ConfigError`` for malformed, unknown-unit, fractional-byte or non-positive sizes.
    """
    if isinstance(value, bool):
        raise ConfigError(f"buffer size {value!r} is not a size")
    if isinstance(value, int | float):
        number, unit = float(value), ""
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ConfigError(f"buffer size {value!r} is not a size like 256KB, 0.5MB or 131072")
        number, unit = float(match.group(1)), match.group(2).upper()
        if unit not in _UNITS:
            raise ConfigError(
                f"buffer size {value!r} has unknown unit '{match.group(2)}' (use B, KB, MB or GB)"
            )
    size = number * _UNITS[unit]
    if not math.isfinite(size):
        raise ConfigError(f"buffer size {value!r} is not a finite size")
    if size <= 0:
        raise ConfigError(f"buffer size {value!r} must be positive")
    if size != int(size):
        raise ConfigError(f"buffer size {value!r} is not a whole number of bytes")
    return int(size)


def format_size(nbytes: float) -> str:
    """Human-readable size in the same units ``parse_size`` accepts."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:g}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{int(nbytes)}B"


SINGLE_LAYER_CONVENTIONS: tuple[str, ...] = ("tiled", "paper")
"""How an op run on its own is costed (docs/cost-model.md, "Single-layer cost"): ``tiled``
picks the cheapest intra-layer loop order the buffer allows; ``paper`` is the paper's
convention (an op that fits nowhere moves its io and weights once), kept for reproduction."""

OPTIMUS_CONVENTIONS: tuple[str, ...] = (
    "free-activations",
    "free-local-outputs",
    "free-unfused-local",
    "no-local-start",
    "unbuffered-inputs",
    "optimus-single-layer",
    "fractional-weight-reads",
    "optimus-groups",
    "optimus-solver",
    "rounded-up-tiles",
    "unsliced-weights-once",
)
"""Optimus's conventions (docs/cost-model.md, "The optimus profile"), each switchable on
its own. ``optimus-groups`` prices every group as Optimus's own code reports it
(accel_model/optimus_pricing.py), with its quirks ``optimus-solver`` (its continuous tile and
blocking solvers; without: its closed forms, which its code uses for SqueezeNet),
``rounded-up-tiles`` (the solver's tile rounded up, even past the buffer) and
``unsliced-weights-once`` (a conv keeping all its channels reads its weights once); it
supersedes the first seven, which approximate Optimus monotonically
(:data:`OPTIMUS_APPROXIMATIONS`):
``free-activations`` (unary activations do not exist: no buffer, free run alone),
``free-local-outputs`` (pool, elementwise, concat and depthwise outputs take no buffer),
``free-unfused-local`` (those ops run alone move no DRAM), ``no-local-start`` (a group of
several ops may not start with one of them), ``unbuffered-inputs`` (a group's input takes
buffer only where a channel-slicing conv reads it) and ``optimus-single-layer`` (a dense layer
run alone costs Optimus's loop-blocking estimate, which reads no halo) and
``fractional-weight-reads`` (a streamed group re-reads each op's weights H_out / rows-per-tile
times, a fraction, as Optimus reports it, rather than once per tile)."""

OPTIMUS_APPROXIMATIONS: tuple[str, ...] = OPTIMUS_CONVENTIONS[:7]
"""The conventions that approximate Optimus while every cost stays non-increasing in the
buffer and at least io + weights (the optimus profile before it priced groups as Optimus's
code does); the search's property tests run them."""

PROFILES: dict[str, dict[str, Any]] = {
    "fusionplan": {},
    "paper": {"single_layer": "paper", "pe_unroll": 0, "in_place": False},
    "optimus": {"conventions": OPTIMUS_CONVENTIONS, "depthwise_weights": False},
}
"""Named presets of the cost conventions: ``fusionplan`` (the realistic defaults),
``paper`` (the fusion paper's BRR and single-layer costs, for its reproduction tables) and
``optimus`` (Optimus's conventions, to compare with its published optima)."""

DEFAULT_PE_UNROLL = 32
"""Optimus's channel slice: the PE array's unroll of output channels (dataflow Ow x Cout)."""


@dataclass(frozen=True)
class Accelerator:
    """What the cost model needs to know about the hardware.

    ``pe_unroll`` is the channel slice k of BRR's partial-channel buffering (0: every op keeps
    all its channels); ``in_place`` lets unary and elementwise ops overwrite their input's
    rows; ``depthwise_weights`` counts depthwise-conv weights (Optimus does not);
    ``conventions`` switch on Optimus's optimistic conventions (:data:`OPTIMUS_CONVENTIONS`).
    LBDF ignores the three BRR settings.
    """

    buffer_bytes: int
    scheme: str = "lbdf"
    bytes_per_element: int = 1
    single_layer: str = "tiled"
    pe_unroll: int = DEFAULT_PE_UNROLL
    in_place: bool = True
    depthwise_weights: bool = True
    conventions: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if isinstance(self.buffer_bytes, bool) or self.buffer_bytes <= 0:
            raise ConfigError(f"buffer size must be positive, got {self.buffer_bytes}")
        COST_MODELS.check(self.scheme)
        if self.bytes_per_element <= 0:
            raise ConfigError(f"bytes per element must be positive, got {self.bytes_per_element}")
        if self.single_layer not in SINGLE_LAYER_CONVENTIONS:
            choices = ", ".join(SINGLE_LAYER_CONVENTIONS)
            raise ConfigError(f"single-layer cost {self.single_layer!r} is not one of: {choices}")
        if isinstance(self.pe_unroll, bool) or not isinstance(self.pe_unroll, int):
            raise ConfigError(
                f"pe_unroll must be a whole number of channels, got {self.pe_unroll!r}"
            )
        if self.pe_unroll < 0:
            raise ConfigError(
                f"pe_unroll must be >= 0 channels (0: no partial channels), got {self.pe_unroll}"
            )
        unknown = sorted(set(self.conventions) - set(OPTIMUS_CONVENTIONS))
        if unknown:
            choices = ", ".join(OPTIMUS_CONVENTIONS)
            raise ConfigError(f"unknown convention {unknown[0]!r} (choose from: {choices})")
        if self.conventions and self.scheme != "brr":
            raise ConfigError(
                f"Optimus's conventions apply to the brr scheme only, not {self.scheme}"
            )
        object.__setattr__(self, "conventions", frozenset(self.conventions))

    @staticmethod
    def of(
        buffer: str | int,
        scheme: str = "lbdf",
        bytes_per_element: int = 1,
        single_layer: str | None = None,
        *,
        profile: str = "fusionplan",
        **settings: Any,
    ) -> Accelerator:
        """Build from user-facing values: ``Accelerator.of("256KB", "brr")``.

        ``profile`` (:data:`PROFILES`) gives the defaults of the cost conventions; explicit
        ``single_layer`` and ``settings`` (``pe_unroll``, ``in_place``, ``depthwise_weights``,
        ``conventions``) override it; None means "the profile's".
        """
        if profile not in PROFILES:
            raise ConfigError(f"unknown profile {profile!r} (choose from: {', '.join(PROFILES)})")
        chosen = dict(PROFILES[profile])
        unknown = sorted(set(settings) - _SETTINGS)
        if unknown:
            raise ConfigError(f"unknown accelerator setting {unknown[0]!r}")
        chosen.update({k: v for k, v in settings.items() if v is not None})
        if single_layer is not None:
            chosen["single_layer"] = single_layer.lower()
        return Accelerator(parse_size(buffer), scheme.lower(), int(bytes_per_element), **chosen)

    @property
    def profile(self) -> str:
        """The preset these settings equal, or ``custom``."""
        mine = {f: getattr(self, f) for f in _PRESET_FIELDS}
        for name, preset in PROFILES.items():
            expected = {f: _DEFAULTS[f] for f in _PRESET_FIELDS} | dict(preset)
            expected["conventions"] = frozenset(expected["conventions"])
            if mine == expected:
                return name
        return "custom"

    def settings(self) -> dict[str, Any]:
        """Every field in JSON-friendly form (the plan JSON's ``accelerator`` block)."""
        return {
            "buffer_bytes": self.buffer_bytes,
            "scheme": self.scheme,
            "bytes_per_element": self.bytes_per_element,
            "single_layer": self.single_layer,
            "pe_unroll": self.pe_unroll,
            "in_place": self.in_place,
            "depthwise_weights": self.depthwise_weights,
            "conventions": sorted(self.conventions),
            "profile": self.profile,
        }

    def describe(self) -> str:
        profile = self.profile
        extra = "" if profile == "fusionplan" else f", {profile} profile"
        if profile == "custom":
            extra = f", pe_unroll {self.pe_unroll}" + (
                f", {'+'.join(sorted(self.conventions))}" if self.conventions else ""
            )
        return (
            f"{format_size(self.buffer_bytes)} buffer, {self.scheme.upper()}, "
            f"{self.bytes_per_element} B/elem{extra}"
        )


_SETTINGS = frozenset({"pe_unroll", "in_place", "depthwise_weights", "conventions"})
_PRESET_FIELDS = ("single_layer", *sorted(_SETTINGS))
_DEFAULTS = {f.name: f.default for f in fields(Accelerator)}
