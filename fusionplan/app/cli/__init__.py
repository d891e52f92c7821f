"""The ``fusionplan`` command line. Thin: parse, call the API, print; nothing imports it.

Every error caused by bad input is a :class:`FusionPlanError`, printed on one line with a
non-zero exit code; outputs are written atomically, so a failure leaves no partial file.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click

from fusionplan import __version__
from fusionplan.ir.errors import ConfigError, FusionPlanError

EXIT_BAD_INPUT = 2


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


@contextmanager
def _progress(total: int, label: str, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr; yields a callback taking the number of plans done."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        done = [0]

        def advance(n: int) -> None:
            bar.advance(task, n - done[0])
            done[0] = n

        yield advance


def _parse_shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for item in values:
        name, sep, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) <= 0:
            raise ConfigError(f"--input-shape {item!r} is not NAME=1x3x224x224")
        shapes[name] = shape
    return shapes


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
    input_shape: tuple[str, ...]
    strict_ops: bool
    quiet: bool
    time_limit: float

    def search_options(self) -> dict:
        """Options of the chosen search that the command line exposes."""
        if self.search == "nsga2" and self.nsga2_backend != "pymoo":
            return {"backend": self.nsga2_backend}
        if self.search == "exact":
            return {"time_limit_s": self.time_limit}
        return {}

    def request(self, buffer: str):
        """A checked :class:`PlanRequest` for one buffer size (fails before any model load)."""
        from fusionplan.app.api import PlanRequest

        request = PlanRequest(
            buffer,
            self.scheme.lower(),
            self.search,
            self.splitter,
            self.budget,
            self.seed,
            self.bytes_per_element,
            self.search_options(),
        )
        request.check()
        return request

    def load(self, model: str):
        from fusionplan.app.api import load

        return load(model, input_shapes=_parse_shapes(self.input_shape), strict_ops=self.strict_ops)


_PLAN_OPTIONS = [
    click.option(
        "--scheme",
        type=click.Choice(["lbdf", "brr"], case_sensitive=False),
        default="lbdf",
        show_default=True,
        help="Fusion scheme (cost model).",
    ),
    click.option(
        "--search",
        default="ls",
        show_default=True,
        help="Search algorithm: rs | ls | nsga2 | exact.",
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
        default="tree",
        show_default=True,
        help="How invalid groups are split: random | tree (cost-model guided) | "
        "gnne | pg | rg (graph explainers).",
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
        "--input-shape",
        multiple=True,
        metavar="NAME=1x3xHxW",
        help="Fix a dynamic graph-input shape (repeatable).",
    ),
    click.option("--strict-ops", is_flag=True, help="Fail on ops the importer does not know."),
    click.option("--quiet", "-q", is_flag=True, help="No progress bar."),
    click.option(
        "--time-limit",
        type=float,
        default=60.0,
        show_default=True,
        help="Seconds the exact search may run before returning its best plan and a lower bound.",
    ),
]


def plan_options(fn):
    """Add the shared planning options; the command receives them as ``opts``."""
    fields = PlanOptions.__dataclass_fields__

    @functools.wraps(fn)
    def command(**kwargs):
        opts = PlanOptions(**{name: kwargs.pop(name) for name in fields})
        return fn(opts=opts, **kwargs)

    for option in reversed(_PLAN_OPTIONS):
        command = option(command)
    return command


# ------------------------------------------------------------------------------ commands
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fusionplan")
def cli() -> None:
    """Plan layer fusion of a DNN (ONNX file or zoo model) for an accelerator buffer."""


@cli.command("plan")
@click.argument("model")
@click.option("--buffer", default="256KB", show_default=True, help="On-chip buffer, e.g. 128KB.")
@plan_options
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the plan JSON here.")
@click.option(
    "--onnx-out",
    type=click.Path(dir_okay=False),
    help="Write the model with fusion groups as node metadata.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan JSON instead of a summary.")
def plan_cmd(model, buffer, opts: PlanOptions, output, onnx_out, as_json):
    """Plan fusion for MODEL (an ONNX file or a zoo name; see `fusionplan zoo list`)."""
    from fusionplan.app.api import plan_graph

    request = opts.request(buffer)
    graph = opts.load(model)
    with _progress(opts.budget, f"{opts.search} on {graph.name}", not opts.quiet) as progress:
        result = plan_graph(graph, request, progress)
    if output:
        result.save(output)
    if onnx_out:
        from data.zoo import model_source

        result.annotate_onnx(model_source(model), onnx_out)
    if as_json:
        click.echo(result.to_json())
    else:
        _print_plan(result)
        for path in (output, onnx_out):
            if path:
                click.echo(f"wrote {path}")


def _print_plan(plan) -> None:
    info = plan.info
    click.echo(plan.summary())
    if "optimal" in info:
        bound = info["lower_bound_bytes"] / 2**20
        verdict = (
            "proven optimal" if info["optimal"] else f"time limit hit, optimum >= {bound:.3f} MB"
        )
        click.echo(f"exact        {verdict} ({info['states']} states)")
    if "plans_per_second" in info:
        click.echo(
            f"search stats {info['proposed']} plans, {info['plans_per_second']:.0f} plans/s, "
            f"cost cache hit {info['cost_cache_hit_rate']:.1%}, "
            f"rectify rate {info['rectify_rate']:.1%} of {info['invalid_groups_split']} "
            "invalid groups"
        )


@cli.command("sweep")
@click.argument("model")
@click.option(
    "--buffers",
    default="64KB,128KB,256KB,512KB,1MB,2MB",
    show_default=True,
    help="Comma-separated buffer sizes.",
)
@plan_options
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a DRAM-vs-buffer PNG here.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the table as CSV.")
@click.option("--json", "as_json", is_flag=True, help="Print the sweep as JSON.")
def sweep_cmd(model, buffers, opts: PlanOptions, plot, output, as_json):
    """DRAM traffic of MODEL across buffer sizes: a table, optionally CSV and a PNG plot."""
    from fusionplan.app.api import plan_graph
    from fusionplan.app.report import sweep_rows, write_sweep_csv, write_sweep_plot

    sizes = [b.strip() for b in buffers.split(",") if b.strip()]
    if not sizes:
        raise ConfigError("--buffers needs at least one size")
    requests = [opts.request(b) for b in sizes]
    graph = opts.load(model)
    plans = []
    total = opts.budget * len(requests)
    with _progress(total, f"sweep {graph.name}", not opts.quiet) as progress:
        for i, r in enumerate(requests):
            offset = i * opts.budget
            step = (lambda n, o=offset: progress(o + n)) if progress else None
            plans.append(plan_graph(graph, r, step))
    rows = sweep_rows(plans)
    scheme = opts.scheme.upper()
    if output:
        write_sweep_csv(rows, output)
    if plot:
        write_sweep_plot(rows, plot, title=f"{graph.name}, {scheme}")
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    _print_table(
        ["buffer", "DRAM MB", "fusable MB", "lower bound MB", "MBU KB", "groups", "unfusable"],
        [
            [
                r["buffer"],
                f"{r['dram_mb']:.3f}",
                f"{r['fusable_dram_mb']:.3f}",
                f"{r['lower_bound_mb']:.3f}",
                f"{r['mbu_kb']:.1f}",
                r["groups"],
                r["unfusable_ops"],
            ]
            for r in rows
        ],
        title=f"{graph.name}: {scheme}, {opts.search} x {opts.budget}, splitter {opts.splitter}",
    )
    for path in (output, plot):
        if path:
            click.echo(f"wrote {path}")


def _print_table(headers: list[str], rows: list[list], title: str | None = None) -> None:
    from rich.table import Table

    table = Table(*headers, title=title)
    for row in rows:
        table.add_row(*(str(c) for c in row))
    _console().print(table)


@cli.group("zoo")
def zoo_group() -> None:
    """The built-in model zoo (torchvision architectures exported to ONNX, no weights)."""


@zoo_group.command("list")
@click.option("--json", "as_json", is_flag=True)
def zoo_list(as_json: bool) -> None:
    """List zoo models, their input sizes and whether they are cached."""
    from dataclasses import asdict

    from data.zoo import list_zoo

    rows = list_zoo()
    if as_json:
        click.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    _print_table(
        ["name", "input", "role", "cached", "description"],
        [[r.name, r.input_size, r.role, "yes" if r.cached else "", r.description] for r in rows],
    )


@zoo_group.command("export")
@click.argument("name")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
@click.option("--single-file", is_flag=True, help="Embed weights instead of FILE.data beside it.")
def zoo_export(name: str, output: str, single_file: bool) -> None:
    """Export zoo model NAME to an ONNX file."""
    from data.zoo import export_model

    path = export_model(name, Path(output), external_data=not single_file)
    click.echo(f"wrote {path}")


@contextmanager
def _counter(label: str, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """A progress bar driven by ``callback(done, total)`` (total known only once started)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=True,
        disable=not enabled,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@cli.group("dataset")
