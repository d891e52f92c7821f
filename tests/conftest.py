"""Shared test setup: every test runs against a throw-away fusionplan cache.

The cache root (``FUSIONPLAN_CACHE_DIR``) is set for the whole session, so zoo exports made
by one test (in-process or in a ``fusionplan`` subprocess, which inherits the environment)
are reused by the next and never touch the user's cache. Under pytest-xdist the workers
share one directory (zoo exports are published atomically, so concurrent writers are safe).
"""

from __future__ import annotations

import pytest

from tests.shared_dirs import shared_dir

CACHE_ENV = "FUSIONPLAN_CACHE_DIR"


@pytest.fixture(scope="session", autouse=True)
def fusionplan_cache(tmp_path_factory: pytest.TempPathFactory):
    root = shared_dir(tmp_path_factory, "fusionplan-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(root))
        yield root
