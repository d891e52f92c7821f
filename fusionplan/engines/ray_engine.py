"""The Ray engine: tasks on a local Ray instance or an existing cluster (``--address``).

Ray is an optional extra (``pip install 'fusionplan[ray]'``), imported only when this engine
is built. The shared input is put into the object store once; each worker process fetches
and deserialises it once (cached by object id), not once per task. Retries are the driver's
(:func:`~fusionplan.engines.base.run_tasks`), as on the local engine, so both engines fail,
retry and report alike; Ray's own task retries are off.
"""

from __future__ import annotations

from typing import Any

from fusionplan.engines.base import (
    WORKER_DIED,
    Attempt,
    Engine,
    TaskFn,
    call_task,
    check_processes,
)
from fusionplan.ir.errors import ConfigError

INSTALL_HINT = "pip install 'fusionplan[ray]'"

_SHARED_CACHE: dict[str, Any] = {}  # per worker process: object id -> the shared input


def _ray_module():
    try:
        import ray  # optional extra, imported only for this engine
    except ImportError:
        raise ConfigError(
            f"the ray engine needs Ray, which is not installed: {INSTALL_HINT}"
        ) from None
    return ray


def _node() -> str:
    ray = _ray_module()
    return f"{ray.util.get_node_ip_address()}/{ray.get_runtime_context().get_node_id()[:8]}"


def _shared(box: list) -> Any:
    """The shared input of a task; ``box`` hides the ref from Ray's argument resolution so
    that a worker deserialises it once, not for every task."""
    ref = box[0]
    if ref is None:
        return None
    key = ref.hex()
    if key not in _SHARED_CACHE:
        _SHARED_CACHE.clear()  # one job's input at a time keeps worker memory flat
        _SHARED_CACHE[key] = _ray_module().get(ref)
    return _SHARED_CACHE[key]


def _ray_task(fn: TaskFn, box: list, item: Any) -> Attempt:
    return call_task(fn, item, _shared(box), _node())


class RayEngine(Engine):
    """Tasks on Ray. Without ``address`` a private local instance with ``processes`` CPUs (all
    by default) is started and stopped at the end; ``auto`` or ``HOST:PORT`` joins a running
    cluster. Every task runs in a Ray worker process, so ``isolate`` always holds.
    """

    name = "ray"

    def __init__(
        self, processes: int | None = None, *, address: str | None = None, isolate: bool = True
    ) -> None:
        check_processes(processes)
        if processes is not None and address is not None:
            raise ConfigError("a Ray cluster's CPUs are its own: give --address or --processes")
        self._ray = _ray_module()
        self.address = address
        self.processes = processes
        self._owns_ray = False
        self._slots = processes or 1
        self._remote: Any = None
        self._fn: TaskFn | None = None
        self._box: list = [None]
        self._refs: dict[Any, int] = {}

    @property
    def slots(self) -> int:
        return self._slots

    def start(self, fn: TaskFn, shared: Any) -> None:
        ray = self._ray
        self._drop_tasks()  # nothing of an earlier job may leak into this one
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "configure_logging": False,
                # workers run one torch thread each, as on the local engine
                "runtime_env": {"env_vars": {"FUSIONPLAN_TORCH_THREADS": "1"}},
            }
            if self.address is None:
                options["num_cpus"] = self.processes
            try:
                ray.init(address=self.address, **options)
            except ConnectionError as exc:
                raise ConfigError(f"cannot reach a Ray cluster at {self.address}: {exc}") from exc
            self._owns_ray = True
        self._slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(num_cpus=1, max_retries=0)(_ray_task)
        self._fn = fn
        self._box = [None if shared is None else ray.put(shared)]

    def submit(self, index: int, item: Any) -> None:
        assert self._remote is not None, "start() first"
        self._refs[self._remote.remote(self._fn, self._box, item)] = index

    def wait(self) -> list[tuple[int, Attempt]]:
        ray = self._ray
        ready, _ = ray.wait(list(self._refs), num_returns=1)
        more, _ = ray.wait([r for r in self._refs if r not in ready], timeout=0)
        out: list[tuple[int, Attempt]] = []
        for ref in [*ready, *more]:
            index = self._refs.pop(ref)
            try:
                out.append((index, ray.get(ref)))
            except ray.exceptions.RayError as exc:  # the worker or its node died
                died = Attempt(error=f"{WORKER_DIED} ({type(exc).__name__})", node="unknown")
                out.append((index, died))
        return out

    def _drop_tasks(self) -> None:
        for ref in self._refs:
            self._ray.cancel(ref, force=True)
        self._refs.clear()

    def close(self) -> None:
        self._drop_tasks()
        self._box = [None]
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
            self._owns_ray = False

    def describe(self) -> str:
        where = f"cluster at {self.address}" if self.address else "a local Ray instance"
        return f"ray ({where}, {self.slots} CPUs)"
