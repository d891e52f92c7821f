"""The cost model as an oracle: fusion-group validity and DRAM from a black box, counted.

A user with a real NPU toolchain or a slow simulator knows whether a group fits and what it
moves only by asking. An :class:`Oracle` answers one :func:`group_query` (a JSON-able
description of the group) with an :class:`OracleAnswer`; :class:`OracleCostModel` puts any
oracle behind the :class:`~accel_model.base.CostModel` protocol, so the heuristic searches
and the splitters plan with it unchanged. Every group new to the cost model's memo is one
*oracle query* (``CacheStats.misses``, with its seconds); the built-in models are counted
the same way, which is what makes searches comparable at equal queries
(docs/design.md, "Oracles").

Two kinds of black box: :class:`CallableOracle` (a Python function) and
:class:`ProgramOracle` (an external program speaking JSON lines on stdin/stdout, started once
and kept running). A black box proves nothing about groups it was not asked about, so the
exact search, ``auto``, ``lns`` and the certificate, which reason about every group through
the built-in models' bounds, are refused with one (``PlanRequest.check``), and a plan
priced by one has no bound, energy or schedules (``CostModel.white_box``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import numbers
import os
import selectors
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from accel_model.accelerator import Accelerator
from accel_model.base import CostModel, GroupCost
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, OpGraph, bits


class OracleError(ConfigError):
    """An oracle could not be reached or gave an answer that is not one (one line)."""


@dataclass(frozen=True)
class OracleAnswer:
    """What an oracle says of a group: whether it fits the buffer, the DRAM bytes its
    schedule moves, and (optional, 0 if unknown) the buffer bytes it holds."""

    fits: bool
    dram_bytes: int
    buffer_bytes: int = 0


class Oracle(Protocol):
    """Answers :func:`group_query` descriptions; ``close`` releases what it holds."""

    name: str

    def ask(self, query: dict[str, Any]) -> OracleAnswer: ...

    def close(self) -> None: ...


def group_query(graph: OpGraph, group: Group, accel: Accelerator) -> dict[str, Any]:
    """The JSON-able description of ``group`` an oracle answers (docs/design.md, "Oracles"):
    the accelerator, each op in topological order with its attributes and tensor names, and
    each tensor it touches with its (C, H, W) shape, whether it is made inside the group and
    whether it is read outside it (or is a graph output)."""
    t, cons, outs = graph.tensors, graph.consumer_mask, graph.graph_output_set
    ops, tensors = [], {}
    for v in bits(group):
        n = graph.nodes[v]
        ops.append(
            {
                "name": n.name,
                "op_type": n.op_type,
                "kind": n.kind,
                "kernel": list(n.kernel),
                "stride": list(n.stride),
                "pads": list(n.pads),
                "groups": n.groups,
                "dilation": list(n.dilation),
                "weights": n.weights,
                "macs": n.macs,
                "inputs": [t[i].name for i in n.inputs],
                "outputs": [t[o].name for o in n.outputs],
            }
        )
        for ti in (*n.inputs, *n.outputs):
            p = t[ti].producer
            tensors[t[ti].name] = {
                "shape": list(t[ti].shape),
                "made_inside": p >= 0 and bool(group >> p & 1),
                "read_outside": ti in outs or bool(cons[ti] & ~group),
            }
    return {
        "scheme": accel.scheme,
        "buffer_bytes": accel.buffer_bytes,
        "bytes_per_element": accel.bytes_per_element,
        "ops": ops,
        "tensors": tensors,
    }


def parse_answer(raw: Any, where: str) -> OracleAnswer:
    """An oracle's reply as an :class:`OracleAnswer`: a mapping with ``fits`` and
    ``dram_bytes`` (``buffer_bytes`` optional), a ``(fits, dram[, buffer])`` tuple or an
    answer itself; anything else is an :class:`OracleError` naming ``where``."""
    if isinstance(raw, OracleAnswer):
        raw = {"fits": raw.fits, "dram_bytes": raw.dram_bytes, "buffer_bytes": raw.buffer_bytes}
    elif isinstance(raw, tuple | list) and len(raw) in (2, 3):
        raw = dict(zip(("fits", "dram_bytes", "buffer_bytes"), raw, strict=False))
    if not isinstance(raw, Mapping):
        raise OracleError(f"{where}: expected an object with fits and dram_bytes, got {raw!r}")
    missing = [k for k in ("fits", "dram_bytes") if k not in raw]
    if missing:
        raise OracleError(f"{where}: the answer has no {' or '.join(missing)}: {dict(raw)!r}")
    fits = raw["fits"]
    if not isinstance(fits, bool):
        raise OracleError(f"{where}: 'fits' must be true or false, got {fits!r}")
    return OracleAnswer(
        fits, _bytes(raw["dram_bytes"], "dram_bytes", where),
        _bytes(raw.get("buffer_bytes", 0), "buffer_bytes", where),
    )  # fmt: skip


def _bytes(value: Any, key: str, where: str) -> int:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or value != int(value):
        raise OracleError(f"{where}: '{key}' must be a whole number of bytes >= 0, got {value!r}")
    return int(value)


class CallableOracle:
    """A Python function ``fn(query) -> answer`` as an oracle (any :func:`parse_answer`
    form). ``load`` builds one from ``"package.module:function"``."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", "callable")

    @classmethod
    def load(cls, target: str) -> CallableOracle:
        module, _, attr = target.partition(":")
        if not module or not attr:
            raise OracleError(f"oracle callable must be 'module:function', got {target!r}")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise OracleError(f"oracle callable {target!r} cannot be loaded: {exc}") from exc
        if not callable(fn):
            raise OracleError(f"oracle callable {target!r} is not callable")
        return cls(fn, target)

    def ask(self, query: dict[str, Any]) -> OracleAnswer:
        return parse_answer(self.fn(query), f"oracle {self.name}")

    def close(self) -> None:
        """Nothing held."""


