"""What one ONNX op costs depends on: the op signature, the cache key of every latency model.

A graph-substitution pass asks for the latency of the same op shape many times (each
candidate rewrite re-costs its ops), so an op is reduced to a hashable :class:`OpSignature`:
op type, tensor shapes and dtypes, and attributes, nothing about names or graph position.
Two ops with equal signatures cost the same on a device, and :meth:`OpSignature.key` is the
string under which measured latencies are cached on disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fusionplan.ir.errors import ConfigError

_SHORT_DTYPES = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
}
_EXTRA_SIZES = {"bfloat16": 2}  # dtypes numpy does not know


def dtype_size(dtype: str) -> int:
    """Bytes per element of a numpy dtype name (``bfloat16`` included)."""
    if dtype in _EXTRA_SIZES:
        return _EXTRA_SIZES[dtype]
    return np.dtype(dtype).itemsize


@dataclass(frozen=True)
class TensorSig:
    """One input or output tensor of an op: shape, dtype, whether it is a weight."""

    shape: tuple[int, ...]
    dtype: str = "float32"  # numpy dtype name
    const: bool = False  # an initializer (weight) rather than a run-time tensor
    value: tuple[int, ...] | None = None  # data of a small int64 constant; else None

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise ConfigError(f"tensor shape {shape} has a negative dimension")
        object.__setattr__(self, "shape", shape)
        if self.dtype not in _EXTRA_SIZES:
            try:
                object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
            except TypeError as err:
                raise ConfigError(f"unknown tensor dtype {self.dtype!r}") from err
        if self.value is not None:
            object.__setattr__(self, "value", tuple(int(v) for v in self.value))

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_size(self.dtype)

    def key(self) -> str:
        """``f32[1,3,8,8]``; ``c:`` marks a weight, ``=[...]`` its int data."""
        text = f"{_SHORT_DTYPES.get(self.dtype, self.dtype)}[{_join(self.shape)}]"
        if self.value is not None:
            text += f"=[{_join(self.value)}]"
        return f"c:{text}" if self.const else text


@dataclass(frozen=True)
class OpSignature:
    """Everything an op's latency depends on; equal signatures cost the same."""

    op: str  # ONNX op_type, e.g. "Conv", "FusedConv", "MatMul", "Split"
    domain: str = ""  # "" for ai.onnx, "com.microsoft" for FusedConv / FusedGemm
    inputs: tuple[TensorSig | None, ...] = ()  # None = omitted optional input (ONNX "")
    outputs: tuple[TensorSig, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()  # sorted by name; int/float/str or tuples of them

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        attrs = tuple(sorted((str(k), _attr_value(v)) for k, v in self.attrs))
        names = [k for k, _ in attrs]
        if len(set(names)) != len(names):
            raise ConfigError(f"{self.op} signature repeats an attribute: {names}")
        object.__setattr__(self, "attrs", attrs)

    def key(self) -> str:
        """``Conv(f32[1,3,8,8],c:f32[4,3,3,3])->(f32[1,4,8,8]){group=1;pads=[1,1,1,1]}``.

        Memoized: a substitution search asks for the key of one signature many times.
        """
        key = self.__dict__.get("_key")
        if key is None:
            op = f"{self.domain}.{self.op}" if self.domain else self.op
            ins = ",".join("_" if t is None else t.key() for t in self.inputs)
            outs = ",".join(t.key() for t in self.outputs)
            attrs = ";".join(f"{k}={_attr_text(v)}" for k, v in self.attrs)
            key = f"{op}({ins})->({outs}){{{attrs}}}"
            object.__setattr__(self, "_key", key)
        return key

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default


def _attr_value(value: Any) -> Any:
    """Attribute values made hashable: lists become tuples, bytes (ONNX strings) str."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list | tuple):
        return tuple(_attr_value(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _attr_text(value: Any) -> str:
    return f"[{_join(value)}]" if isinstance(value, tuple) else str(value)


def _join(values: tuple[Any, ...]) -> str:
    return ",".join(str(v) for v in values)
