"""ED-Batch's finite-state-machine policy, learned by tabular n-step Q-learning.

The state is an encoding of the ready frontier (which types have ready nodes), the action is
the type to run (all of its ready nodes, as one batch), and the table maps state -> type. A
dynamic network's frontiers repeat across inputs (an LSTM chain cycles through the same few
states), so a small table learned on a few mini-batches schedules unseen ones. States never
seen in training fall back to the agenda rule.

Reward of running type ``a`` (docs/design.md, "Batching"): ``-1 + |batch| / m_a`` where
``m_a`` is the largest batch of ``a`` any schedule could still form (unexecuted ``a`` nodes
with no unexecuted ``a`` ancestor). Each batch costs -1; a batch that takes every node of its
type that could ever join it costs nothing more, so the return is minus the batch count plus
how full the batches were, and a schedule at the lower bound has only full batches.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fusionplan.batching.bounds import lower_bound
from fusionplan.batching.frontier import Frontier
from fusionplan.batching.graph import DataflowGraph
from fusionplan.batching.policies import POLICIES, AgendaPolicy, FrontierPolicy
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import write_text_atomic

TABLE_FORMAT = 1


def _counts(frontier: Frontier) -> dict[str, int]:
    return {t: len(frontier.ready[t]) for t in frontier.ready_types()}


def encode_set(frontier: Frontier) -> str:
    """The set of types with ready nodes (the paper's base encoding)."""
    return "|".join(sorted(_counts(frontier)))


def encode_sort(frontier: Frontier) -> str:
    """Ready types ordered by decreasing ready count, ties by name (the paper's E_sort)."""
    counts = _counts(frontier)
    return "|".join(sorted(counts, key=lambda t: (-counts[t], t)))


def encode_max(frontier: Frontier) -> str:
    """The set of ready types plus the one with the most ready nodes."""
    counts = _counts(frontier)
    top = min(counts, key=lambda t: (-counts[t], t))
    return f"{'|'.join(sorted(counts))}>{top}"


def _critical(frontier: Frontier) -> str:
    return max(frontier.ready_types(), key=frontier.top_height)


def encode_crit(frontier: Frontier) -> str:
    """The set of ready types plus the one holding the ready node farthest from a sink.

    Ours, not the paper's: on lattices the sentences' character chains drift out of phase, and
    which type sits on the longest remaining path is what tells a good choice from a bad one.
    """
    return f"{encode_set(frontier)}>{_critical(frontier)}"


def encode_critsort(frontier: Frontier) -> str:
    """Ready types ordered by their ready nodes' greatest height (ours, like ``crit``)."""
    top = {t: frontier.top_height(t) for t in frontier.ready_types()}
    return "|".join(sorted(top, key=lambda t: (-top[t], t)))


ENCODINGS: dict[str, Callable[[Frontier], str]] = {
    "set": encode_set,
    "sort": encode_sort,
    "max": encode_max,
    "crit": encode_crit,
    "critsort": encode_critsort,
}
DEFAULT_ENCODING = "crit"
"""The best measured (docs/results.md): it alone keeps lattices within 1.25x of the bound."""


@dataclass(frozen=True)
class QLearningConfig:
    """Tabular n-step Q-learning; the defaults are the paper's (n = 10, gamma 1, alpha 0.4)."""

    encoding: str = DEFAULT_ENCODING
    episodes: int = 400
    n_step: int = 10
    gamma: float = 1.0
    alpha: float = 0.4
    epsilon_start: float = 0.5
    epsilon_end: float = 0.02
    eval_every: int = 10
    time_budget_s: float = 30.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ConfigError(
                f"unknown state encoding {self.encoding!r}; choose from {', '.join(ENCODINGS)}"
            )
        if self.episodes < 1 or self.n_step < 1 or not 0 < self.alpha <= 1:
            raise ConfigError("Q-learning needs episodes >= 1, n_step >= 1 and 0 < alpha <= 1")

    def epsilon(self, episode: int) -> float:
        """Exploration rate, decaying exponentially over the first fifth of the episodes."""
        scale = max(self.episodes / 5, 1.0)
        return self.epsilon_end + (self.epsilon_start - self.epsilon_end) * math.exp(
            -episode / scale
        )


@dataclass
class QTable:
    """State -> (type -> value); what ``FSMPolicy`` reads and what is saved as JSON."""

    encoding: str
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    workload: str = ""
    info: dict[str, Any] = field(default_factory=dict)  # how it was trained, for the record

    def best(self, state: str, legal: Sequence[str]) -> str | None:
        """The legal action of highest value in ``state``; None if the state was never seen."""
        row = self.values.get(state)
        if not row:
            return None
        known = [a for a in legal if a in row]
        return max(known, key=lambda a: row[a]) if known else None

    def save(self, path: Path) -> None:
        payload = {"format": TABLE_FORMAT, **asdict(self)}
        write_text_atomic(path, json.dumps(payload, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> QTable:
        """Read a saved table; a file that is not one is a one-line ``ConfigError``."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read FSM table {path}: {exc}") from exc
        ok = (
            isinstance(data, dict)
            and data.get("format") == TABLE_FORMAT
            and data.get("encoding") in ENCODINGS
            and isinstance(data.get("values"), dict)
            and all(
                isinstance(row, dict) and all(isinstance(v, int | float) for v in row.values())
                for row in data["values"].values()
            )
        )
        if not ok:
            raise ConfigError(f"{path} is not a fusionplan FSM table (format {TABLE_FORMAT})")
        return cls(
            encoding=data["encoding"],
            values={s: {a: float(v) for a, v in row.items()} for s, row in data["values"].items()},
            workload=str(data.get("workload", "")),
            info=dict(data.get("info", {})),
        )


class FSMPolicy(FrontierPolicy):
    """Run the type the learned table prefers in the current frontier state."""

    name = "fsm"

    def __init__(self, table: QTable) -> None:
        self.table = table
        self._encode = ENCODINGS[table.encoding]
        self._fallback = AgendaPolicy()
        self.unseen_states = 0  # frontier states the table had no entry for, over all schedules

    def choose(self, frontier: Frontier) -> str:
        action = self.table.best(self._encode(frontier), frontier.ready_types())
        if action is None:
            self.unseen_states += 1
            return self._fallback.choose(frontier)
        return action


@dataclass(frozen=True)
class TrainingReport:
    episodes: int
    seconds: float
    batches: int  # greedy policy's total batches over the training graphs
    lower_bound: int  # sum of the training graphs' lower bounds
    stopped_at_bound: bool


def train_fsm(
    graphs: Sequence[DataflowGraph], config: QLearningConfig | None = None, workload: str = ""
) -> tuple[QTable, TrainingReport]:
    """Learn an FSM table on ``graphs`` (each episode schedules one of them).

    Stops early once the greedy policy meets the lower bound on every training graph, or when
    the time budget runs out; returns the table whose greedy schedules used fewest batches.
    """
    cfg = config or QLearningConfig()
    if not graphs:
        raise ConfigError("FSM training needs at least one graph")
    rng = random.Random(cfg.seed)
    encode = ENCODINGS[cfg.encoding]
    starts = [Frontier(g, track_largest=True) for g in graphs]
    bound = sum(lower_bound(g) for g in graphs)
    table = QTable(cfg.encoding, workload=workload)
    q = table.values
    best_values: dict[str, dict[str, float]] = {}
    best_batches = math.inf
    began = time.perf_counter()
    episode = 0
    while episode < cfg.episodes and time.perf_counter() - began < cfg.time_budget_s:
        _episode(starts[episode % len(starts)].copy(), q, encode, cfg, cfg.epsilon(episode), rng)
        episode += 1
        if episode % cfg.eval_every == 0 or episode == cfg.episodes:
            batches = _greedy_batches(starts, table)
            if batches < best_batches:
                best_batches = batches
                best_values = {s: dict(row) for s, row in q.items()}
            if batches <= bound:
                break
    if best_batches == math.inf:  # the budget ran out before the first evaluation
        best_batches, best_values = _greedy_batches(starts, table), q
    seconds = time.perf_counter() - began
    table.values = best_values
    report = TrainingReport(episode, seconds, int(best_batches), bound, best_batches <= bound)
    table.info = {**asdict(cfg), **asdict(report)}
    return table, report


def _greedy_batches(starts: Sequence[Frontier], table: QTable) -> int:
    policy = FSMPolicy(table)
    return sum(len(policy.run(start.copy())) for start in starts)


def _episode(
    frontier: Frontier,
    q: dict[str, dict[str, float]],
    encode: Callable[[Frontier], str],
    cfg: QLearningConfig,
    epsilon: float,
    rng: random.Random,
) -> None:
    """One epsilon-greedy pass over a graph with n-step TD updates as the rewards arrive."""
    states: list[str] = []
    actions: list[str] = []
    rewards: list[float] = []
    while not frontier.done:
        state = encode(frontier)
        legal = frontier.ready_types()
        row = q.setdefault(state, {})
        for a in legal:
            row.setdefault(a, 0.0)  # optimistic: every reward is <= 0
        action = rng.choice(legal) if rng.random() < epsilon else max(legal, key=lambda a: row[a])
        largest = frontier.largest_batch(action)
        batch = frontier.run(action)
        states.append(state)
        actions.append(action)
        rewards.append(-1.0 + len(batch) / largest)
        if len(rewards) >= cfg.n_step:
            _update(q, states, actions, rewards, len(rewards) - cfg.n_step, encode, frontier, cfg)
    for t in range(max(len(rewards) - cfg.n_step + 1, 0), len(rewards)):
        _update(q, states, actions, rewards, t, None, None, cfg)


def _update(
    q: dict[str, dict[str, float]],
    states: list[str],
    actions: list[str],
    rewards: list[float],
    t: int,
    encode: Callable[[Frontier], str] | None,
    frontier: Frontier | None,
    cfg: QLearningConfig,
) -> None:
    """Move Q(s_t, a_t) towards the n-step return, bootstrapped unless the episode ended."""
    end = min(t + cfg.n_step, len(rewards))
    ret = sum(cfg.gamma ** (k - t) * rewards[k] for k in range(t, end))
    if encode is not None and frontier is not None and not frontier.done:
        row = q.get(encode(frontier), {})
        legal = frontier.ready_types()
        ret += cfg.gamma ** (end - t) * max((row.get(a, 0.0) for a in legal), default=0.0)
    old = q[states[t]][actions[t]]
    q[states[t]][actions[t]] = old + cfg.alpha * (ret - old)


POLICIES.register(
    "fsm", FSMPolicy, help="ED-Batch: learned FSM (frontier state -> type), Q-learning."
)