class ProgramOracle:
    """An external program as an oracle: started once, it reads one query per line on
    stdin and writes one answer per line on stdout, both JSON (its stderr passes through).
    ``timeout_s`` bounds each exchange, sending the query and reading the whole answer line;
    a program that exits, stalls or writes something else than an answer is an
    :class:`OracleError` and is stopped. One line per query is the contract: a program that
    writes two answers for one query is read one query behind."""

    def __init__(self, command: str | list[str], timeout_s: float = 60.0) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise OracleError("oracle program: the command is empty")
        self.name = shlex.join(self.argv)
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._asked = 0

    def _start(self) -> subprocess.Popen[bytes]:
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            raise OracleError(f"oracle program {self.name!r} cannot start: {exc}") from exc
        for pipe in (proc.stdin, proc.stdout):  # a stalled program must not block us
            os.set_blocking(pipe.fileno(), False)  # type: ignore[union-attr]
        self._proc = proc
        return proc

    def ask(self, query: dict[str, Any]) -> OracleAnswer:
        proc = self._proc or self._start()
        self._asked += 1
        where = f"oracle program {self.name!r}, query {self._asked}"
        try:
            return parse_answer(self._exchange(proc, query, where), where)
        except OracleError:
            self._abandon()  # a program that failed once is not asked again
            raise

    def _exchange(self, proc: subprocess.Popen[bytes], query: dict[str, Any], where: str) -> Any:
        """Send ``query`` and read one JSON line back, both within ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        self._send(
            proc, (json.dumps(query, separators=(",", ":")) + "\n").encode(), deadline, where
        )
        line = self._receive(proc, deadline, where)
        try:
            return json.loads(line, parse_constant=_no_constant)
        except ValueError as exc:  # not JSON, or NaN / Infinity
            raise OracleError(f"{where}: the answer is not JSON: {line.strip()[:80]!r}") from exc

    def _send(
        self, proc: subprocess.Popen[bytes], data: bytes, deadline: float, where: str
    ) -> None:
        fd = proc.stdin.fileno()  # type: ignore[union-attr]
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            while data:
                if not sel.select(max(deadline - time.monotonic(), 0)):
                    raise OracleError(
                        f"{where}: the program took no query for {self.timeout_s:g} s"
                    )
                try:
                    data = data[os.write(fd, data) :]
                except BrokenPipeError as exc:
                    raise OracleError(f"{where}: the program exited (code {proc.wait()})") from exc

    def _receive(self, proc: subprocess.Popen[bytes], deadline: float, where: str) -> str:
        fd, chunks = proc.stdout.fileno(), []  # type: ignore[union-attr]
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not chunks or not chunks[-1].endswith(b"\n"):
                if not sel.select(max(deadline - time.monotonic(), 0)):
                    raise OracleError(f"{where}: no answer within {self.timeout_s:g} s")
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    code = proc.wait()
                    raise OracleError(
                        f"{where}: the program exited (code {code}) without answering"
                    )
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(BrokenPipeError):  # it may have exited already
            proc.stdin.close()  # type: ignore[union-attr]
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]

    def _abandon(self) -> None:
        """Stop a program that failed (stalled, exited, answered wrongly) at once."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self.close()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number of bytes")


def as_oracle(source: Oracle | Callable[[dict[str, Any]], Any]) -> Oracle:
    """``source`` if it is an oracle (it has ``ask``), else a function wrapped as one."""
    if hasattr(source, "ask"):
        return source  # type: ignore[return-value]
    if callable(source):
        return CallableOracle(source)
    raise OracleError(f"an oracle must have ask(query) or be callable, got {source!r}")


class OracleCostModel(CostModel):
    """Any :class:`Oracle` behind the cost-model protocol: each group is asked once (the
    memo), and nothing else about the accelerator is assumed (no single-layer tilings, no
    bounds, no schedules)."""

    name: ClassVar[str] = "oracle"
    white_box: ClassVar[bool] = False

    def __init__(self, graph: OpGraph, accel: Accelerator, oracle: Oracle) -> None:
        super().__init__(graph, accel)
        self.oracle = oracle

    def _evaluate(self, group: Group) -> GroupCost:
        answer = self.oracle.ask(group_query(self.graph, group, self.accel))
        return GroupCost(answer.buffer_bytes, answer.dram_bytes, answer.fits)

    def _compute(self, group: Group) -> GroupCost:
        return self._evaluate(group)

    def compute_uncached(self, group: Group) -> GroupCost:
        """The oracle's word is final: a plan check reads the memo instead of asking again."""
        return self.cost(group)

    def monotone_over_downsets(self) -> bool:
        return False  # nothing is known about groups not asked about

    def close(self) -> None:
        self.oracle.close()
