"""Accelerator description files (YAML or TOML): the hardware in one place, beside ``--buffer``.

A file is a flat mapping (docs/cost-model.md, "Accelerator description files")::

    buffer: 128KB            # required by `plan`; a sweep's --buffers replace it
    scheme: brr
    bytes_per_element: 2
    pe_unroll: 32            # BRR channel slice; 0: full-channel buffering
    depthwise_weights: true
    in_place: true
    single_layer: tiled
    profile: fusionplan      # or optimus / paper: the defaults of the settings not given
    conventions: []          # any of Optimus's conventions, one by one
    pe_array: {rows: 32, cols: 16, dataflow: cout-ow}   # latency and energy only:
    clock_mhz: 1000          #   accel_model/hardware.py, docs/cost-model.md
    dram_gb_per_s: 25.6
    buffer_banks: 8
    bank_bytes_per_cycle: 8
    double_buffering: true
    energy: {dram_pj_per_byte: 100, buffer_pj_per_byte: 2.5, mac_pj: 1, leakage_pj_per_cycle: 0}
    passes: {device: h100, substitute: {search: ocggs-dpp}, streams: {max_streams: 4}}

``passes`` holds options of the pre-passes (``--prepass``), checked by the pass pipeline
(fusionplan/passes/manager.py) when a run builds it: this layer does not know the passes.

Every key is optional except where a command needs the buffer; an empty file, unknown keys,
wrong types, bad values and unreadable files are a one-line ``ConfigError`` naming the file
(and the key).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from accel_model.accelerator import (
    OPTIMUS_CONVENTIONS,
    PROFILES,
    SINGLE_LAYER_CONVENTIONS,
    Accelerator,
    parse_size,
)
from accel_model.hardware import Hardware
from accel_model.registry import COST_MODELS
from fusionplan.ir.errors import ConfigError

_TYPES: dict[str, tuple[type, ...]] = {
    "buffer": (str, int),
    "scheme": (str,),
    "bytes_per_element": (int,),
    "pe_unroll": (int,),
    "depthwise_weights": (bool,),
    "in_place": (bool,),
    "single_layer": (str,),
    "profile": (str,),
    "conventions": (list,),
    "pe_array": (dict,),
    "clock_mhz": (int, float),
    "dram_gb_per_s": (int, float),
    "buffer_banks": (int,),
    "bank_bytes_per_cycle": (int,),
    "double_buffering": (bool,),
    "energy": (dict,),
    "passes": (dict,),
}
KEYS: tuple[str, ...] = tuple(_TYPES)
"""The keys a description file may hold."""

_CHOICES: dict[str, Callable[[], Sequence[str]]] = {
    "scheme": COST_MODELS.names,  # read when checked: plug-in schemes count
    "single_layer": lambda: SINGLE_LAYER_CONVENTIONS,
    "profile": lambda: tuple(PROFILES),
}
_MINIMUM: dict[str, int] = {"bytes_per_element": 1, "pe_unroll": 0}


def read_description(path: str | os.PathLike) -> dict[str, Any]:
    """The settings in an accelerator file, checked for known keys and types (not yet
    combined: :func:`accelerator_from` builds the :class:`Accelerator`)."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read accelerator file {file}: {e.strerror or e}") from None
    try:
        if file.suffix.lower() == ".toml":
            data = tomllib.loads(text)
        elif file.suffix.lower() in (".yaml", ".yml"):
            data = yaml.safe_load(text)
        else:
            raise ConfigError(f"accelerator file {file} must end in .yaml, .yml or .toml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        first = str(e).strip().splitlines()[0]
        raise ConfigError(f"accelerator file {file} is not valid: {first}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"accelerator file {file} must hold a mapping of settings")
    if not data:
        raise ConfigError(
            f"accelerator file {file} holds no settings (give at least 'buffer: 128KB')"
        )
    for key, value in data.items():
        if key not in _TYPES:
            raise ConfigError(
                f"accelerator file {file}: unknown key {key!r} (known: {', '.join(KEYS)})"
            )
        types = _TYPES[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            kinds = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"accelerator file {file}: {key} must be a {kinds}, got {value!r}")
        problem = _value_problem(key, value)
        if problem:
            raise ConfigError(f"accelerator file {file}: key {key!r}: {problem}")
    try:
        hardware_from(data)
    except ConfigError as e:
        raise ConfigError(f"accelerator file {file}: {e}") from None
    return data


def _value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` (of the right type) is not a valid ``key``, or None. Checked when the
    file is read because its values become the defaults of the command-line options:
    checked later, a bad one was blamed on the option (``--scheme``), not on the file."""
    if key in _CHOICES:
        choices = _CHOICES[key]()
        if (value.lower() if key == "scheme" else value) not in choices:
            return f"{value!r} is not one of {', '.join(choices)}"
    elif key in _MINIMUM and value < _MINIMUM[key]:
        return f"{value} is below {_MINIMUM[key]}"
    elif key == "buffer":
        try:
            parse_size(value)
        except ConfigError as e:
            return str(e)
    elif key == "conventions":
        unknown = [c for c in value if c not in OPTIMUS_CONVENTIONS]
        if unknown:
            return f"{unknown[0]!r} is not one of {', '.join(OPTIMUS_CONVENTIONS)}"
    return None


def accelerator_from(settings: dict[str, Any], buffer: str | int | None = None) -> Accelerator:
    """An :class:`Accelerator` from description settings; ``buffer`` replaces the file's."""
    size = buffer if buffer is not None else settings.get("buffer")
    if size is None:
        raise ConfigError("the accelerator description gives no buffer size (add 'buffer: 128KB')")
    extra = {
        k: settings[k] for k in ("pe_unroll", "depthwise_weights", "in_place") if k in settings
    }
    if "conventions" in settings:
        extra["conventions"] = frozenset(settings["conventions"])
    return Accelerator.of(
        size,
        settings.get("scheme", "lbdf"),
        settings.get("bytes_per_element", 1),
        settings.get("single_layer"),
        profile=settings.get("profile", "fusionplan"),
        **extra,
    )


_NESTED = {
    "pe_array": {"rows": "pe_rows", "cols": "pe_cols", "dataflow": "dataflow"},
    "energy": {
        k: k for k in ("dram_pj_per_byte", "buffer_pj_per_byte", "mac_pj", "leakage_pj_per_cycle")
    },
}
_FLAT_HARDWARE = ("clock_mhz", "dram_gb_per_s", "buffer_banks", "bank_bytes_per_cycle",
                  "double_buffering")  # fmt: skip


def hardware_from(settings: dict[str, Any]) -> Hardware:
    """The :class:`Hardware` of description settings (its defaults where they say nothing):
    ``pe_array`` and ``energy`` are sub-mappings, the rest flat keys."""
    fields: dict[str, Any] = {k: settings[k] for k in _FLAT_HARDWARE if k in settings}
    for section, names in _NESTED.items():
        for key, value in (settings.get(section) or {}).items():
            if key not in names:
                raise ConfigError(f"unknown key {key!r} in {section} (known: {', '.join(names)})")
            fields[names[key]] = value
    return Hardware(**fields)


def load_hardware(path: str | os.PathLike) -> Hardware:
    """The hardware a description file describes (its defaults where it says nothing)."""
    return hardware_from(read_description(path))


def load_accelerator(path: str | os.PathLike, buffer: str | int | None = None) -> Accelerator:
    """The accelerator a description file describes (``buffer`` overrides its size)."""
    return accelerator_from(read_description(path), buffer)
