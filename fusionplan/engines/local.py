"""The default engine: this machine, in this process or in spawned worker processes."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from fusionplan.engines.base import (
    WORKER_DIED,
    Attempt,
    Engine,
    TaskFn,
    call_task,
    check_processes,
    one_line,
    this_node,
)
from fusionplan.ir.errors import ConfigError

_FN: TaskFn | None = None
_SHARED: Any = None


DRIVER_POLL_S = 1.0  # how often a worker checks that its driver is alive


def _init_worker(fn: TaskFn, shared: Any, driver: int) -> None:
    """Once per worker process: the task function, the shared input, one torch thread, and
    a watch on the driver process."""
    global _FN, _SHARED
    _FN, _SHARED = fn, shared
    os.environ.setdefault("FUSIONPLAN_TORCH_THREADS", "1")  # N processes, not N x threads
    warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
    threading.Thread(target=_exit_with_driver, args=(driver,), daemon=True).start()


def _exit_with_driver(driver: int) -> None:
    """A worker whose driver died without closing the pool (killed, or SIGTERM) would finish
    its task for nobody and then wait forever, holding its memory: it exits instead."""
    while os.getppid() == driver:
        time.sleep(DRIVER_POLL_S)
    os._exit(1)


def _run(item: Any) -> Attempt:
    assert _FN is not None, "worker used before _init_worker"
    return call_task(_FN, item, _SHARED, this_node())


class LocalEngine(Engine):
    """``processes`` spawned workers (None: one per CPU); with one process and no
    ``isolate``, this process.

    Spawned, not forked: the driver may hold torch's thread pools. ``isolate`` runs even a
    single task stream in a worker, so a crash (a segfaulting exporter, the OOM killer) costs
    that task only. A dead worker breaks the whole pool and loses every task in flight
    without saying whose worker died; those tasks are handed back uncharged and then run one
    at a time ("probation") until each has ended once, so a death is charged to its own task
    only and a task that always kills its worker still ends as a failure. (An idle worker
    killed from outside while one task runs is charged to that task: one try of its retries.)
    """

    name = "local"

    def __init__(
        self, processes: int | None = 1, *, address: str | None = None, isolate: bool = False
    ) -> None:
        if address is not None:
            raise ConfigError("--address is for the ray engine; add --engine ray")
        check_processes(processes)
        self.processes = processes or os.cpu_count() or 1
        self.isolate = isolate
        self._fn: TaskFn | None = None
        self._shared: Any = None
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[Future, int] = {}
        self._finished: list[tuple[int, Attempt]] = []  # inline mode
        self._probation: set[int] = set()  # tasks lost with a broken pool, run alone next

    @property
    def slots(self) -> int:
        return self.processes

    @property
    def queue_depth(self) -> int:
        # inline, a submitted task has already run: one at a time keeps each result saved
        # before the next task starts; on probation, one at a time tells whose worker died
        return 1 if self.inline or self._probation else 2 * self.processes

    @property
    def inline(self) -> bool:
        return self.processes == 1 and not self.isolate

    def start(self, fn: TaskFn, shared: Any) -> None:
        self.close()  # nothing of an earlier job may leak into this one
        self._fn, self._shared = fn, shared

    def submit(self, index: int, item: Any) -> None:
        assert self._fn is not None, "start() first"
        if self.inline:
            self._finished.append((index, call_task(self._fn, item, self._shared, this_node())))
            return
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                self.processes,
                mp_context=context,
                initializer=_init_worker,
                initargs=(self._fn, self._shared, os.getpid()),
            )
        try:
            future = self._pool.submit(_run, item)
        except BrokenProcessPool:  # a worker died since the last wait: lost like the rest
            future = Future()
            future.set_exception(BrokenProcessPool(WORKER_DIED))
        self._futures[future] = index

    def wait(self) -> list[tuple[int, Attempt]]:
        if self.inline:
            out, self._finished = self._finished, []
            return out
        ended, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
        out: list[tuple[int, Attempt]] = []
        lost: list[int] = []
        for future in ended:
            index = self._futures.pop(future)
            try:
                out.append((index, future.result()))
                self._probation.discard(index)
            except BrokenProcessPool:
                lost.append(index)
            except Exception as exc:  # e.g. an item or value that cannot be pickled
                out.append((index, Attempt(error=one_line(exc), retryable=False, node=this_node())))
        if lost:  # the rest of the pool's tasks went down with it
            for future, index in self._futures.items():
                future.cancel()
                lost.append(index)
            self._futures.clear()
            self._shutdown()
            alone = len(lost) == 1  # then it was this task's worker that died
            for index in lost:
                dead = Attempt(error=WORKER_DIED, charged=alone, node=this_node())
                out.append((index, dead))
                if alone:
                    self._probation.discard(index)
                else:
                    self._probation.add(index)
        return out

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        self._futures.clear()
        self._finished.clear()
        self._probation.clear()
        self._shutdown()

    def abort(self) -> None:
        """Kill the workers instead of waiting for the tasks they are running."""
        if self._pool is not None:
            # ProcessPoolExecutor has no public way to stop running work before Python 3.14
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.close()

    def describe(self) -> str:
        where = "this process" if self.inline else f"{self.processes} worker process(es)"
        return f"local ({where})"
