"""What every command group shares: console output, progress bars, tables, registry-backed
choices, checked output paths and the planning options of ``plan`` and ``sweep``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from accel_model import COST_MODELS, Accelerator
from accel_model.accelerator import (
    DEFAULT_PE_UNROLL,
    PROFILES,
    SINGLE_LAYER_CONVENTIONS,
    parse_size,
)
from accel_model.description import hardware_from, read_description
from accel_model.objectives import OBJECTIVES
from accel_model.oracle import CallableOracle, Oracle, ProgramOracle
from fusionplan.app.api import Prepared, accelerator_passes, load, run_prepasses
from fusionplan.app.pipeline import PlanRequest, default_search
from fusionplan.engines import ENGINES, Engine, make_engine
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.io import check_output_path
from fusionplan.ir.registry import Registry
from fusionplan.passes import PASSES
from fusionplan.passes.manager import PassContext, make_context, parse_option_items
from fusionplan.planning.split import SPLITTERS
from fusionplan.search import SEARCHES


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)


def print_table(headers: list[str], rows: list[list], title: str | None = None) -> None:
    table = Table(*headers, title=title)
    for row in rows:
        table.add_row(*(str(c) for c in row))
    console().print(table)


@contextmanager
def progress_bar(
    label: str, total: int | None = None, enabled: bool = True
) -> Iterator[Callable[..., None]]:
    """A transient rich progress bar on stderr; yields ``update(done, total=None)``."""
    with Progress(
        "{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=True,
        disable=not enabled,
    ) as bar:
        task = bar.add_task(label, total=total)

        def update(done: int, new_total: int | None = None) -> None:
            bar.update(task, completed=done, **({"total": new_total} if new_total else {}))

        yield update


class RegistryChoice(click.ParamType):
    """A choice among a registry's names, read when the command runs (so plug-ins
    registered after import are accepted), case-insensitive."""

    def __init__(self, registry: Registry[Any]) -> None:
        self.registry = registry
        self.name = registry.kind

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(self.registry.names()) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        text = str(value)
        for name in self.registry.names():
            if name.lower() == text.lower():
                return name
        try:
            self.registry.check(text)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


class OutputPath(click.ParamType):
    """A path the command will write (a file, or with ``directory`` a directory), checked
    with :func:`check_output_path` when the command line is parsed, so a path that cannot
    be written fails before any model loads; the error is the one-line ``ConfigError``."""

    def __init__(self, directory: bool = False) -> None:
        self.directory = directory
        self.name = "directory" if directory else "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        check_output_path(value, directory=self.directory)
        return value


def check_distinct_outputs(outputs: Mapping[str, str | None]) -> None:
    """Refuse two output options (option name -> path, None when not given) that name one
    file: the second write would replace the first, and both would be reported written.
    Paths are compared resolved (``p.json`` and ``./p.json`` are one file); called before
    any model loads."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if not path:
            continue
        key = Path(path).resolve()
        if key in seen:
            raise click.UsageError(
                f"{seen[key]} and {option} both name {path}: give each output its own file"
            )
        seen[key] = option


def comma_list(value: str | None) -> tuple[str, ...] | None:
    """A comma-separated option's items, stripped; None when it names none."""
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


def whole_kb_sizes(buffers: str) -> list[int]:
    """--buffers as bytes: whole KB sizes, at least one (the dataset labels by KB)."""
    sizes = [parse_size(b) for b in comma_list(buffers) or ()]
    if not sizes or any(s % 1024 for s in sizes):
        raise click.BadParameter(f"whole KB sizes, got {buffers!r}", param_hint="--buffers")
    return sizes


def scheme_option(**kwargs: Any):
    return click.option(
        "--scheme", type=RegistryChoice(COST_MODELS), help="Fusion scheme (cost model).", **kwargs
    )


def parse_shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """``NAME=1x3x224x224`` items -> {name: shape}; a ConfigError for a malformed one, and
    one that names the problem for a zero or negative dimension (well formed, so the
    usage hint alone would not say what is wrong)."""
    shapes = {}
    for item in values:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape:
            raise ConfigError(f"--input-shape {item!r} is not NAME=1x3x224x224")
        if min(shape) <= 0:
            raise ConfigError(
                f"--input-shape {item!r}: every dimension must be positive, got {min(shape)}"
            )
        shapes[name] = shape
    return shapes


