"""numpy's CPU dispatch: which SIMD paths this process runs, and how to make numpy run another.

numpy picks some kernels (sorts, many ufuncs) at import time by CPU, so the same seeded
search can meet, say, an AVX-512 ``argsort`` on one machine and introsort on another
(tests/test_nsga2_ties.py). ``NPY_DISABLE_CPU_FEATURES`` (names separated by spaces or
commas, read when numpy is imported) turns dispatched features off. numpy 1.26 ignores names
the CPU lacks, but refuses to import (``RuntimeError``) when asked to disable one of its
baseline features (those it was compiled for: SSE SSE2 SSE3 on x86-64), so the list is
computed here from numpy's own tables rather than written out.
"""

from __future__ import annotations

import os


def _umath():
    try:  # numpy >= 2 (and 1.26, which already has the alias)
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # pragma: no cover - older numpy
        from numpy.core import _multiarray_umath as umath
    return umath


def enabled_features() -> list[str]:
    """The CPU features numpy uses in this process (after ``NPY_DISABLE_CPU_FEATURES``)."""
    return [name for name, on in _umath().__cpu_features__.items() if on]


def dispatchable_features() -> list[str]:
    """Features numpy has dispatched kernels for beyond its baseline: those it may use or
    not depending on the CPU, hence the only ones that can be disabled."""
    umath = _umath()
    baseline = set(umath.__cpu_baseline__)
    return [f for f in umath.__cpu_dispatch__ if f not in baseline]


def features_for_another_path() -> list[str]:
    """Features to disable so that numpy runs a dispatch path other than this process's.

    On a CPU with AVX-512: numpy's AVX-512 features (the path of a CPU without AVX-512).
    Otherwise every dispatched feature this CPU has, and the rest with them: numpy's
    baseline kernels, which no CPU with AVX2 runs otherwise. Empty when numpy uses nothing
    beyond its baseline here (then there is no other path to run).
    """
    dispatch = dispatchable_features()
    on = set(enabled_features())
    avx512 = [f for f in dispatch if f.startswith("AVX512")]
    if on & set(avx512):
        return avx512
    return dispatch if on & set(dispatch) else []


def env_for(features: list[str]) -> dict[str, str]:
    """This process's environment with ``features`` disabled for a child's numpy."""
    return {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(features)}