def dataset_group() -> None:
    """Fusion-group datasets for training the GNN validity classifier."""


@dataset_group.command("generate")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False),
    help="Dataset directory (default: the fusionplan cache).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--groups",
    type=int,
    default=None,
    help="Distinct groups from the training models (default 12,000).",
)
@click.option(
    "--unseen-groups",
    type=int,
    default=None,
    help="Groups from the unseen test models (default 2,000).",
)
@click.option("--processes", type=int, default=2, show_default=True)
@click.option("--overwrite", is_flag=True, help="Discard an existing dataset with other settings.")
@click.option("--quiet", "-q", is_flag=True)
def dataset_generate(output, seed, groups, unseen_groups, processes, overwrite, quiet) -> None:
    """Sample fusion groups from the zoo and label them under LBDF and BRR at 5 buffers.

    Deterministic for a seed, parallel, resumable: rerun the same command after an
    interruption and only missing shards are built.
    """
    from data.dataset import default_dataset_dir, generate_dataset

    sizes = {k: v for k, v in (("groups", groups), ("unseen_groups", unseen_groups)) if v}
    out = Path(output) if output else default_dataset_dir()
    with _counter("generating shards", not quiet) as progress:
        manifest = generate_dataset(
            out, seed=seed, processes=processes, overwrite=overwrite, progress=progress, **sizes
        )
    train, unseen = manifest["counts"]["train"], manifest["counts"]["unseen"]
    click.echo(
        f"wrote {out}: {train['groups']} training groups ({train['samples_per_scheme']} "
        f"samples per scheme) + {unseen['groups']} unseen-model groups, "
        f"{manifest['generation_seconds']:.0f} s"
    )