def input_shape_option() -> Callable[..., Any]:
    """``--input-shape NAME=1x3xHxW`` (repeatable), read with :func:`parse_shapes`: every
    command that imports a model takes it, for models exported with symbolic axes."""
    return click.option(
        "--input-shape",
        multiple=True,
        metavar="NAME=1x3xHxW",
        help="Fix a dynamic graph-input shape (repeatable).",
    )


@dataclass(frozen=True)
class PlanOptions:
    """The planning options shared by `plan` and `sweep`, gathered by :func:`plan_options`."""

    scheme: str
    search: str
    nsga2_backend: str
    splitter: str
    budget: int
    seed: int
    bytes_per_element: int
    accelerator: str | None
    profile: str
    single_layer: str | None
    pe_unroll: int | None
    input_shape: tuple[str, ...]
    strict_ops: bool
    quiet: bool
    effort: float
    bound_effort: float
    time_limit: float | None
    prepass: tuple[str, ...]
    pass_option: tuple[str, ...]
    objective: str
    front: str
    oracle: str | None
    oracle_callable: str | None
    query_budget: int | None

    def __post_init__(self) -> None:  # --search left out: auto, or ls with an oracle
        search = default_search(self.search, self.oracle or self.oracle_callable)
        object.__setattr__(self, "search", search)

    def search_options(self) -> dict[str, Any]:
        """Options of the chosen search that the command line exposes."""
        options: dict[str, Any] = {}
        if self.search == "nsga2" and self.nsga2_backend != "pymoo":
            options["backend"] = self.nsga2_backend
        if self.front != "mbu":
            if self.search != "nsga2":
                raise ConfigError("--front applies to --search nsga2 only")
            options["front"] = self.front
        return options

    def request(self, buffer: str) -> PlanRequest:
        """A checked :class:`PlanRequest` for one buffer size (fails before any model load,
        as bad pre-pass options do)."""
        self.pass_context()
        return PlanRequest(
            buffer=buffer,
            scheme=self.scheme,
            search=self.search,
            splitter=self.splitter,
            budget=self.budget,
            seed=self.seed,
            bytes_per_element=self.bytes_per_element,
            profile=self.profile,
            single_layer=self.single_layer,
            pe_unroll=self.pe_unroll,
            search_options=self.search_options(),
            effort=self.effort,
            bound_effort=self.bound_effort,
            time_limit_s=self.time_limit,
            objective=self.objective,
            oracle=self.make_oracle(),
            query_budget=self.query_budget,
            **self.file_settings,
        ).check()

    def make_oracle(self) -> Oracle | None:
        """The black box ``--oracle`` or ``--oracle-callable`` names, or None."""
        if self.oracle and self.oracle_callable:
            raise ConfigError("give --oracle or --oracle-callable, not both")
        if self.oracle:
            return ProgramOracle(self.oracle)
        if self.oracle_callable:
            return CallableOracle.load(self.oracle_callable)
        return None

    def pass_context(self, accelerator: Accelerator | None = None) -> PassContext:
        """The pre-passes and their options (accelerator file, then ``--pass-option``),
        checked when the command starts: a bad one fails before any model loads."""
        file = accelerator_passes(self.accelerator) if self.accelerator else None
        given = ("--pass-option", parse_option_items(self.pass_option))
        return make_context(PASSES, self.prepass, file=file, given=given,
                            accelerator=accelerator, plan_effort=self.effort)  # fmt: skip

    @functools.cached_property
    def file_settings(self) -> dict[str, Any]:
        """The accelerator file's settings that have no option of their own (the others
        became the options' defaults when the file was read: see :func:`_read_accelerator`)."""
        if self.accelerator is None:
            return {}
        settings = read_description(self.accelerator)
        out: dict[str, Any] = {
            k: settings[k] for k in ("in_place", "depthwise_weights") if k in settings
        }
        if "conventions" in settings:
            out["conventions"] = tuple(settings["conventions"])
        out["hardware"] = hardware_from(settings)
        return out

    def load(self, model: str) -> OpGraph:
        """The planner's graph of ``model`` after the pre-passes, which say what they did
        on stderr (a sweep's rows have no place for it)."""
        prepared = self.prepare(model)
        for record in prepared.records:
            console(stderr=True).print(f"prepass {record.name}: {record.summary}")
        return prepared.graph

    def prepare(self, model: str, accelerator: Accelerator | None = None) -> Prepared:
        """The planner's graph of ``model`` after the pre-passes (which see the
        ``accelerator`` planned for), what each one did (a plan keeps it: its summary, JSON
        and HTML report) and the rewritten model, if one rewrote it."""
        options = {"input_shapes": parse_shapes(self.input_shape), "strict_ops": self.strict_ops}
        if not self.prepass:
            return Prepared(load(model, **options), (), None)
        return run_prepasses(model, self.pass_context(accelerator), **options)


