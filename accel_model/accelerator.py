"""Accelerator description: on-chip buffer size, fusion scheme, bytes per element."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Accelerator:
    """What the cost model needs to know about the hardware."""

    buffer_bytes: int
    scheme: str = "lbdf"
    bytes_per_element: int = 1
    single_layer: str = "tiled"

    def __post_init__(self) -> None:
        if self.buffer_bytes <= 0:
            raise ConfigError(f"buffer size must be positive, got {self.buffer_bytes}")
        COST_MODELS.check(self.scheme)
        if self.bytes_per_element <= 0:
            raise ConfigError(f"bytes per element must be positive, got {self.bytes_per_element}")
        if self.single_layer not in SINGLE_LAYER_CONVENTIONS:
            choices = ", ".join(SINGLE_LAYER_CONVENTIONS)
            raise ConfigError(f"single-layer cost {self.single_layer!r} is not one of: {choices}")

    @staticmethod
    def of(
        buffer: str | int,
        scheme: str = "lbdf",
        bytes_per_element: int = 1,
        single_layer: str = "tiled",
    ) -> Accelerator:
        """Build from user-facing values: ``Accelerator.of("256KB", "brr")``."""
        return Accelerator(
            parse_size(buffer), scheme.lower(), int(bytes_per_element), single_layer.lower()
        )

    def describe(self) -> str:
        paper = ", paper single-layer costs" if self.single_layer == "paper" else ""
        return (
            f"{format_size(self.buffer_bytes)} buffer, {self.scheme.upper()}, "
            f"{self.bytes_per_element} B/elem{paper}"
        )