@cli.group("train")
def train_group() -> None:
    """Train the GIN classifier and the parametric explainers; weights go to the shipped
    location unless --out is given (then set FUSIONPLAN_WEIGHTS_DIR to use them)."""


_SCHEME = click.option("--scheme", type=click.Choice(["lbdf", "brr"]), required=True)
_SEED = click.option("--seed", type=int, default=0, show_default=True)
_OUT = click.option("--out", type=click.Path(file_okay=False), help="Weights directory.")


@train_group.command("gin")
@_SCHEME
@click.option("--dataset", type=click.Path(file_okay=False), help="Dataset directory.")
@click.option("--epochs", type=int, default=50, show_default=True)
@_SEED
@_OUT
@click.option("--quiet", "-q", is_flag=True)
def train_gin_cmd(scheme, dataset, epochs, seed, out, quiet) -> None:
    """Train the GIN validity classifier of one scheme (80/10/10 split by group)."""
    from data.dataset import default_dataset_dir
    from explainers.train_gin import train_gin

    with _counter(f"GIN {scheme} epochs", not quiet) as progress:
        metrics = train_gin(
            dataset or default_dataset_dir(),
            scheme,
            epochs=epochs,
            seed=seed,
            progress=progress,
            out_dir=out,
        )
    rows = []
    for split in ("test", "unseen"):
        m = metrics[split]
        rows.append([split, f"{m['accuracy']:.4f}", f"{m['f1']:.4f}", str(m["confusion"])])
    _print_table(
        ["split", "accuracy", "F1 (valid)", "confusion [[TN, FP], [FN, TP]]"],
        rows,
        title=f"GIN {scheme.upper()}",
    )