def _read_accelerator(ctx: click.Context, path: str | None) -> str | None:
    """Make an accelerator file's settings the defaults of the matching options (so that an
    option given on the command line wins), before any other option is read."""
    if path is None:
        return None
    try:
        settings = read_description(path)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None
    names = {p.name for p in ctx.command.params}
    defaults = dict(ctx.default_map or {})
    for key in ("scheme", "bytes_per_element", "single_layer", "pe_unroll", "profile"):
        if key in settings and key in names:
            defaults[key] = settings[key]
    if "buffer" in settings:
        size = str(settings["buffer"])
        defaults.update({k: size for k in ("buffer", "buffers") if k in names})
    ctx.default_map = defaults
    return path


def _registry_help(what: str, registry: Registry[Any]) -> str:
    return f"{what}: {registry.describe()}."


_PLAN_OPTIONS = [
    scheme_option(default="lbdf", show_default=True),
    click.option(
        "--search",
        type=RegistryChoice(SEARCHES),
        default=None,
        help=_registry_help("Search algorithm (default auto; ls with an oracle)", SEARCHES),
    ),
    click.option(
        "--nsga2-backend",
        type=click.Choice(["pymoo", "openbox"]),
        default="pymoo",
        show_default=True,
        help="NSGA-II implementation.",
    ),
    click.option(
        "--splitter",
        type=RegistryChoice(SPLITTERS),
        default="tree",
        show_default=True,
        help=_registry_help("How invalid groups are split", SPLITTERS),
    ),
    click.option(
        "--budget",
        type=int,
        default=2000,
        show_default=True,
        help="Partition plans proposed by the search.",
    ),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option("--bytes-per-element", type=int, default=1, show_default=True),
    click.option(
        "--accelerator",
        type=click.Path(exists=True, dir_okay=False),
        is_eager=True,
        callback=lambda ctx, _param, value: _read_accelerator(ctx, value),
        help="An accelerator description (YAML or TOML: buffer, scheme, bytes per element, "
        "PE unroll, ...); options given on the command line win over it.",
    ),
    click.option(
        "--objective",
        type=RegistryChoice(OBJECTIVES),
        default="dram",
        show_default=True,
        help=_registry_help("What the search minimises", OBJECTIVES)
        + " Energy and latency use the accelerator file's PE array, clock and energies.",
    ),
    click.option(
        "--front",
        type=click.Choice(["mbu", "dram-energy-latency"]),
        default="mbu",
        show_default=True,
        help="NSGA-II's objectives: the score against the peak buffer, or DRAM, energy and "
        "latency (the plan JSON's search.front lists the non-dominated plans).",
    ),
    click.option(
        "--profile",
        type=click.Choice(list(PROFILES)),
        default="fusionplan",
        show_default=True,
        help="Cost conventions: fusionplan's, the fusion paper's, or Optimus's "
        "(docs/cost-model.md).",
    ),
    click.option(
        "--single-layer",
        type=click.Choice(SINGLE_LAYER_CONVENTIONS),
        default=None,
        help="How an op run alone is costed: cheapest intra-layer loop order (tiled, the "
        "default), or the paper's io + weights once (the paper profile's).",
    ),
    click.option(
        "--pe-unroll",
        type=click.IntRange(min=0),
        default=None,
        help=f"BRR channel slice k: output channels the PE array unrolls (default "
        f"{DEFAULT_PE_UNROLL}; 0: full-channel buffering).",
    ),
    input_shape_option(),
    click.option("--strict-ops", is_flag=True, help="Fail on ops the importer does not know."),
    click.option("--quiet", "-q", is_flag=True, help="No progress bar."),
    click.option(
        "--effort",
        type=float,
        default=1.0,
        show_default=True,
        help="Work the exact, lns and auto searches may do, counted in candidate groups "
        "(not seconds), so a command gives the same plan on any machine and under any "
        "load: 1 is about 10 s of auto on the largest zoo models on 2 cores; 2 does twice "
        "the work where the search has not finished earlier.",
    ),
    click.option(
        "--bound-effort",
        type=float,
        default=1.0,
        show_default=True,
        help="A* work certifying the plan of a search that proves no bound itself (rs, "
        "ls, nsga2), in the same units (1: about 1 s); 0: the static traffic bound only.",
    ),
    click.option(
        "--time-limit",
        type=float,
        default=None,
        help="Wall-clock safety cap in seconds over the search and its certificate (default "
        "none). A run it stops says so and depends on the machine; --effort is what sizes "
        "a reproducible run.",
    ),
    click.option(
        "--oracle",
        metavar="COMMAND",
        help="Price groups with an external program instead of the scheme's model: it reads "
        "one JSON group per line on stdin and answers one JSON line "
        '{"fits": ..., "dram_bytes": ...} (docs/design.md, "Oracles").',
    ),
    click.option(
        "--oracle-callable",
        metavar="MODULE:FUNCTION",
        help="Price groups with a Python function query -> answer (as --oracle).",
    ),
    click.option(
        "--query-budget",
        type=click.IntRange(min=1),
        default=None,
        help="Stop rs, ls or nsga2 after this many oracle queries (distinct groups priced; "
        "every plan reports its count).",
    ),
    click.option(
        "--prepass",
        type=RegistryChoice(PASSES),
        multiple=True,
        help=_registry_help("Run a pass on the model before planning (repeatable)", PASSES),
    ),
    click.option(
        "--pass-option",
        multiple=True,
        metavar="PASS.OPTION=VALUE",
        help="An option of a --prepass (repeatable), e.g. substitute.search=ocggs-dpp, "
        "streams.max_streams=4; device=NAME prices every pass's ops on that latency model. "
        "Wins over the accelerator file's 'passes:'; a misspelt option lists the pass's.",
    ),
]


