"""Refactors keep plans bit for bit: recompute recorded plan digests and compare.

``tests/regression/plan_digests.json`` was written before the package restructure by
``python -m tests.regression.plan_digests --write`` (every zoo model, LBDF and BRR, seeds
0-2, LS / NSGA-II / exact, plus explainer splitters on MobileNetV2). The default run checks
two small models; ``-m bench`` checks all 246 digests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.regression.plan_digests import cases, digest, key

DIGESTS = json.loads((Path(__file__).parent / "regression" / "plan_digests.json").read_text())
# not squeezenet: test_cli checks that a bad sweep never exports it
QUICK_MODELS = ["resnet18", "mobilenet_v3_small"]


@pytest.mark.slow
@pytest.mark.parametrize("case", cases(QUICK_MODELS), ids=key)
def test_plans_match_the_recorded_digests(case):
    assert digest(case) == DIGESTS[key(case)]


@pytest.mark.bench
@pytest.mark.parametrize("case", [c for c in cases(list({k.split("/")[0]: 0 for k in DIGESTS}))
                                  if key(c) in DIGESTS], ids=key)  # fmt: skip
def test_every_recorded_plan_is_unchanged(case):
    assert digest(case) == DIGESTS[key(case)]
