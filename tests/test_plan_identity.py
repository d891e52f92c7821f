"""Refactors keep plans bit for bit: recompute recorded plan digests and compare.

``tests/regression/plan_digests.json`` was written before the package restructure by
``python -m tests.regression.plan_digests --write`` (every zoo model, LBDF and BRR, seeds
0-2, LS / NSGA-II / exact). The default run checks two small models; ``-m bench`` checks all
216. Fifteen LBDF exact-search digests (MobileNetV2, SqueezeNet, ResNet-50/101/152, seeds
0-2) were recorded again during issue 26: since issue 10's A* heuristic (commit f07446a,
found by bisection) the exact search stops at another optimum of the same DRAM there (the
DRAM bytes equal the old record on all fifteen).

The explainer-guided plans (MobileNetV2, ``explainer_digests.json``) also depend on the
shipped weights: they are recorded with the checkpoints' hashes, and a retrained checkpoint
fails :func:`test_the_explainer_digests_were_recorded_with_the_shipped_checkpoints` until
they are recorded again.

Plans must not depend on the CPU either: numpy dispatches some kernels (sorts among them)
by CPU features, so the quick cases run a second time in a subprocess on another of numpy's
dispatch paths (``NPY_DISABLE_CPU_FEATURES``; :mod:`tests.regression.numpy_dispatch`):
without AVX-512 on a CPU that has it, numpy's baseline kernels on one that has not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.regression.numpy_dispatch import env_for, features_for_another_path
from tests.regression.plan_digests import (
    cases,
    checkpoint_digests,
    digest,
    explainer_cases,
    key,
)

REGRESSION = Path(__file__).parent / "regression"
DIGESTS = json.loads((REGRESSION / "plan_digests.json").read_text())
EXPLAINED = json.loads((REGRESSION / "explainer_digests.json").read_text())
RECORD_EXPLAINED = "python -m tests.regression.plan_digests --write-explainers " + str(
    Path("tests/regression/explainer_digests.json")
)
# not squeezenet: test_cli checks that a bad sweep never exports it
QUICK_MODELS = ["resnet18", "mobilenet_v3_small"]


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(QUICK_MODELS), ids=key)
def test_plans_match_the_recorded_digests(case):
    assert digest(case) == DIGESTS[key(case)]


CHILD = """
import json
from tests.regression.numpy_dispatch import enabled_features
from tests.regression.plan_digests import cases, digest, key
found = {key(c): digest(c) for c in cases(%r)}
print(json.dumps({"enabled": enabled_features(), "digests": found}))
"""


@pytest.mark.slow
def test_plans_match_the_recorded_digests_on_another_numpy_dispatch_path():
    disable = features_for_another_path()
    if not disable:
        pytest.skip("numpy uses no SIMD features beyond its baseline on this CPU")
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run(
        [sys.executable, "-c", CHILD % QUICK_MODELS],
        cwd=root,
        env=env_for(disable),  # FUSIONPLAN_CACHE_DIR too: the session's zoo exports
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    child = json.loads(run.stdout.strip().splitlines()[-1])
    assert not set(child["enabled"]) & set(disable), child["enabled"]
    expected = {key(c): DIGESTS[key(c)] for c in cases(QUICK_MODELS)}
    differ = sorted(k for k in expected if child["digests"].get(k) != expected[k])
    assert not differ, f"plans differ with NPY_DISABLE_CPU_FEATURES={' '.join(disable)}: {differ}"


@pytest.mark.bench
@pytest.mark.parametrize("case", [c for c in cases(list({k.split("/")[0]: 0 for k in DIGESTS}))
                                  if key(c) in DIGESTS], ids=key)  # fmt: skip
def test_every_recorded_plan_is_unchanged(case):
    assert digest(case) == DIGESTS[key(case)]


def test_the_explainer_digests_were_recorded_with_the_shipped_checkpoints():
    assert checkpoint_digests() == EXPLAINED["checkpoints"], (
        f"the shipped checkpoints changed: record the explainer digests ({RECORD_EXPLAINED})"
    )


@pytest.mark.bench
@pytest.mark.parametrize("case", explainer_cases(), ids=key)
def test_every_explainer_guided_plan_is_unchanged(case):
    assert checkpoint_digests() == EXPLAINED["checkpoints"], RECORD_EXPLAINED
    assert digest(case) == EXPLAINED["digests"][key(case)]