def option_group(
    options: Sequence[Callable[..., Any]],
    fields: Sequence[str],
    build: Callable[..., Any],
    keyword: str,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator adding ``options``; the command receives ``build(**those fields)`` as
    ``keyword`` instead of the separate values."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:  # args: click's pass_context
            gathered = build(**{name: kwargs.pop(name) for name in fields})
            return fn(*args, **{keyword: gathered}, **kwargs)

        for option in reversed(options):
            command = option(command)
        return command

    return decorate


plan_options = option_group(
    _PLAN_OPTIONS, list(PlanOptions.__dataclass_fields__), PlanOptions, "opts"
)
"""Add the shared planning options; the command receives them as ``opts``."""


@dataclass(frozen=True)
class EngineOptions:
    """Where a fan-out command runs its tasks, gathered by :func:`engine_options`."""

    engine: str
    address: str | None
    processes: int | None
    retries: int
    local_processes: int | None = None  # the command's -j default on the local engine

    def make(self, *, isolate: bool = False) -> Engine:
        processes = self.processes
        if processes is None and self.engine == "local":
            processes = self.local_processes  # Ray sizes itself (or is a cluster)
        return make_engine(self.engine, processes=processes, address=self.address, isolate=isolate)


def engine_options(default_processes: int | None = None) -> Callable[..., Any]:
    """Add ``--engine``, ``--address``, ``-j/--processes`` and ``--retries``; the command
    receives them as ``engine_opts``. ``default_processes`` is the local engine's default
    (None: one per CPU); on Ray, -j left out means all of a private instance's CPUs."""
    options = [
        click.option(
            "--engine",
            type=RegistryChoice(ENGINES),
            default="local",
            show_default=True,
            help=_registry_help("Where tasks run", ENGINES),
        ),
        click.option(
            "--address",
            help="Join a running Ray cluster: 'auto' or HOST:PORT (with --engine ray).",
        ),
        click.option(
            "-j",
            "--processes",
            "--jobs",
            "processes",
            type=click.IntRange(min=1),
            help="Worker processes (local engine; default "
            + ("one per CPU" if default_processes is None else str(default_processes))
            + "), or CPUs of a private local Ray instance (default: all).",
        ),
        click.option(
            "--retries",
            type=click.IntRange(min=0),
            default=2,
            show_default=True,
            help="Retries of a failed task before it is reported as failed.",
        ),
    ]

    fields = ("engine", "address", "processes", "retries")
    build = functools.partial(EngineOptions, local_processes=default_processes)
    return option_group(options, fields, build, "engine_opts")
