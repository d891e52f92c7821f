"""``fusionplan bench fidelity``'s replay table: every group of every zoo plan, and random
groups of random graphs, built as the schedule its cost model priced and replayed
(docs/cost-model.md, "Schedules and replay").

A group is *equal* when the replay's DRAM bytes and peak equal the closed form's
``dram_bytes`` and ``buffer_bytes``; it *differs* otherwise (replay below or above, per
figure); it *fails* when the replay raises (data not in the buffer, a region that
overflows, regions over the buffer: *over*); it has *no schedule* when no builder writes it
out (a loop order without a builder yet, or a pattern a builder refuses).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from accel_model import Accelerator, make_cost_model
from accel_model.base import CostModel
from accel_model.replay import ReplayError, replay
from accel_model.schedule import ScheduleError, build_schedule
from fusionplan.app.bench import machine_line, per_model
from fusionplan.app.bench.runner import ResultStore
from fusionplan.app.pipeline import PlanRequest, plan_graph
from fusionplan.data.synthetic import randwire
from fusionplan.data.zoo import load_zoo_model
from fusionplan.engines import Engine
from fusionplan.ir.graph import Group, OpGraph, bits
from fusionplan.ir.onnx_import import graph_from_proto

PROFILES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fusionplan", ("lbdf", "brr")),
    ("paper", ("lbdf", "brr")),
    ("optimus", ("brr",)),
)
RANDOM_GROUPS = 10_000
Progress = Callable[[int, int], None]


class ReplayConfig(Protocol):
    """What the table reads of the bench's configuration (``cache``: a directory where each
    model's counts are kept as they finish, so that a stopped run resumes; None: none)."""

    models: tuple[str, ...]
    buffers: tuple[str, ...]
    engine: Engine | None
    cache: Path | None


def classify(cm: CostModel, group: Group) -> tuple[str, ...]:
    """The outcomes of one group: ``equal``, or what differs (``dram-below``,
    ``dram-above``, ``peak-below``, ``peak-above``), ``fails`` (and ``over`` when the
    regions exceed the buffer), or ``no-schedule``."""
    try:
        schedule = build_schedule(cm, group)
    except ScheduleError:
        return ("no-schedule",)
    try:
        r = replay(schedule, cm.graph, cm.node_weights)
    except ReplayError as exc:
        return ("fails", "over") if "over the" in str(exc) else ("fails",)
    cost = cm.cost(group)
    found = []
    if r.dram_bytes != cost.dram:
        found.append("dram-below" if r.dram_bytes < cost.dram else "dram-above")
    if r.peak_bytes != cost.buffer:
        found.append("peak-below" if r.peak_bytes < cost.buffer else "peak-above")
    return tuple(found) or ("equal",)


def cells(buffers: Sequence[str]) -> list[tuple[str, str, str]]:
    """Every (profile, scheme, buffer) the zoo rows cover, in the table's order."""
    return [
        (profile, scheme, buffer)
        for profile, schemes in PROFILES
        for scheme in schemes
        for buffer in buffers
    ]


def model_counts(name: str, buffers: Sequence[str]) -> dict[tuple[str, str, str], Counter]:
    """Outcome counts per cell over every group of one zoo model's plans (one engine task:
    the models are independent, and the optimus profile's plans take minutes each)."""
    graph = load_zoo_model(name)
    counts: dict[tuple[str, str, str], Counter] = {}
    for profile, scheme, buffer in cells(buffers):
        plan = plan_graph(graph, PlanRequest(buffer=buffer, scheme=scheme, profile=profile))
        found = counts[(profile, scheme, buffer)] = Counter()
        for group in plan.groups:
            found["groups"] += 1
            found.update(classify(plan.cost_model, group))
    return counts


def _cache_key(model: str, buffers: Sequence[str]) -> str:
    return f"replay|{model}|{','.join(buffers)}"


def zoo_counts(
    config: ReplayConfig, progress: Progress | None = None
) -> dict[tuple[str, str, str], Counter]:
    """Outcome counts per (profile, scheme, buffer) over every group of every zoo plan,
    one task per model on ``config.engine`` (default: this process); models whose counts
    ``config.cache`` holds are not run again (delete it after changing a cost model)."""
    counts: dict[tuple[str, str, str], Counter] = {c: Counter() for c in cells(config.buffers)}
    store = ResultStore(config.cache) if config.cache is not None else None
    kept, todo = [], []
    for model in config.models:
        row = store.rows.get(_cache_key(model, config.buffers)) if store else None
        if row is None:
            todo.append(model)
        else:
            kept.append(row)

    def keep(model: str, per_cell: dict[tuple[str, str, str], Counter]) -> None:
        if store is not None:
            rows = [[*cell, dict(c)] for cell, c in per_cell.items()]
            store.add({"key": _cache_key(model, config.buffers), "cells": rows})

    found = per_model(
        model_counts, todo, config.buffers, config.engine, "replaying the plans of", progress,
        keep,
    )  # fmt: skip
    found += [{tuple(cell): Counter(c) for *cell, c in row["cells"]} for row in kept]
    for per_cell in found:
        for cell, c in per_cell.items():
            counts[cell].update(c)
    return counts


