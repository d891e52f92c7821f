"""fusionplan: layer-fusion planning for DNN accelerators.

``import fusionplan as fp`` is cheap; the API below is imported on first use so that the IR
stays importable on its own and ``fusionplan --help`` starts fast.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "plan": "fusionplan.api",
    "sweep": "fusionplan.api",
    "load": "fusionplan.api",
    "load_model": "fusionplan.onnx_import",
    "OpGraph": "fusionplan.graph",
    "Plan": "fusionplan.plan",
    "PlanMetrics": "fusionplan.plan",
    "Accelerator": "accel_model.accelerator",
    "FusionPlanError": "fusionplan.errors",
}

__all__ = [*sorted(_LAZY), "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fusionplan' has no attribute '{name}'")
