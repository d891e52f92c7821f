"""Time one op with PyTorch: on the GPU when there is one, else on the CPU.

Each ONNX op runs as its :mod:`accel_model.latency.torch_ops` kernel (the call a framework
would make); the op's latency is the median of repeated calls, timed with CUDA events on a
GPU (so host overhead between kernels is left out) and with the wall clock on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from accel_model.latency.bench import cpu_model, median_seconds, operand_arrays, slug
from accel_model.latency.signature import OpSignature
from accel_model.latency.torch_ops import torch_kernel
from fusionplan.ir.errors import ConfigError

Run = Callable[[], Any]


class TorchMeasurer:
    """Measures signatures with PyTorch on ``device`` (default: CUDA if available)."""

    def __init__(
        self,
        *,
        device: str | None = None,
        threads: int = 1,
        warmup: int = 2,
        repeats: int = 10,
        budget_s: float = 0.1,
    ) -> None:
        import torch  # heavy: 2 s, and only measuring needs it

        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.threads = threads  # CPU only: intra-op threads while measuring
        self.warmup, self.repeats, self.budget_s = warmup, repeats, budget_s
        if self.device.startswith("cuda"):
            gpu = torch.cuda.get_device_name(self.device)
            self.device_id = slug(f"torch-cuda-{gpu}-{torch.__version__}")
        else:
            self.device_id = slug(f"torch-cpu-{torch.__version__}-{cpu_model()}-{threads}t")

    def measure(self, sig: OpSignature) -> float:
        """Median seconds of one call of the op's torch equivalent."""
        torch = self._torch
        arrays = operand_arrays(sig)
        tensors = [None if a is None else torch.from_numpy(a).to(self.device) for a in arrays]
        try:
            with torch.inference_mode():
                kernel = torch_kernel(sig, arrays, torch)

                def run() -> Any:
                    return kernel(tensors)

                run()
                if self.device.startswith("cuda"):
                    return self._cuda_seconds(run)
                return self._cpu_seconds(run)
        except (RuntimeError, ValueError, TypeError, IndexError) as err:
            raise ConfigError(f"torch cannot run {sig.op}: {str(err).splitlines()[0]}") from err

    def _cpu_seconds(self, run: Run) -> float:
        """Wall time with ``threads`` intra-op threads.

        torch's default, one thread per core, is at the mercy of other load: on a busy
        2-core machine a parallel op waits a whole scheduler tick for its second thread.
        """
        before = self._torch.get_num_threads()
        self._torch.set_num_threads(self.threads)
        try:
            return median_seconds(run, self.warmup, self.repeats, self.budget_s)
        finally:
            self._torch.set_num_threads(before)

    def _cuda_seconds(self, run: Run) -> float:
        cuda = self._torch.cuda
        for _ in range(self.warmup):
            run()
        events = [
            (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True))
            for _ in range(self.repeats)
        ]
        for start, end in events:
            start.record()
            run()
            end.record()
        cuda.synchronize()
        return float(np.median([start.elapsed_time(end) for start, end in events])) / 1e3
