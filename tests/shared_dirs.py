"""Session directories that every pytest-xdist worker shares (one per name)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def shared_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """``name`` under the run's common temp root under xdist, a fresh temp dir otherwise."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = factory.getbasetemp().parent / name
        path.mkdir(exist_ok=True)
        return path
    return factory.mktemp(name)
