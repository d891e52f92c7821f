"""The op-latency model registry: name -> factory (docs/design.md, "Plug points").

Each implementation module registers its factories with one line; a factory's keyword
arguments are the options :func:`make_latency_model` accepts for that name.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from accel_model.latency.base import LatencyModel
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.registry import Registry

LATENCY_MODELS: Registry[Callable[..., LatencyModel]] = Registry("latency model")


def make_latency_model(name: str, **options: Any) -> LatencyModel:
    """The latency model registered as ``name``, built with ``options``."""
    factory = LATENCY_MODELS.get(name)
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as err:
        accepted = ", ".join(inspect.signature(factory).parameters) or "none"
        raise ConfigError(
            f"latency model '{name}' got bad options {sorted(options)} (accepted: {accepted})"
        ) from err
    return factory(**options)
