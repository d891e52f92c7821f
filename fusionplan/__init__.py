"""fusionplan: layer-fusion planning for DNN accelerators.

``import fusionplan as fp`` is cheap; the API below is imported on first use so that the IR
stays importable on its own and ``fusionplan --help`` starts fast.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "sweep": "fusionplan.app.api",
    "load": "fusionplan.app.api",
    "load_model": "fusionplan.ir.onnx_import",
    "OpGraph": "fusionplan.ir.graph",
    "Plan": "fusionplan.plan",
    "PlanMetrics": "fusionplan.plan",
    "Accelerator": "accel_model.accelerator",
    "FusionPlanError": "fusionplan.ir.errors",
}

__all__ = [*sorted(_LAZY), "__version__", "plan"]


class _Package(types.ModuleType):
    """``fp.plan`` is the planning function, although ``fusionplan.plan`` is also a module.

    Importing a submodule makes the import system set it as an attribute of the package,
    which would replace the function by the module after the first call. This property
    keeps the function and ignores that assignment; the module stays reachable through
    ``from fusionplan.planning.plan import Plan`` (which reads ``sys.modules``).
    """

    @property
    def plan(self) -> Any:
        from fusionplan.app.api import plan

        return plan

    @plan.setter
    def plan(self, _module: Any) -> None:
        pass


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fusionplan' has no attribute '{name}'")
