"""The compute and memory side of an accelerator: PE array, clock, bandwidths, energies
(docs/cost-model.md, "Energy and latency").

The DRAM cost models need only the buffer (:class:`~accel_model.accelerator.Accelerator`);
a plan's latency and energy also need what this class describes. It is read from the same
description file (``pe_array``, ``clock_mhz``, ``energy``, ...) and every field has a
documented default: the Optimus-like 16-bit design of ``docs/examples/optimus-like-npu.yaml``
(docs/cost-model.md, "Energy and latency", says where each number comes from).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import cached_property

from fusionplan.ir.errors import ConfigError

DATAFLOWS: dict[str, str] = {
    "cout-ow": "rows unroll output channels, columns output columns (Optimus's Ow x Cout): "
    "outputs stay in the PEs, each input is broadcast along a column, each weight along a row",
    "cin-cout": "rows unroll input channels, columns output channels (weight-stationary "
    "systolic): weights stay in the PEs, inputs flow along rows, partial sums down columns",
}
"""The dataflows a PE array can implement: which two loop dimensions its rows and columns
unroll, and so which operand each buffer read is shared by."""

SRAM_PJ_PER_BYTE_32KB = 2.5
"""Energy of reading or writing one byte of a 32 KB SRAM, 45 nm (Horowitz, ISSCC 2014,
"Computing's energy problem": 20 pJ per 64-bit access)."""
SRAM_SIZE_EXPONENT = 0.47
"""How SRAM access energy grows with the array's size: Horowitz's 10 / 20 / 100 pJ per
64-bit access at 8 KB / 32 KB / 1 MB fit ``e ~ size^0.47`` within 3 %."""


def sram_pj_per_byte(bank_bytes: int) -> float:
    """Energy per byte accessed in one SRAM bank of ``bank_bytes`` (the Horowitz fit)."""
    return SRAM_PJ_PER_BYTE_32KB * (bank_bytes / 32768) ** SRAM_SIZE_EXPONENT


@dataclass(frozen=True)
class Hardware:
    """PE array, clocks, bandwidths and energy per access of an accelerator.

    ``pe_rows`` x ``pe_cols`` MAC units implement ``dataflow`` (:data:`DATAFLOWS`).
    ``dram_gb_per_s`` is the DRAM bandwidth (GB = 1e9 bytes); the buffer has
    ``buffer_banks`` banks of ``bank_bytes_per_cycle`` each. With ``double_buffering`` a
    tile's transfers overlap the previous tile's compute. Energies are pJ: per DRAM byte,
    per buffer byte (None: the Horowitz fit of one bank's size, :func:`sram_pj_per_byte`),
    per MAC, and leakage per cycle.
    """

    pe_rows: int = 32
    pe_cols: int = 32
    dataflow: str = "cout-ow"
    clock_mhz: float = 1000.0
    dram_gb_per_s: float = 25.6
    buffer_banks: int = 8
    bank_bytes_per_cycle: int = 8
    double_buffering: bool = True
    dram_pj_per_byte: float = 100.0
    buffer_pj_per_byte: float | None = None
    mac_pj: float = 1.0
    leakage_pj_per_cycle: float = 0.0

    def __post_init__(self) -> None:
        for name in ("pe_rows", "pe_cols", "buffer_banks", "bank_bytes_per_cycle"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"hardware {name} must be a whole number >= 1, got {value!r}")
        if self.dataflow not in DATAFLOWS:
            raise ConfigError(
                f"hardware dataflow {self.dataflow!r} is not one of {', '.join(DATAFLOWS)}"
            )
        for name in ("clock_mhz", "dram_gb_per_s"):
            _check_number(name, getattr(self, name), positive=True)
        for name in ("dram_pj_per_byte", "mac_pj", "leakage_pj_per_cycle"):
            _check_number(name, getattr(self, name), positive=False)
        if self.buffer_pj_per_byte is not None:
            _check_number("buffer_pj_per_byte", self.buffer_pj_per_byte, positive=False)
        if not isinstance(self.double_buffering, bool):
            raise ConfigError(
                f"hardware double_buffering must be true or false, got {self.double_buffering!r}"
            )

    @property
    def macs_per_cycle(self) -> int:
        """The array's peak: one MAC per PE per cycle."""
        return self.pe_rows * self.pe_cols

    @property
    def buffer_bytes_per_cycle(self) -> int:
        return self.buffer_banks * self.bank_bytes_per_cycle

    def buffer_energy(self, buffer_bytes: int) -> float:
        """pJ per byte read or written in a ``buffer_bytes`` buffer: the given figure, else
        the Horowitz fit of one bank (banking is what keeps a large buffer's access cheap)."""
        if self.buffer_pj_per_byte is not None:
            return self.buffer_pj_per_byte
        return sram_pj_per_byte(max(buffer_bytes // self.buffer_banks, 1))

    def dram_cycles(self, nbytes: int) -> int:
        """Cycles to move ``nbytes`` over the DRAM interface, in exact rational arithmetic
        (the bounds rely on a sum of these being at least the cycles of the sum)."""
        return math.ceil(nbytes * self._cycles_per_byte)

    @cached_property
    def _cycles_per_byte(self) -> Fraction:
        # clock_mhz * 1e6 cycles per second over dram_gb_per_s * 1e9 bytes per second, from
        # the decimal figures given (floats as written, not their binary expansion)
        return Fraction(str(self.clock_mhz)) / (Fraction(str(self.dram_gb_per_s)) * 1000)

    def settings(self) -> dict[str, object]:
        """Every field, JSON-friendly (the plan JSON's ``hardware`` block)."""
        return asdict(self)

    def describe(self) -> str:
        return (
            f"{self.pe_rows}x{self.pe_cols} PEs ({self.dataflow}), {self.clock_mhz:g} MHz, "
            f"DRAM {self.dram_gb_per_s:g} GB/s"
        )


def _check_number(name: str, value: object, positive: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        need = "> 0" if positive else ">= 0"
        raise ConfigError(f"hardware {name} must be a number {need}, got {value!r}")