_DATASET = click.option(
    "--dataset",
    type=click.Path(file_okay=False),
    help="Dataset directory (default: the fusionplan cache).",
)


def _max_samples(default: int):
    return click.option(
        "--max-samples",
        type=int,
        default=default,
        show_default=True,
        help="GIN-predicted-invalid training samples used.",
    )


@train_group.command("pg")
@_SCHEME
@_DATASET
@click.option("--epochs", type=int, default=25, show_default=True)
@_max_samples(2000)
@_SEED
@_OUT
@click.option("--quiet", "-q", is_flag=True)
def train_pg_cmd(scheme, dataset, epochs, max_samples, seed, out, quiet) -> None:
    """Train PGExplainer against the scheme's GIN (train the GIN first)."""
    _train_explainer(
        "pg", scheme, dataset, out, quiet, epochs=epochs, seed=seed, max_samples=max_samples
    )


@train_group.command("rg")
@_SCHEME
@_DATASET
@click.option("--pretrain-epochs", type=int, default=10, show_default=True)
@click.option("--epochs", type=int, default=10, show_default=True)
@_max_samples(1000)
@_SEED
@_OUT
@click.option("--quiet", "-q", is_flag=True)
def train_rg_cmd(scheme, dataset, pretrain_epochs, epochs, max_samples, seed, out, quiet) -> None:
    """Train RG-Explainer (pre-training, then REINFORCE) against the scheme's GIN."""
    _train_explainer(
        "rg",
        scheme,
        dataset,
        out,
        quiet,
        pretrain_epochs=pretrain_epochs,
        epochs=epochs,
        seed=seed,
        max_samples=max_samples,
    )


def _train_explainer(kind: str, scheme: str, dataset, out, quiet: bool, **options) -> None:
    """Run train_pg / train_rg with a progress bar and report the checkpoint written."""
    from explainers import train_explainers

    train = {"pg": train_explainers.train_pg, "rg": train_explainers.train_rg}[kind]
    with _counter(f"{kind.upper()} {scheme} epochs", not quiet) as progress:
        result = train(
            scheme, dataset, progress=progress, directory=Path(out) if out else None, **options
        )
    click.echo(f"wrote {result.path} ({result.meta.get('train_seconds', 0):.0f} s)")


def _names(value: str | None) -> tuple[str, ...] | None:
    return tuple(v.strip() for v in value.split(",") if v.strip()) if value else None


