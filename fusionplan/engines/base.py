"""The engine protocol and the one driver loop every fan-out job runs (docs/design.md, "Engines").

A job is a pure function ``fn(item, shared) -> value`` over a list of items; ``shared`` is the
large read-only input (op graphs, weights) that an engine ships to each worker once. Engines
only move work and results; :func:`run_tasks` owns what must not differ between them: retries,
results independent of completion order. The driver alone writes outputs, so a killed worker
can never leave a torn file behind.
"""

from __future__ import annotations

import socket
import time
import traceback
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from fusionplan.ir.errors import ConfigError, FusionPlanError

TaskFn = Callable[[Any, Any], Any]
"""``fn(item, shared) -> value``: module-level (workers import it by name), deterministic."""

WORKER_DIED = "the worker process died (crashed, or killed e.g. for memory) running this task"


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """What one try of one task reported (built in the worker, or by the engine if it died)."""

    value: Any = None
    error: str | None = None
    retryable: bool = True  # bad input (a FusionPlanError) fails the same way every time
    charged: bool = True  # False: lost with another task's dead worker, not this task's fault
    node: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Outcome:
    """A task's final result: its value, or the error of its last try."""

    index: int
    value: Any
    error: str | None
    node: str
    attempts: int
    seconds: float  # of the last try, in the worker

    @property
    def ok(self) -> bool:
        return self.error is None


def check_processes(processes: int | None) -> None:
    if processes is not None and (
        isinstance(processes, bool) or not isinstance(processes, int) or processes < 1
    ):
        raise ConfigError(f"processes must be a whole number >= 1, got {processes!r}")


def this_node() -> str:
    return socket.gethostname()


def call_task(fn: TaskFn, item: Any, shared: Any, node: str) -> Attempt:
    """Run one try in the worker; an exception becomes an error string, never a crash."""
    began = time.perf_counter()
    try:
        value = fn(item, shared)
    except FusionPlanError as exc:
        seconds = time.perf_counter() - began
        return Attempt(error=str(exc), retryable=False, node=node, seconds=seconds)
    except Exception as exc:
        return Attempt(error=one_line(exc), node=node, seconds=time.perf_counter() - began)
    return Attempt(value=value, node=node, seconds=time.perf_counter() - began)


def one_line(exc: BaseException) -> str:
    """An exception as one line: type, message and the innermost frame."""
    last = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


class Engine(ABC):
    """Runs tasks somewhere; :func:`run_tasks` drives it."""

    name = "engine"

    @property
    @abstractmethod
    def slots(self) -> int:
        """Tasks that run at once."""

    @property
    def queue_depth(self) -> int:
        """Tasks the driver keeps submitted: twice the slots, so no worker waits for work."""
        return 2 * self.slots

    @abstractmethod
    def start(self, fn: TaskFn, shared: Any) -> None:
        """Get ready to run ``fn``; ``shared`` goes to each worker once."""

    @abstractmethod
    def submit(self, index: int, item: Any) -> None: ...

    @abstractmethod
    def wait(self) -> list[tuple[int, Attempt]]:
        """Block until at least one submitted task ends; every ended task's attempt."""

    @abstractmethod
    def close(self) -> None:
        """Release workers (idempotent); tasks still queued or running are dropped."""

    def abort(self) -> None:
        """Stop at once (the driver was interrupted): do not wait for running tasks."""
        self.close()

    def describe(self) -> str:
        return f"{self.name} ({self.slots} at once)"


def run_tasks(
    engine: Engine,
    fn: TaskFn,
    items: Sequence[Any],
    *,
    shared: Any = None,
    retries: int = 2,
) -> Iterator[Outcome]:
    """Run ``fn`` over ``items`` on ``engine``; yield each task's outcome as it ends.

    A try that raises (other than bad input) or whose worker dies is retried up to
    ``retries`` times, then yielded as a failed outcome: the caller records it, never drops
    it. A try the engine reports as not ``charged`` (lost with another task's worker) is
    repeated without counting. Outcomes arrive in completion order; callers key results by
    ``index``. The engine is closed when the iteration ends, and aborted (running tasks
    dropped) when it stops early; callers use :class:`Job`, whose ``with`` block makes an
    error in their loop body stop the engine at once, not when the generator is collected.
    """
    if retries < 0:
        raise ConfigError(f"retries must be >= 0, got {retries}")
    total = len(items)
    tries = [0] * total
    todo = deque(range(total))
    in_flight = 0
    if not total:
        return
    engine.start(fn, shared)
    finished = False
    try:
        while todo or in_flight:
            while todo and in_flight < engine.queue_depth:
                i = todo.popleft()
                tries[i] += 1
                engine.submit(i, items[i])
                in_flight += 1
            for i, attempt in engine.wait():
                in_flight -= 1
                if not attempt.charged:
                    tries[i] -= 1  # a try it never really had
                    todo.appendleft(i)
                    continue
                if attempt.error is not None and attempt.retryable and tries[i] <= retries:
                    todo.appendleft(i)  # again, before anything new
                    continue
                yield Outcome(
                    i, attempt.value, attempt.error, attempt.node, tries[i], attempt.seconds
                )
        finished = True
    finally:
        # stopped early (an error, Ctrl-C, the caller's break): drop the work in flight now
        if finished:
            engine.close()
        else:
            engine.abort()


class Job:
    """:func:`run_tasks` as a context manager that keeps what the run measured: every
    outcome, and ``driver_s``, the time the caller spent handling outcomes (saving results:
    the serial work that ``fusionplan bench scaling`` needs). Leaving the ``with`` block
    stops the engine at once, also when the caller's loop body raises.
    """

    def __init__(
        self,
        engine: Engine,
        fn: TaskFn,
        items: Sequence[Any],
        *,
        shared: Any = None,
        retries: int = 2,
    ) -> None:
        self._run = run_tasks(engine, fn, items, shared=shared, retries=retries)
        self.outcomes: list[Outcome] = []
        self.driver_s = 0.0

    def __iter__(self) -> Iterator[Outcome]:
        for outcome in self._run:
            self.outcomes.append(outcome)
            began = time.perf_counter()
            yield outcome  # the caller handles it before asking for the next
            self.driver_s += time.perf_counter() - began

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: object) -> None:
        self._run.close()

    def tasks_per_node(self) -> str:
        return tasks_per_node(self.outcomes)


def tasks_per_node(outcomes: Sequence[Outcome]) -> str:
    """One line for the driver's summary: how many tasks each node ran (and failed)."""
    ran = Counter(o.node for o in outcomes)
    failed = Counter(o.node for o in outcomes if not o.ok)
    parts = [
        f"{node} {n}" + (f" ({failed[node]} failed)" if failed[node] else "")
        for node, n in sorted(ran.items())
    ]
    return "tasks per node: " + (", ".join(parts) if parts else "none")
