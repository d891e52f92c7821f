"""Plan digests: a fingerprint of the plan every search returns, to prove refactors keep plans.

``python -m tests.regression.plan_digests --write FILE`` records, for every zoo model, both
schemes, seeds 0-2 and the searches below, a SHA-256 of the plan's groups (ONNX node names,
in execution order) and its DRAM bytes, under the paper's single-layer convention (the only
one when they were recorded; docs/cost-model.md, "Single-layer cost"); ``--check FILE``
recomputes and compares them. Only the public API (``fp.plan``) is used, so the same script
runs before and after a restructure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import fusionplan as fp
from data.zoo import zoo_names

SEEDS = (0, 1, 2)
SCHEMES = ("lbdf", "brr")
BUFFER = "256KB"
BUDGET = 300
SEARCHES = ("ls", "nsga2", "exact")
# the GNN-guided splitters are slower: one model, every seed, both schemes
EXPLAINER_MODEL = "mobilenet_v2"
EXPLAINER_CASES = (("rs", "random"), ("rs", "gnne"), ("rs", "pg"), ("rs", "rg"), ("ls", "rg"))


def cases(models: list[str]) -> list[tuple[str, str, str, str, int]]:
    """(model, scheme, search, splitter, seed) for every digest."""
    out = [
        (m, scheme, search, "tree", seed)
        for m in models
        for scheme in SCHEMES
        for search in SEARCHES
        for seed in SEEDS
    ]
    if EXPLAINER_MODEL in models:
        out += [
            (EXPLAINER_MODEL, scheme, search, splitter, seed)
            for scheme in SCHEMES
            for search, splitter in EXPLAINER_CASES
            for seed in SEEDS
        ]
    return out


def key(case: tuple[str, str, str, str, int]) -> str:
    return "/".join(map(str, case))


def digest(case: tuple[str, str, str, str, int]) -> dict:
    model, scheme, search, splitter, seed = case
    plan = fp.plan(
        model,
        BUFFER,
        scheme,
        search=search,
        splitter=splitter,
        budget=BUDGET,
        seed=seed,
        profile="paper",  # the conventions the digests were recorded under (the paper's BRR)
    )
    data = plan.to_dict()
    groups = [g["nodes"] for g in data["groups"]]
    h = hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:16]
    return {"groups_sha256": h, "dram_bytes": data["metrics"]["dram_bytes"]}


def compute(models: list[str], only: set[str] | None = None) -> dict[str, dict]:
    result = {}
    for case in cases(models):
        k = key(case)
        if only is not None and k not in only:
            continue
        t0 = time.perf_counter()
        result[k] = digest(case)
        print(f"{k}: {result[k]} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="record digests into this JSON file")
    parser.add_argument("--check", type=Path, help="compare against this JSON file")
    parser.add_argument("--models", help="comma list (default: the whole zoo)")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else list(zoo_names())
    if args.write:
        found = compute(models)
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(found)} digests to {args.write}")
        return 0
    if args.check:
        expected = json.loads(args.check.read_text())
        found = compute(models, only=set(expected))
        bad = sorted(k for k in found if found[k] != expected[k])
        print(f"{len(found)} plans compared, {len(bad)} differ")
        for k in bad:
            print(f"  {k}: expected {expected[k]}, got {found[k]}")
        return 1 if bad else 0
    parser.error("give --write FILE or --check FILE")
    return 2


if __name__ == "__main__":
    sys.exit(main())
