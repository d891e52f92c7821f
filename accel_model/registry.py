"""Scheme name -> cost-model class. New schemes register here; nothing else changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accel_model.base import CostModel

_SCHEMES: dict[str, type[CostModel]] = {}


def register(cls: type[CostModel]) -> type[CostModel]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    _SCHEMES[cls.name] = cls
    return cls


def _load_builtin() -> None:
    import accel_model.brr
    import accel_model.lbdf  # noqa: F401


def scheme_names() -> list[str]:
    _load_builtin()
    return sorted(_SCHEMES)


def cost_model_class(scheme: str) -> type[CostModel]:
    _load_builtin()
    return _SCHEMES[scheme]