@cli.group("bench", invoke_without_command=True)
@click.option("--quick", is_flag=True, help="CI-sized: few models, tiny budgets, one seed.")
@click.option("--only", help="Comma list of table2,table3,table4,fig3,fig5 (default: all).")
@click.option("--seeds", type=int, help="Seeds per cell (default 3; quick 1).")
@click.option("--budget-large", type=int, help="Table II plans (default 5000).")
@click.option("--budget-small", type=int, help="Tables III-V plans (default 2000).")
@click.option("--budget-fig5", type=int, help="Figure 5's largest budget (default 4000).")
@click.option("--splitters", help="Comma list (default random,tree,gnne,pg,rg).")
@click.option(
    "--jobs",
    "-j",
    type=int,
    default=os.cpu_count() or 1,
    show_default=True,
    help="Parallel processes.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="bench-out",
    show_default=True,
    help="Finished runs (runs.jsonl); rerunning resumes.",
)
@click.option(
    "--report",
    "report",
    type=click.Path(dir_okay=False),
    help="Markdown file for the tables (default OUT/report.md); an existing file "
    "keeps its text and gets the generated section replaced; PNGs go to its img/.",
)
@click.option("-q", "--quiet", is_flag=True)
@click.pass_context
def bench_group(
    ctx,
    quick,
    only,
    seeds,
    budget_large,
    budget_small,
    budget_fig5,
    splitters,
    jobs,
    out_dir,
    report,
    quiet,
) -> None:
    """Reproduce the paper's Tables II-V and Figures 3 and 5 (with no subcommand), next to
    the paper's figures and the exact optimum; or a measurement subcommand below."""
    if ctx.invoked_subcommand is not None:
        return
    from fusionplan.app.api import splitter_names
    from fusionplan.app.bench import BenchConfig, run_bench

    overrides = {
        k: v
        for k, v in dict(
            experiments=_names(only),
            seeds=seeds,
            large_budget=budget_large,
            small_budget=budget_small,
            fig5_budget=budget_fig5,
            splitters=_names(splitters),
        ).items()
        if v is not None
    }
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    known = set(splitter_names())
    bad = sorted(set(overrides.get("splitters", ())) - known)
    if bad:
        raise ConfigError(
            f"unknown splitter {', '.join(bad)} (choose from {', '.join(sorted(known))})"
        )
    config = BenchConfig.quick(**overrides) if quick else BenchConfig(**overrides)
    config.check()
    report_path = Path(report) if report else Path(out_dir) / "report.md"
    command = (
        "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else "fusionplan bench"
    )
    with _counter("bench runs", not quiet) as progress:
        path = run_bench(
            config, out_dir, report_path, jobs=jobs, command=command, progress=progress
        )
    click.echo(f"wrote {path}")


@bench_group.command("speed")
@click.argument("models", nargs=-1, required=True)
@click.option("--buffer", default="256KB", show_default=True)
@click.option("--scheme", type=click.Choice(["lbdf", "brr"]), default="lbdf", show_default=True)
@click.option("--search", "search_name", default="ls", show_default=True)
@click.option("--splitter", default="tree", show_default=True)
@click.option("--budget", type=int, default=2000, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_speed(models, buffer, scheme, search_name, splitter, budget, repeats, seed) -> None:
    """Plans per second of a search on MODELS (median of --repeats cold runs)."""
    from fusionplan.app.api import PlanRequest
    from fusionplan.app.bench.speed import search_speed

    request = PlanRequest(buffer, scheme, search_name, splitter, budget, seed)
    rows = search_speed(models, request, repeats)
    _print_table(
        ["model", "search", "splitter", "plans/s (median)", "runs", "best DRAM MB"],
        [
            [
                r.model,
                r.search,
                r.splitter,
                f"{r.plans_per_second:.0f}",
                " ".join(f"{x:.0f}" for x in r.runs),
                f"{r.best_dram_mb:.3f}",
            ]
            for r in rows
        ],
        title=f"{buffer} {scheme.upper()}, budget {budget}",
    )


@bench_group.command("zoo")
@click.argument("models", nargs=-1)
def bench_zoo(models) -> None:
    """Export (into an empty temporary cache) and import time per zoo model (default: all)."""
    from data.zoo import zoo_names
    from fusionplan.app.bench.speed import zoo_times

    rows = zoo_times(models or zoo_names())
    _print_table(
        ["model", "export s", "import s", "ops", "weights MB"],
        [
            [r.model, f"{r.export_s:.2f}", f"{r.import_s:.3f}", r.ops, f"{r.weights_mb:.1f}"]
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one-line errors and exit code 2 for bad input."""
    import warnings

    # torch_geometric's import trips torch's own deprecation of torch.jit.script; users
    # cannot act on it, so it is not shown.
    warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
    try:
        cli.main(args=argv, prog_name="fusionplan", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("fusionplan: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"fusionplan: error: {exc.format_message()} (see --help)", err=True)
        sys.exit(exc.exit_code)
    except FusionPlanError as exc:
        click.echo(f"fusionplan: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("fusionplan: interrupted", err=True)
        sys.exit(130)
