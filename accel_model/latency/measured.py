"""Op latencies measured on the machine at hand, cached on disk per device.

A graph-substitution search re-costs the same few hundred op signatures over and over, so
each distinct signature is measured once per device and the seconds are kept in one JSON
file per device id (``<cache root>/latency/<device id>.json``, the cache root being
``$FUSIONPLAN_CACHE_DIR`` or the user cache dir, like the zoo's). Tables shipped with the
package (``accel_model/latency/tables/<device id>.json``, from a measurement on that device)
are read first and never written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import platformdirs

from accel_model.latency.base import LatencyModel, Progress
from accel_model.latency.ort_measure import OrtMeasurer
from accel_model.latency.registry import LATENCY_MODELS
from accel_model.latency.signature import OpSignature
from accel_model.latency.torch_measure import TorchMeasurer
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import write_text_atomic

CACHE_ENV = "FUSIONPLAN_CACHE_DIR"  # the zoo's convention (data/zoo.py, cache_root)
TABLES_DIR = Path(__file__).resolve().parent / "tables"
FORMAT = 1


class Measurer(Protocol):
    """Times one signature on one device."""

    device_id: str  # file-name-safe; names the device, runtime version and threads

    def measure(self, sig: OpSignature) -> float:
        """Seconds; :class:`ConfigError` naming the op if it cannot run it."""
        ...


def default_cache_dir() -> Path:
    """``$FUSIONPLAN_CACHE_DIR/latency``, else the user cache dir's ``latency``."""
    root = os.environ.get(CACHE_ENV) or platformdirs.user_cache_dir("fusionplan")
    return Path(root).expanduser() / "latency"


class MeasuredLatency(LatencyModel):
    """Measures each distinct signature once on the device at hand and caches the seconds."""

    def __init__(
        self,
        measurer: Measurer,
        *,
        name: str = "measured",
        cache_dir: str | os.PathLike | None = None,
        tables_dir: str | os.PathLike | None = None,
    ) -> None:
        self.measurer = measurer
        self.name = name
        self.device_id = measurer.device_id
        self.cache_path = Path(cache_dir or default_cache_dir()) / f"{self.device_id}.json"
        table_path = Path(tables_dir or TABLES_DIR) / f"{self.device_id}.json"
        self._table = _read_table(table_path)  # shipped with the package: read-only
        self._cache = _read_table(self.cache_path)
        self.measured = 0  # signatures this instance has measured (cache misses)

    def latency(self, sig: OpSignature) -> float:
        return self.latencies([sig])[0]

    def latencies(
        self, sigs: Sequence[OpSignature], progress: Progress | None = None
    ) -> list[float]:
        """Looks every signature up, measures the missing ones, then saves them in one write."""
        keys = [sig.key() for sig in sigs]
        missing = {k: s for k, s in zip(keys, sigs, strict=True) if self._lookup(k) is None}
        new: dict[str, float] = {}
        try:
            for done, (key, sig) in enumerate(missing.items(), 1):
                new[key] = self.measurer.measure(sig)
                self.measured += 1
                if progress is not None:
                    progress(done, len(missing))
        finally:
            if new:  # also on an error or ^C: keep what was measured
                self._save(new)
        known = {**self._cache, **self._table}
        return [known[k] for k in keys]

    def describe(self) -> str:
        return f"measured on {self.device_id} (cache {self.cache_path})"

    def _lookup(self, key: str) -> float | None:
        return self._table.get(key, self._cache.get(key))

    def _save(self, new: dict[str, float]) -> None:
        # re-read first: another process may have added entries since we loaded the file
        self._cache = {**_read_table(self.cache_path), **self._cache, **new}
        payload = {"device": self.device_id, "format": FORMAT, "seconds": self._cache}
        write_text_atomic(self.cache_path, json.dumps(payload, indent=1, sort_keys=True) + "\n")


def _read_table(path: Path) -> dict[str, float]:
    """The ``seconds`` of a table or cache file; empty if there is none."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data["seconds"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ConfigError(f"latency table {path} is malformed ({err}); delete it") from err


# ----------------------------------------------------------------------------- factories
def ort_cpu(
    *,
    cache_dir: str | os.PathLike | None = None,
    tables_dir: str | os.PathLike | None = None,
    threads: int = 1,
    warmup: int = 2,
    repeats: int = 10,
) -> MeasuredLatency:
    """Measured with onnxruntime on the CPU."""
    measurer = OrtMeasurer(threads=threads, warmup=warmup, repeats=repeats)
    return MeasuredLatency(measurer, name="ort-cpu", cache_dir=cache_dir, tables_dir=tables_dir)


def torch_model(
    *,
    cache_dir: str | os.PathLike | None = None,
    tables_dir: str | os.PathLike | None = None,
    device: str | None = None,
    threads: int = 1,
    warmup: int = 2,
    repeats: int = 10,
) -> MeasuredLatency:
    """Measured with PyTorch (CUDA if available, else CPU)."""
    measurer = TorchMeasurer(device=device, threads=threads, warmup=warmup, repeats=repeats)
    return MeasuredLatency(measurer, name="torch", cache_dir=cache_dir, tables_dir=tables_dir)


def measured(
    *,
    cache_dir: str | os.PathLike | None = None,
    tables_dir: str | os.PathLike | None = None,
    threads: int = 1,
    warmup: int = 2,
    repeats: int = 10,
) -> MeasuredLatency:
    """Measured on the device at hand: CUDA via torch if there is a GPU, else ORT on the CPU."""
    import torch  # heavy: 2 s, only to ask whether there is a GPU

    if torch.cuda.is_available():
        measurer: Measurer = TorchMeasurer(device="cuda", warmup=warmup, repeats=repeats)
    else:
        measurer = OrtMeasurer(threads=threads, warmup=warmup, repeats=repeats)
    return MeasuredLatency(measurer, cache_dir=cache_dir, tables_dir=tables_dir)


LATENCY_MODELS.register("measured", measured)
LATENCY_MODELS.register("ort-cpu", ort_cpu)
LATENCY_MODELS.register("torch", torch_model)
