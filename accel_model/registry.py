"""The fusion-scheme registry: scheme name -> cost-model class (docs/design.md, "Plug points").

A new scheme is one module with a :class:`~accel_model.base.CostModel` subclass decorated
``@COST_MODELS.register("name")``, plus one import line in ``accel_model/__init__.py``
(or, from outside the package, the decorator alone).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusionplan.ir.registry import Registry

if TYPE_CHECKING:
    from accel_model.base import CostModel

COST_MODELS: Registry[type[CostModel]] = Registry("fusion scheme")


def scheme_names() -> list[str]:
    return COST_MODELS.names()


def cost_model_class(scheme: str) -> type[CostModel]:
    return COST_MODELS.get(scheme)
