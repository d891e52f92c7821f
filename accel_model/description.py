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

Every key is optional except where a command needs the buffer; unknown keys, wrong types and
unreadable files are a one-line ``ConfigError``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import yaml

from accel_model.accelerator import Accelerator
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
}
KEYS: tuple[str, ...] = tuple(_TYPES)
"""The keys a description file may hold."""


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
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"accelerator file {file} must hold a mapping of settings")
    for key, value in data.items():
        if key not in _TYPES:
            raise ConfigError(
                f"accelerator file {file}: unknown key {key!r} (known: {', '.join(KEYS)})"
            )
        types = _TYPES[key]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            kinds = " or ".join(t.__name__ for t in types)
            raise ConfigError(f"accelerator file {file}: {key} must be a {kinds}, got {value!r}")
    return data


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


def load_accelerator(path: str | os.PathLike, buffer: str | int | None = None) -> Accelerator:
    """The accelerator a description file describes (``buffer`` overrides its size)."""
    return accelerator_from(read_description(path), buffer)