def random_graph(seed: int) -> OpGraph:
    """A small seeded RandWire stage (data/synthetic.py): a random DAG of summing joins,
    activations, depthwise and pointwise convs."""
    rng = random.Random(seed)
    model = randwire(
        nodes=rng.choice((6, 8, 10, 12)),
        k=rng.choice((2, 4)),
        p=rng.choice((0.25, 0.5, 0.75)),
        channels=rng.choice((8, 16, 48, 96)),
        size=rng.choice((8, 12, 16)),
        seed=seed,
    )
    return graph_from_proto(model)


def hull(graph: OpGraph, group: Group) -> Group:
    """``group`` with every op on a path between two of its ops (the least convex superset)."""
    below = above = 0
    for v in bits(group):
        below |= graph.descendant_mask[v]
        above |= graph.ancestor_mask[v]
    return group | (below & above)


def random_groups(graph: OpGraph, rng: random.Random, n: int) -> list[Group]:
    """Up to ``n`` distinct convex, weakly connected groups grown from random ops."""
    out = set()
    for _ in range(n):
        group = 1 << rng.randrange(len(graph))
        for _ in range(rng.randint(0, 8)):
            near = 0
            for v in bits(group):
                near |= graph.neighbour_mask[v]
            near &= ~group
            if not near:
                break
            group = hull(graph, group | 1 << rng.choice(bits(near)))
        out.add(group)
    return sorted(out)


def random_counts(target: int = RANDOM_GROUPS) -> tuple[Counter, int]:
    """Outcome counts over ``target`` random fused groups (BRR, default profile) of random
    graphs, at three buffers per graph (1x, 2x and 8x its largest single-op need), and
    the number of graphs used."""
    found: Counter = Counter()
    seed = 0
    while found["groups"] < target:
        graph = random_graph(seed)
        probe = make_cost_model(graph, Accelerator(1 << 40, "brr"))
        need = max(probe.buffer_bytes(1 << v) for v in range(len(graph)))
        rng = random.Random(seed)
        for scale in (1, 2, 8):
            cm = make_cost_model(graph, Accelerator(need * scale, "brr"))
            for group in random_groups(graph, rng, 40):
                if cm.is_valid(group) and cm.priced_order(group)[0] == "scheme":
                    found["groups"] += 1
                    found.update(classify(cm, group))
        seed += 1
    return found, seed


COLUMNS = ("groups", "equal", "dram-below", "dram-above", "peak-below", "peak-above", "fails",
           "over", "no-schedule")  # fmt: skip


def _row(label: Sequence[str], c: Counter) -> str:
    return "| " + " | ".join([*label, *(str(c[k]) for k in COLUMNS)]) + " |"


def replay_section(
    zoo: dict[tuple[str, str, str], Counter], rand: tuple[Counter, int], command: str
) -> str:
    """The table: one row per (profile, scheme, buffer), then the random groups."""
    default = Counter()
    for (profile, _, _), c in zoo.items():
        if profile == "fusionplan":
            default.update(c)
    lines = [
        f"Generated by `{command}`; machine: {machine_line()}. Every group of every zoo plan "
        "(the default search) built as the schedule its cost model priced and replayed "
        '(docs/cost-model.md, "Schedules and replay"): equal when the replay\'s DRAM and '
        "peak equal the closed form's; dram/peak below or above when the replay's figure "
        "is; fails when the replay stops (over: the regions exceed the buffer); no schedule "
        "when no builder writes the group out.",
        "",
        f"**Default profile: {default['groups']} groups, {default['equal']} equal, "
        f"{default['fails']} replays fail, {default['over']} over the buffer, "
        f"{default['no-schedule']} without a schedule.**",
        "",
        "| profile | scheme | buffer | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (3 + len(COLUMNS)),
    ]
    lines += [_row(cell, c) for cell, c in zoo.items()]
    found, graphs = rand
    lines += [
        "",
        f"Random groups: {found['groups']} convex connected groups of {graphs} seeded "
        "RandWire graphs (data/synthetic.py; 6-12 nodes, 8-96 channels, 8-16 rows), BRR, "
        "default profile, at 1x, 2x and 8x each graph's largest single-op need.",
        "",
        "| groups | " + " | ".join(COLUMNS[1:]) + " |",
        "|" + "---|" * len(COLUMNS),
        "| " + " | ".join(str(found[k]) for k in COLUMNS) + " |",
    ]
    return "\n".join(lines) + "\n"


def replay_table(config: ReplayConfig, command: str, progress: Progress | None = None) -> str:
    """The ``replay`` table: closed forms against replayed schedules."""
    return replay_section(zoo_counts(config, progress), random_counts(), command)
