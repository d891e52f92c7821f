"""What a measurer feeds an op and how it times it, shared by the ORT and torch measurers.

Operand data: a small int constant's ``value`` where the signature has one; else, for the
shape-like inputs (Reshape shape, Split sizes, Slice bounds, Pad pads, Resize scales/sizes,
Squeeze/Unsqueeze axes), data derived from the output shapes, so the op produces the
signature's outputs; Gather indices random in range; other floats uniform in [0.5, 1.5)
(no zeros, NaNs or denormals to hit slow paths), other ints zero.
"""

from __future__ import annotations

import platform
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from accel_model.latency.signature import OpSignature, TensorSig
from fusionplan.ir.errors import ConfigError

DerivedValue = Callable[[OpSignature, int], list[float] | None]


def operand_arrays(sig: OpSignature, seed: int = 0) -> list[np.ndarray | None]:
    """One array per input of ``sig`` (None for an omitted optional input)."""
    rng = np.random.default_rng(seed)
    return [None if t is None else _operand(sig, i, t, rng) for i, t in enumerate(sig.inputs)]


def _operand(sig: OpSignature, i: int, t: TensorSig, rng: np.random.Generator) -> np.ndarray:
    if t.dtype == "bfloat16":
        raise ConfigError(f"{sig.op}: numpy has no bfloat16 to make measurement data from")
    dtype = np.dtype(t.dtype)
    data = t.value if t.value is not None else _DERIVED.get(sig.op, _none)(sig, i)
    if data is not None:
        array = np.asarray(data, dtype=dtype)
        return array.reshape(t.shape) if array.size == t.numel else array
    if dtype.kind == "f":
        return rng.uniform(0.5, 1.5, t.shape).astype(dtype)
    if sig.op == "Gather" and i == 1:
        data_shape = _shape(sig, 0)
        axis = int(sig.attr("axis", 0)) % len(data_shape)
        return rng.integers(0, data_shape[axis], t.shape).astype(dtype)
    return np.zeros(t.shape, dtype)


def _none(sig: OpSignature, i: int) -> None:
    return None


def _shape(sig: OpSignature, i: int) -> tuple[int, ...]:
    t = sig.inputs[i] if i < len(sig.inputs) else None
    if t is None:
        raise ConfigError(f"{sig.op} signature lacks input {i}")
    return t.shape


def _out_shape(sig: OpSignature) -> tuple[int, ...]:
    if not sig.outputs:
        raise ConfigError(f"{sig.op} signature has no output shape")
    return sig.outputs[0].shape


def _reshape(sig: OpSignature, i: int) -> list[float] | None:
    return list(_out_shape(sig)) if i == 1 else None


def _split(sig: OpSignature, i: int) -> list[float] | None:
    if i != 1:
        return None
    axis = int(sig.attr("axis", 0)) % len(_shape(sig, 0))
    return [o.shape[axis] for o in sig.outputs]


def _slice(sig: OpSignature, i: int) -> list[float] | None:
    if not 1 <= i <= 4:
        return None
    rank = len(_shape(sig, 0))
    return [[0] * rank, list(_out_shape(sig)), list(range(rank)), [1] * rank][i - 1]


def _pad(sig: OpSignature, i: int) -> list[float] | None:
    if i != 1:
        return None
    grow = [o - n for o, n in zip(_out_shape(sig), _shape(sig, 0), strict=True)]
    return [0] * len(grow) + grow


def _resize(sig: OpSignature, i: int) -> list[float] | None:
    t = sig.inputs[i]
    if i == 2 and t is not None and t.numel:
        return [o / n for o, n in zip(_out_shape(sig), _shape(sig, 0), strict=True)]
    if i == 3:
        return list(_out_shape(sig))
    return None


def _squeeze(sig: OpSignature, i: int) -> list[float] | None:
    return _unit_axes(_shape(sig, 0), _out_shape(sig)) if i == 1 else None


def _unsqueeze(sig: OpSignature, i: int) -> list[float] | None:
    return _unit_axes(_out_shape(sig), _shape(sig, 0)) if i == 1 else None


def _unit_axes(long: tuple[int, ...], short: tuple[int, ...]) -> list[float]:
    """Positions of ``long`` left over after matching ``short`` in order (its unit dims)."""
    axes, j = [], 0
    for k, dim in enumerate(long):
        if j < len(short) and short[j] == dim:
            j += 1
        else:
            axes.append(k)
    return axes


_DERIVED: dict[str, DerivedValue] = {
    "Reshape": _reshape,
    "Split": _split,
    "Slice": _slice,
    "Pad": _pad,
    "Resize": _resize,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
}


def median_seconds(run: Callable[[], object], warmup: int, repeats: int, budget_s: float) -> float:
    """Median wall time of ``run()`` after ``warmup`` calls.

    Times ``repeats`` calls, or fewer (at least 3) once ``budget_s`` is spent, so that a
    slow op does not take ``repeats`` times its latency to measure.
    """
    for _ in range(warmup):
        run()
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats and (len(times) < 3 or spent < budget_s):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return float(np.median(times))


def cpu_model() -> str:
    """The CPU's model name, for device ids (measurements do not transfer across CPUs)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine() or "cpu"


def slug(text: str) -> str:
    """``text`` as a file-name-safe, lower-case device id part."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")
