"""fusionplan: layer-fusion planning for DNN accelerators.

``import fusionplan as fp`` is cheap: this facade names the public API and imports each
piece on first use (PEP 562), so importing a lower layer such as ``fusionplan.ir`` never
pulls in the front end, and ``fusionplan --help`` starts fast. The layers themselves are
described in docs/design.md ("Layers").
"""

from __future__ import annotations

import importlib
from typing import Any

from fusionplan.ir.version import VERSION as __version__

_PUBLIC = {
    "plan": "fusionplan.app.api",
    "sweep": "fusionplan.app.api",
    "load": "fusionplan.app.api",
    "batch": "fusionplan.batching.pipeline",
    "substitute": "fusionplan.app.api",
    "schedule_streams": "fusionplan.app.api",
    "PlanRequest": "fusionplan.app.pipeline",
    "load_model": "fusionplan.ir.onnx_import",
    "OpGraph": "fusionplan.ir.graph",
    "Plan": "fusionplan.planning.plan",
    "PlanMetrics": "fusionplan.planning.plan",
    "Accelerator": "accel_model.accelerator",
    "load_accelerator": "accel_model.description",
    "FusionPlanError": "fusionplan.ir.errors",
}

__all__ = [*sorted(_PUBLIC), "__version__"]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'fusionplan' has no attribute '{name}'")
