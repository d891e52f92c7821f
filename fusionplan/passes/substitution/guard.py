"""The measured guard: keep a rewrite only if it does not slow the model down here.

The search optimises a latency *model* (say an H100 roofline), and a rewrite it likes may
not pay on the machine that runs the model: a 1x1 conv zero-padded to 3x3 so it merges with
its sibling saves a kernel launch on a GPU and costs nine times the multiply-adds on a CPU.
AutoGraph settles such choices by measurement; the guard does the same for the final graph:
it times the original and the rewritten model, and while the rewritten one is more than
``tolerance`` slower, it drops one rule family (replaying the other steps; those that
depended on dropped ones fall away too): of the drops that bring it within tolerance, the
one that keeps the cheapest graph under the model, else the one that runs fastest. If
nothing is left within tolerance, the original graph is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fusionplan.ir.model import ModelGraph
from fusionplan.passes.substitution.search.base import Problem, RewriteCandidate

Measure = Callable[[Sequence[ModelGraph]], list[float]]
"""Seconds per run of each graph, timed together (interleaved) so they compare fairly."""


@dataclass(frozen=True)
class GuardOutcome:
    chosen: RewriteCandidate
    original_s: float
    searched_s: float  # the search's best graph, measured
    chosen_s: float  # estimated: the original's time x the last measured ratio
    dropped: tuple[str, ...]  # rule families removed, in order


def guard(
    problem: Problem,
    root: RewriteCandidate,
    best: RewriteCandidate,
    measure: Measure,
    *,
    tolerance: float = 0.02,
) -> GuardOutcome:
    """``best`` or a subset of its steps that runs within ``tolerance`` of ``root``."""
    base, searched = measure([root.graph, best.graph])
    current, ratio, dropped = best, searched / base, []
    while ratio > 1 + tolerance and current.steps:
        trials = []
        for rule in dict.fromkeys(s.rule for s in current.steps):
            kept = [s for s in current.steps if s.rule != rule]
            trials.append((rule, problem.replay(root, kept, skip_missing=True)))
        times = measure([root.graph, current.graph, *(c.graph for _, c in trials)])
        ratio = times[1] / times[0]  # re-timed beside this round's candidates
        within = [i for i in range(len(trials)) if times[2 + i] <= times[0] * (1 + tolerance)]
        if within:  # of the drops that are fast enough, the one the model likes best
            best_i = min(within, key=lambda i: trials[i][1].cost)
        else:
            best_i = min(range(len(trials)), key=lambda i: times[2 + i])
            if times[2 + best_i] >= times[1]:
                break
        rule, current = trials[best_i]
        ratio = times[2 + best_i] / times[0]
        dropped.append(rule)
    if ratio > 1 + tolerance:
        current, ratio = root, 1.0
    return GuardOutcome(current, base, searched, base * ratio, tuple(dropped))
