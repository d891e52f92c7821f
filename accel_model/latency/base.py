"""The interface every op-latency model implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from accel_model.latency.signature import OpSignature

Progress = Callable[[int, int], None]
"""``progress(done, total)``, called as a batch of latencies is worked through."""


class LatencyModel(ABC):
    """Seconds one ONNX op takes on some device, for a graph-substitution cost."""

    name: str  # the registry name it was made under

    @abstractmethod
    def latency(self, sig: OpSignature) -> float:
        """Seconds one execution of ``sig`` takes."""

    def latencies(
        self, sigs: Sequence[OpSignature], progress: Progress | None = None
    ) -> list[float]:
        """:meth:`latency` of each of ``sigs``; a model that measures batches its work here."""
        out = []
        for i, sig in enumerate(sigs):
            out.append(self.latency(sig))
            if progress is not None:
                progress(i + 1, len(sigs))
        return out

    @abstractmethod
    def describe(self) -> str:
        """One line: which device and which figures the latencies come from."""
