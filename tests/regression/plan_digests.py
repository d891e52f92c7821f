"""Plan digests: a fingerprint of the plan every search returns, to prove refactors keep plans.

``python -m tests.regression.plan_digests --write FILE`` records, for every zoo model, both
schemes, seeds 0-2 and the searches below, a SHA-256 of the plan's groups (ONNX node names,
in execution order) and its DRAM bytes, under the paper's single-layer convention (the only
one when they were recorded; docs/cost-model.md, "Single-layer cost"); ``--check FILE``
recomputes and compares them. Only the public API (``fp.plan``) is used, so the same script
runs before and after a restructure.

Plans split by a GNN explainer depend on the trained weights as well as on the cost model,
so they are recorded apart (``--write-explainers FILE``) with the SHA-256 of every
checkpoint they read: retraining the shipped weights means recording them again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import fusionplan as fp
from explainers.checkpoints import checkpoint_name, weights_dir
from fusionplan.data.zoo import zoo_names

SEEDS = (0, 1, 2)
SCHEMES = ("lbdf", "brr")
BUFFER = "256KB"
BUDGET = 300
SEARCHES = ("ls", "nsga2", "exact")
# the GNN-guided splitters are slower: one model, every seed, both schemes
EXPLAINER_MODEL = "mobilenet_v2"
EXPLAINER_CASES = (("rs", "random"), ("rs", "gnne"), ("rs", "pg"), ("rs", "rg"), ("ls", "rg"))
CHECKPOINT_KINDS = ("gin", "pg", "rg")


def cases(models: list[str]) -> list[tuple[str, str, str, str, int]]:
    """(model, scheme, search, splitter, seed) for every digest the cost model alone decides."""
    return [
        (m, scheme, search, "tree", seed)
        for m in models
        for scheme in SCHEMES
        for search in SEARCHES
        for seed in SEEDS
    ]


def explainer_cases() -> list[tuple[str, str, str, str, int]]:
    """The cases split by a GNN explainer (their plans depend on the trained weights)."""
    return [
        (EXPLAINER_MODEL, scheme, search, splitter, seed)
        for scheme in SCHEMES
        for search, splitter in EXPLAINER_CASES
        for seed in SEEDS
    ]


def checkpoint_digests() -> dict[str, str]:
    """SHA-256 of every checkpoint the explainer cases read (the weights in use)."""
    found = {}
    for scheme in SCHEMES:
        for kind in CHECKPOINT_KINDS:
            name = checkpoint_name(kind, scheme)
            found[name] = hashlib.sha256((weights_dir() / name).read_bytes()).hexdigest()
    return found


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


def compute(
    found_cases: list[tuple[str, str, str, str, int]], only: set[str] | None = None
) -> dict[str, dict]:
    result = {}
    for case in found_cases:
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
    parser.add_argument(
        "--write-explainers", type=Path, help="record the explainer cases and checkpoint hashes"
    )
    parser.add_argument("--check", type=Path, help="compare against this JSON file")
    parser.add_argument("--models", help="comma list (default: the whole zoo)")
    args = parser.parse_args()
    models = args.models.split(",") if args.models else list(zoo_names())
    if args.write:
        found = compute(cases(models))
        args.write.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(found)} digests to {args.write}")
        return 0
    if args.write_explainers:
        record = {"checkpoints": checkpoint_digests(), "digests": compute(explainer_cases())}
        args.write_explainers.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(record['digests'])} digests to {args.write_explainers}")
        return 0
    if args.check:
        expected = json.loads(args.check.read_text())
        found = compute(cases(models), only=set(expected))
        bad = sorted(k for k in found if found[k] != expected[k])
        print(f"{len(found)} plans compared, {len(bad)} differ")
        for k in bad:
            print(f"  {k}: expected {expected[k]}, got {found[k]}")
        return 1 if bad else 0
    parser.error("give --write FILE or --check FILE")
    return 2


if __name__ == "__main__":
    sys.exit(main())
