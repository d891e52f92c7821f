"""Which search runs reproduce which of the paper's tables and figures.

A :class:`Run` is one search on one model and accelerator: the unit of parallel work and
the key under which a finished result is stored (so an interrupted bench resumes). Tables
and figures are views over runs; Table V and the exact rows reuse runs other tables need.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from explainers import EXPLAINERS
from fusionplan.ir.errors import ConfigError

EXPERIMENTS = ("table2", "table3", "table4", "fig3", "fig5")

TABLE2_MODELS = ("efficientnet_b3", "resnet152", "deeplabv3_mobilenet_v3_large")
TABLE34_MODELS = ("mobilenet_v2", "vgg16", "resnet50", "resnet18", "squeezenet")
# Figure 5 panels, as in the paper: (model, scheme, search)
FIG5_PANELS = (
    ("squeezenet", "brr", "ls"),
    ("mobilenet_v2", "lbdf", "ls"),
    ("vgg16", "lbdf", "rs"),
)
FIG3_MODELS = (
    "squeezenet",
    "vgg16",
    "resnet18",
    "resnet101",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "mobilenet_v3_large",
    "efficientnet_b3",
)
FIG3_BUFFERS_KB = (128, 256, 512, 1024, 2048)


@dataclass(frozen=True, order=True)
class Run:
    """One search run (``search == "exact"``: the optimum and its lower bound)."""

    model: str
    scheme: str
    buffer: str
    search: str
    splitter: str
    budget: int
    seed: int

    @property
    def key(self) -> str:
        return "|".join(str(v) for v in asdict(self).values())


@dataclass(frozen=True)
class BenchConfig:
    """What to run. The defaults are the paper's settings with three seeds; ``quick()`` is a
    CI-sized version of the same experiments (few models, tiny budgets, one seed)."""

    large_budget: int = 5000  # Table II
    small_budget: int = 2000  # Tables III-V
    fig5_budget: int = 4000  # Figure 5's x axis runs to 4k plans
    seeds: int = 3
    experiments: tuple[str, ...] = EXPERIMENTS
    table2_models: tuple[str, ...] = TABLE2_MODELS
    table34_models: tuple[str, ...] = TABLE34_MODELS
    fig3_models: tuple[str, ...] = FIG3_MODELS
    fig3_groups: int = 4000  # random groups sampled over the Figure 3 models
    fig5_panels: tuple[tuple[str, str, str], ...] = FIG5_PANELS
    # the paper's comparison: its baseline, the no-GNN ablation and one per explainer (the
    # GIN-judged variants are measured in oracle queries by bench queries, not in plans)
    splitters: tuple[str, ...] = field(
        default_factory=lambda: ("random", "tree", *EXPLAINERS.names())
    )
    exact_time_limit_s: float = 60.0

    @classmethod
    def quick(cls, **overrides) -> BenchConfig:
        settings = dict(
            large_budget=60,
            small_budget=40,
            fig5_budget=60,
            seeds=1,
            table2_models=("deeplabv3_mobilenet_v3_large",),
            table34_models=("mobilenet_v2", "resnet18"),
            fig3_models=("mobilenet_v2", "resnet18"),
            fig3_groups=60,
            fig5_panels=(("mobilenet_v2", "lbdf", "ls"),),
            exact_time_limit_s=10.0,
        )
        settings.update(overrides)
        return cls(**settings)

    def check(self) -> None:
        unknown = sorted(set(self.experiments) - set(EXPERIMENTS))
        if unknown:
            raise ConfigError(
                f"unknown experiment {', '.join(unknown)} (choose from {', '.join(EXPERIMENTS)})"
            )
        if self.seeds < 1:
            raise ConfigError(f"seeds must be >= 1, got {self.seeds}")
        for name in ("large_budget", "small_budget", "fig5_budget"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name.replace('_', ' ')} must be >= 1 plan")


def table2_runs(c: BenchConfig) -> list[Run]:
    return [
        Run(m, "lbdf", "256KB", search, sp, c.large_budget, seed)
        for m in c.table2_models
        for search in ("rs", "ls", "nsga2")
        for sp in c.splitters
        for seed in range(c.seeds)
    ]


def table34_runs(c: BenchConfig, search: str) -> list[Run]:
    """Table III is local search, Table IV random search; each over LBDF and BRR."""
    return [
        Run(m, scheme, "128KB", search, sp, c.small_budget, seed)
        for m in c.table34_models
        for scheme in ("lbdf", "brr")
        for sp in c.splitters
        for seed in range(c.seeds)
    ]


def fig5_runs(c: BenchConfig) -> list[Run]:
    """One run per panel, splitter and seed at the largest budget: a search's trace gives its
    best DRAM at every smaller budget (every search here is a prefix of a longer run)."""
    return [
        Run(m, scheme, "128KB", search, sp, c.fig5_budget, seed)
        for m, scheme, search in c.fig5_panels
        for sp in c.splitters
        for seed in range(c.seeds)
    ]


def exact_runs(runs: list[Run]) -> list[Run]:
    """The exact optimum for every (model, scheme, buffer) some run uses."""
    cells = sorted({(r.model, r.scheme, r.buffer) for r in runs})
    return [Run(m, s, b, "exact", "tree", 1, 0) for m, s, b in cells]


def planned_runs(c: BenchConfig) -> list[Run]:
    """Every search run the selected experiments need, exact rows included, no repeats."""
    c.check()
    runs: list[Run] = []
    if "table2" in c.experiments:
        runs += table2_runs(c)
    if "table3" in c.experiments:
        runs += table34_runs(c, "ls")
    if "table4" in c.experiments:
        runs += table34_runs(c, "rs")
    if "fig5" in c.experiments:
        runs += fig5_runs(c)
    runs += exact_runs(runs)
    return sorted(set(runs))
