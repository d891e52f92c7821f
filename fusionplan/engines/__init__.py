"""Fan-out engines: the same job on this machine or on a Ray cluster (docs/design.md, "Engines").

Dataset shards, sweep points and bench runs are independent tasks; an :class:`Engine` runs
them and :func:`run_tasks` drives any engine with the same retries, so results
do not depend on where they ran.
"""

from __future__ import annotations

from fusionplan.engines.base import (
    WORKER_DIED,
    Engine,
    Job,
    Outcome,
    TaskFn,
    run_tasks,
    tasks_per_node,
)
from fusionplan.engines.local import LocalEngine
from fusionplan.engines.ray_engine import INSTALL_HINT, RayEngine
from fusionplan.ir.registry import Registry

ENGINES: Registry[type[Engine]] = Registry("engine")
ENGINES.register("local", LocalEngine, help="This machine: processes (default).")
ENGINES.register("ray", RayEngine, help=f"Ray, local or a cluster ({INSTALL_HINT}).")


def make_engine(
    name: str = "local",
    *,
    processes: int | None = None,
    address: str | None = None,
    isolate: bool = False,
) -> Engine:
    """The engine ``name`` as the CLI's options configure it.

    ``processes``: local worker processes (default: one per CPU), or the CPUs of a private
    local Ray instance (default: all). ``address`` joins a running Ray cluster ("auto" or
    "HOST:PORT"). ``isolate``: even one task stream runs in a worker process (Ray always
    isolates).
    """
    return ENGINES.get(name)(processes, address=address, isolate=isolate)


__all__ = [
    "ENGINES",
    "WORKER_DIED",
    "Engine",
    "Job",
    "LocalEngine",
    "Outcome",
    "RayEngine",
    "TaskFn",
    "make_engine",
    "run_tasks",
    "tasks_per_node",
]
