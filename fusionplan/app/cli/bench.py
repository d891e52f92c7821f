"""``fusionplan bench``: the paper's tables and figures, speed measurements, and the
catalogue of every torchvision model planned."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from accel_model.accelerator import format_size, parse_size
from fusionplan.app.bench import BenchConfig, run_bench
from fusionplan.app.bench.catalogue import CatalogueConfig, catalogue_models, run_catalogue
from fusionplan.app.bench.certified import (
    CertifiedConfig,
    certified_models,
    equal_time_table,
    run_certified,
    run_exact_table,
)
from fusionplan.app.bench.determinism import MODELS as DETERMINISM_MODELS
from fusionplan.app.bench.determinism import DeterminismConfig, run_determinism
from fusionplan.app.bench.fidelity import TABLES as FIDELITY_TABLES
from fusionplan.app.bench.fidelity import FidelityConfig, run_fidelity
from fusionplan.app.bench.optimus import BUFFERS as OPTIMUS_BUFFERS
from fusionplan.app.bench.optimus import DATA as OPTIMUS_DATA
from fusionplan.app.bench.optimus import NETWORKS as OPTIMUS_NETWORKS
from fusionplan.app.bench.optimus import run_optimus_bench
from fusionplan.app.bench.optimus_energy import run_optimus_energy_bench
from fusionplan.app.bench.optimus_oracle import OptimusRunner, optimus_checkout
from fusionplan.app.bench.queries import HARD_CELLS, QueriesConfig
from fusionplan.app.bench.queries import markdown as queries_markdown
from fusionplan.app.bench.queries import run_bench as run_queries_bench
from fusionplan.app.bench.scaling import job_timing
from fusionplan.app.bench.speed import search_speed, zoo_times
from fusionplan.app.bench.streams import MODELS as STREAMS_MODELS
from fusionplan.app.bench.streams import markdown as streams_markdown
from fusionplan.app.bench.streams import run_bench as run_streams_bench
from fusionplan.app.bench.streams import write_markdown as write_streams_markdown
from fusionplan.app.bench.substitute_catalogue import (
    SubstituteCatalogueConfig,
    run_substitute_catalogue,
)
from fusionplan.app.bench.substitute_dram import DramBenchConfig
from fusionplan.app.bench.substitute_dram import markdown as dram_markdown
from fusionplan.app.bench.substitute_dram import run_bench as run_dram_bench
from fusionplan.app.bench.substitution import BENCH_SEARCHES as SUBSTITUTION_SEARCHES
from fusionplan.app.bench.substitution import MODELS as SUBSTITUTION_MODELS
from fusionplan.app.bench.substitution import markdown as substitution_markdown
from fusionplan.app.bench.substitution import run_bench as run_substitution_bench
from fusionplan.app.bench.substitution import write_markdown as write_substitution_markdown
from fusionplan.app.bench.sweeps import sweep_model
from fusionplan.app.bench.zigzag import markdown as zigzag_markdown
from fusionplan.app.bench.zigzag import run_zigzag_bench, zigzag_imports
from fusionplan.app.cli.common import (
    EngineOptions,
    OutputPath,
    check_distinct_outputs,
    comma_list,
    engine_options,
    print_table,
    progress_bar,
    scheme_option,
)
from fusionplan.app.pipeline import PlanRequest
from fusionplan.batching.workloads import WORKLOADS, get_workload
from fusionplan.data.zoo import zoo_entry, zoo_names
from fusionplan.engines.scaling import markdown as scaling_markdown
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import check_output_path
from fusionplan.passes.substitution.pipeline import PLANNED_BUDGET
from fusionplan.passes.substitution.search import REWRITE_SEARCHES
from fusionplan.passes.substitution.search.base import (
    DEFAULT_BUDGET as DEFAULT_SUBSTITUTION_BUDGET,
)
from fusionplan.planning.split import SPLITTERS


@click.group("bench", invoke_without_command=True)
@click.option("--quick", is_flag=True, help="CI-sized: few models, tiny budgets, one seed.")
@click.option("--only", help="Comma list of table2,table3,table4,fig3,fig5 (default: all).")
@click.option("--seeds", type=int, help="Seeds per cell (default 3; quick 1).")
@click.option("--budget-large", type=int, help="Table II plans (default 5000).")
@click.option("--budget-small", type=int, help="Tables III-V plans (default 2000).")
@click.option("--budget-fig5", type=int, help="Figure 5's largest budget (default 4000).")
@click.option("--splitters", help="Comma list (default random,tree,gnne,pg,rg).")
@engine_options(default_processes=os.cpu_count() or 1)
@click.option(
    "--out",
    "out_dir",
    metavar="DIRECTORY",
    default="bench-out",
    show_default=True,
    help="Finished runs (runs.jsonl); rerunning resumes.",
)
@click.option(
    "--report",
    "report",
    metavar="FILE",
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
    engine_opts: EngineOptions,
    out_dir,
    report,
    quiet,
) -> None:
    """Reproduce the paper's Tables II-V and Figures 3 and 5 (with no subcommand), next to
    the paper's figures and the exact optimum; or a measurement subcommand below."""
    if ctx.invoked_subcommand is not None:
        return
    # Checked here, not by an OutputPath type: click converts a group's options (defaults
    # included) for every subcommand, and `bench speed` writes nothing.
    check_output_path(out_dir, directory=True)
    report_path = check_output_path(Path(out_dir) / "report.md" if report is None else report)

    overrides = {
        k: v
        for k, v in dict(
            experiments=comma_list(only),
            seeds=seeds,
            large_budget=budget_large,
            small_budget=budget_small,
            fig5_budget=budget_fig5,
            splitters=comma_list(splitters),
        ).items()
        if v is not None
    }
    for name in overrides.get("splitters", ()):
        SPLITTERS.check(name)
    config = BenchConfig.quick(**overrides) if quick else BenchConfig(**overrides)
    config.check()
    command = (
        "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else "fusionplan bench"
    )
    with progress_bar("bench runs", enabled=not quiet) as progress:
        path = run_bench(
            config,
            out_dir,
            report_path,
            engine=engine_opts.make(),
            retries=engine_opts.retries,
            command=command,
            progress=progress,
        )
    click.echo(f"wrote {path}")


@bench_group.command("speed")
@click.argument("models", nargs=-1, required=True)
@click.option("--buffer", default="256KB", show_default=True)
@scheme_option(default="lbdf", show_default=True)
@click.option("--search", "search_name", default="ls", show_default=True)
@click.option("--splitter", default="tree", show_default=True)
@click.option("--budget", type=int, default=2000, show_default=True)
@click.option("--repeats", type=int, default=3, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_speed(models, buffer, scheme, search_name, splitter, budget, repeats, seed) -> None:
    """Plans per second of a search on MODELS (median of --repeats cold runs)."""
    request = PlanRequest(
        buffer=buffer,
        scheme=scheme,
        search=search_name,
        splitter=splitter,
        budget=budget,
        seed=seed,
    )
    rows = search_speed(models, request, repeats)
    print_table(
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
    rows = zoo_times(models or zoo_names())
    print_table(
        ["model", "export s", "import s", "ops", "weights MB"],
        [
            [r.model, f"{r.export_s:.2f}", f"{r.import_s:.3f}", r.ops, f"{r.weights_mb:.1f}"]
            for r in rows
        ],
    )


@bench_group.command("catalogue")
@click.option(
    "--models",
    help="Comma list of zoo or torchvision names (default: every torchvision classification "
    "and segmentation model, the paper's twelve first).",
)
@click.option("--schemes", default="lbdf,brr", show_default=True, help="Comma list.")
@click.option("--buffers", default="128KB,512KB", show_default=True, help="Comma list.")
@click.option("--search", "search_name", default="ls", show_default=True)
@click.option("--splitter", default="tree", show_default=True)
@click.option("--budget", type=int, default=1000, show_default=True, help="Plans per point.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    "out_dir",
    metavar="DIRECTORY",
    default="bench-out/catalogue",
    show_default=True,
    help="Finished models (runs.jsonl) and catalogue.csv; rerunning resumes.",
)
@click.option(
    "--report",
    metavar="FILE",
    help="Markdown file for the table (default OUT/catalogue.md); an existing file keeps "
    "its text and gets only the catalogue's generated section replaced.",
)
@click.option("--retry-failed", is_flag=True, help="Run models whose stored row failed again.")
@engine_options(default_processes=1)
@click.option("-q", "--quiet", is_flag=True)
def bench_catalogue(
    models,
    schemes,
    buffers,
    search_name,
    splitter,
    budget,
    seed,
    out_dir,
    report,
    retry_failed,
    engine_opts: EngineOptions,
    quiet,
) -> None:
    """Export, import and plan every torchvision model (or --models): import time, op
    count, compulsory traffic and the best DRAM at each scheme and buffer. A model that
    fails gets a row saying why; each model runs in a worker process (-j of them, or on
    Ray with --engine ray)."""
    check_output_path(out_dir, directory=True)
    report_path = check_output_path(Path(out_dir) / "catalogue.md" if report is None else report)
    config = CatalogueConfig(
        schemes=comma_list(schemes) or (),
        buffers=comma_list(buffers) or (),
        search=search_name,
        splitter=splitter,
        budget=budget,
        seed=seed,
    )
    if not config.points():
        raise ConfigError("--schemes and --buffers must each name at least one value")
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("catalogue models", enabled=not quiet) as progress:
        rows = run_catalogue(
            comma_list(models) or catalogue_models(),
            config,
            out_dir,
            report_path,
            engine=engine_opts.make(isolate=True),
            retries=engine_opts.retries,
            retry_failed=retry_failed,
            command=command or "fusionplan bench catalogue",
            progress=progress,
        )
    failed = sum("error" in r for r in rows)
    click.echo(f"wrote {report_path} ({len(rows)} models, {failed} with a failure row)")


@bench_group.command("substitute-catalogue")
@click.option(
    "--models",
    help="Comma list of zoo or torchvision names (default: the zoo, then every other "
    "torchvision classification and segmentation model).",
)
@click.option("--search", "search_name", default="metaflow", show_default=True)
@click.option("--budget", type=int, default=DEFAULT_SUBSTITUTION_BUDGET, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    "out_dir",
    metavar="DIRECTORY",
    default="bench-out/substitute-catalogue",
    show_default=True,
    help="Finished models (runs.jsonl); rerunning resumes.",
)
@click.option("--report", metavar="FILE", help="Markdown file (default OUT/report.md).")
@click.option("--retry-failed", is_flag=True, help="Run models whose stored row failed again.")
@click.option("-q", "--quiet", is_flag=True)
def bench_substitute_catalogue(
    models, search_name, budget, seed, out_dir, report, retry_failed, quiet
) -> None:
    """Every zoo and torchvision model through the substitute pre-pass (standard ONNX
    output): ops before and after, substitutions, the equivalence error against the
    original (onnxruntime optimisations off), contrib-free, and a reason where one fails.
    Each model runs in a worker process; rerunning resumes."""
    check_output_path(out_dir, directory=True)
    report_path = check_output_path(Path(out_dir) / "report.md" if report is None else report)
    config = SubstituteCatalogueConfig(search=search_name, budget=budget, seed=seed)
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("models", enabled=not quiet) as progress:
        rows = run_substitute_catalogue(
            comma_list(models) or catalogue_models(),
            config,
            out_dir,
            report_path,
            retry_failed=retry_failed,
            command=command or "fusionplan bench substitute-catalogue",
            progress=progress,
        )
    failed = sum("error" in r for r in rows)
    click.echo(f"wrote {report_path} ({len(rows)} models, {failed} failed)")


@bench_group.command("sweeps")
@click.argument("models", nargs=-1)
@click.option("--schemes", default="lbdf,brr", show_default=True)
@click.option("--buffers", default="64KB,128KB,256KB,512KB,1MB,2MB", show_default=True)
@click.option("--search", "search_name", default="ls", show_default=True)
@click.option("--budget", type=int, default=500, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_sweeps(models, schemes, buffers, search_name, budget, seed) -> None:
    """DRAM-vs-buffer curves of MODELS (default: the zoo): a warm-started heuristic sweep and
    the exact optimum under the tiled and the paper single-layer costs; counts rising steps."""
    sizes = [parse_size(b) for b in buffers.split(",") if b.strip()]
    names = models or zoo_names()
    for name in names:
        if not Path(name).is_file():
            zoo_entry(name)  # an unknown name fails before any work
    rows = [
        sweep_model(m, s, sizes, search=search_name, budget=budget, seed=seed)
        for m in names
        for s in comma_list(schemes) or ()
    ]
    # markdown, one row per curve: the table goes into docs/results.md as is
    click.echo(
        f"| model | scheme | {search_name} MB | optimum MB | paper optimum MB | rises "
        "(heuristic / optimum / paper) | proven | s |"
    )
    click.echo("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        curves = (r.heuristic_mb, r.optimum_mb, r.paper_optimum_mb)
        cells = [" / ".join(f"{v:.2f}" for v in c) for c in curves]
        rises = " / ".join(str(r.rises(c)) for c in curves)
        proven = "yes" if r.proven else "no"
        click.echo(
            f"| {r.model} | {r.scheme.upper()} | {' | '.join(cells)} | {rises} | {proven} "
            f"| {r.seconds:.1f} |"
        )
    click.echo(f"buffers: {', '.join(format_size(b) for b in sorted(sizes))}")


@bench_group.command("batching")
@click.option("--workloads", default=",".join(WORKLOADS.names()), show_default=True)
@click.option("--batch-sizes", default="1,8,32,64,256", show_default=True)
@click.option("--hidden", "hiddens", default="32,128,512", show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--out", type=OutputPath(), help="Write the markdown table here too.")
@click.option("--plot", "plot_path", type=OutputPath(), help="Throughput plot (PNG).")
def bench_batching(workloads, batch_sizes, hiddens, repeats, out, plot_path) -> None:
    """Dynamic batching as ED-Batch measures it: batches and inputs/s of depth, agenda and
    FSM (naive and PQ layout) over batch sizes and hidden sizes; prints a markdown table."""
    check_distinct_outputs({"--out": out, "--plot": plot_path})
    # torch (seconds to import) loads when the bench runs, not for `bench --help`
    from fusionplan.app.bench import batching

    names = list(comma_list(workloads) or ())
    for name in names:
        get_workload(name)  # an unknown name fails before any work
    sizes = [int(v) for v in batch_sizes.split(",") if v.strip()]
    widths = [int(v) for v in hiddens.split(",") if v.strip()]
    if not sizes or not widths or min(sizes + widths) < 1:
        raise click.BadParameter("batch and hidden sizes must be positive integers")
    cells = batching.run_bench(
        names, sizes, widths, repeats=repeats, progress=lambda s: click.echo(f"done {s}", err=True)
    )
    click.echo(batching.markdown(cells))
    if out:
        batching.write_markdown(cells, Path(out))
    if plot_path:
        batching.plot(cells, Path(plot_path))


@bench_group.command("substitute")
@click.option("--models", default=",".join(SUBSTITUTION_MODELS), show_default=True)
@click.option("--searches", default=",".join(SUBSTITUTION_SEARCHES), show_default=True)
@click.option(
    "--depths",
    default="5,10,15,20,25",
    show_default=True,
    help="K for the exact OCGGS searches (all on resnet_stack*, the first elsewhere).",
)
@click.option("--budget", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=20, show_default=True)
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(directory=True),
    default="bench-substitute",
    show_default=True,
    help="runs.jsonl (resumable), the rewritten synthetic inputs and results.md.",
)
def bench_substitute(models, searches, depths, budget, repeats, out_dir) -> None:
    """Every substitution search on CNNs, a BERT-like encoder and ResNet-block stacks:
    analytic H100 cost reached, search time, graphs, peak memory, and the measured
    onnxruntime CPU latency of the original and the rewritten model."""
    names = list(comma_list(models) or ())
    chosen = list(comma_list(searches) or ())
    for name in chosen:
        REWRITE_SEARCHES.check(name)
    ks = [int(k) for k in comma_list(depths) or ()]
    cells = run_substitution_bench(
        names,
        chosen,
        Path(out_dir),
        depths=ks or [5],
        budget=budget,
        repeats=repeats,
        progress=lambda s: click.echo(f"done {s}", err=True),
    )
    write_substitution_markdown(cells, Path(out_dir) / "results.md")
    click.echo(substitution_markdown(cells))


@bench_group.command("substitute-dram")
@click.option(
    "--models",
    help="Comma list of zoo or torchvision names (default: the catalogue, as bench catalogue).",
)
@click.option("--buffer", default="128KB", show_default=True)
@click.option("--scheme", default="brr", show_default=True)
@click.option("--bytes-per-element", type=int, default=1, show_default=True)
@click.option(
    "--effort",
    type=click.FloatRange(min=0, min_open=True),
    default=0.25,
    show_default=True,
    help="The planner's effort for every column (fusionplan plan --effort).",
)
@click.option("--search", "search_name", default="taso", show_default=True)
@click.option(
    "--budget", type=click.IntRange(min=1), default=PLANNED_BUDGET, show_default=True,
    help="Candidate graphs of the DRAM search.",
)  # fmt: skip
@click.option(
    "--out",
    "out_dir",
    metavar="DIRECTORY",
    default="bench-out/substitute-dram",
    show_default=True,
    help="Finished models (runs.jsonl) and substitute-dram.md; rerunning resumes.",
)
@click.option("-q", "--quiet", is_flag=True)
def bench_substitute_dram(
    models, buffer, scheme, bytes_per_element, effort, search_name, budget, out_dir, quiet
) -> None:
    """The planner's DRAM per model with no pass, with the latency-driven substitution and
    with the DRAM-driven one (issue 29), on one accelerator; counts lower / equal / higher."""
    check_output_path(out_dir, directory=True)
    REWRITE_SEARCHES.check(search_name)
    config = DramBenchConfig(buffer, scheme, bytes_per_element, effort, search_name, budget)
    config.plan_request().check()
    report_path = Path(out_dir) / "substitute-dram.md"
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("substitute-dram models", enabled=not quiet) as progress:
        rows = run_dram_bench(
            comma_list(models) or catalogue_models(),
            config,
            out_dir,
            report_path,
            command=command or "fusionplan bench substitute-dram",
            progress=progress,
        )
    click.echo(dram_markdown(rows))
    click.echo(f"wrote {report_path}")


@bench_group.command("queries")
@click.option(
    "--models",
    default=",".join(HARD_CELLS),
    show_default=True,
    help="Comma list of zoo, torchvision or synthetic graph names.",
)
@click.option("--schemes", default="brr", show_default=True)
@click.option("--buffers", default="128KB", show_default=True)
@click.option("--searches", default="rs,ls,nsga2", show_default=True)
@click.option("--splitters", default="random,tree,rg,gin-rg", show_default=True)
@click.option("--seeds", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--query-budget", type=click.IntRange(min=1), default=5000, show_default=True)
@click.option(
    "--checkpoints",
    default="500,1000,2000,5000",
    show_default=True,
    help="Query counts at which the table reads each run's best plan.",
)
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(directory=True),
    default="bench-out/queries",
    show_default=True,
    help="runs.jsonl (resumable) and queries.md.",
)
@engine_options(default_processes=1)
@click.option("-q", "--quiet", is_flag=True)
def bench_queries(models, schemes, buffers, searches, splitters, seeds, query_budget,
                  checkpoints, out_dir, engine_opts: EngineOptions, quiet) -> None:  # fmt: skip
    """Best DRAM against oracle queries (issue 28): random, tree and GNN-guided splitting
    inside rs, ls and nsga2 under one query budget, auto's plan as each cell's reference."""
    try:
        marks = tuple(int(c) for c in comma_list(checkpoints) or ())
    except ValueError:
        raise ConfigError(f"--checkpoints must be whole numbers, got {checkpoints!r}") from None
    config = QueriesConfig(
        schemes=comma_list(schemes) or (), buffers=comma_list(buffers) or (),
        searches=comma_list(searches) or (), splitters=comma_list(splitters) or (),
        seeds=tuple(range(seeds)), query_budget=query_budget, checkpoints=marks,
    )  # fmt: skip
    for search, buffer in ((se, b) for se in config.searches for b in config.buffers):
        PlanRequest(search=search, buffer=buffer, query_budget=query_budget).check()
    for splitter, scheme in ((sp, sc) for sp in config.splitters for sc in config.schemes):
        PlanRequest(splitter=splitter, scheme=scheme).check()
    report_path = Path(out_dir) / "queries.md"
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("queries runs", enabled=not quiet) as progress:
        rows = run_queries_bench(
            comma_list(models) or (), config, out_dir, report_path,
            engine=engine_opts.make(), command=command or "fusionplan bench queries",
            progress=progress,
        )  # fmt: skip
    click.echo(queries_markdown(rows, config))
    click.echo(f"wrote {report_path}")


@bench_group.command("streams")
@click.option("--models", default=",".join(STREAMS_MODELS), show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--no-execute", is_flag=True, help="Schedule and simulate only; run nothing.")
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(directory=True),
    default="bench-streams",
    show_default=True,
    help="runs.jsonl (resumable), the synthetic inputs and results.md.",
)
def bench_streams(models, repeats, no_execute, out_dir) -> None:
    """Nimble stream assignment on every zoo model and branchy graphs: streams, events,
    makespan simulated on the H100 roofline against its bounds, and the measured latency
    here (a thread per stream on the CPU; eager, CUDA Graph and multi-stream CUDA Graph on
    a GPU)."""
    cells = run_streams_bench(
        list(comma_list(models) or ()),
        Path(out_dir),
        repeats=repeats,
        execute=not no_execute,
        progress=lambda s: click.echo(f"done {s}", err=True),
    )
    write_streams_markdown(cells, Path(out_dir) / "results.md")
    click.echo(streams_markdown(cells))


@bench_group.command("scaling")
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.option("--cores", default="8,64,512", show_default=True, help="Comma list.")
@click.option(
    "--scale",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Project a job this many times larger (e.g. 20 for a 20x bigger dataset).",
)
def bench_scaling(source, cores, scale) -> None:
    """Project a finished job (a dataset directory or a bench --out directory) onto more
    cores from its measured task times and serial driver work (Amdahl, LPT scheduling)."""
    counts = []
    for c in comma_list(cores) or ():
        if not c.isdigit() or int(c) < 1:
            raise ConfigError(f"--cores wants whole numbers >= 1, got {c!r}")
        counts.append(int(c))
    timing = job_timing(source)
    if not timing.task_seconds:
        raise ConfigError(f"{source} recorded no task times; rerun the job to measure them")
    click.echo(scaling_markdown(timing.scaled(scale) if scale != 1 else timing, counts))


@bench_group.command("certified")
@click.option(
    "--models", help="Comma list (default: the zoo, then every torchvision classification model)."
)
@click.option("--schemes", default="lbdf,brr", show_default=True, help="Comma list.")
@click.option("--buffers", default="128KB,512KB", show_default=True, help="Comma list.")
@click.option("--ls-budget", type=int, default=5000, show_default=True)
@click.option(
    "--exact-limit",
    type=float,
    default=60.0,
    show_default=True,
    help="Exact search on cells auto did not prove, in seconds of work on the reference "
    "machine (search/effort.py: reproducible, not wall-clock; 0: skip).",
)
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(directory=True),
    default="bench-out/certified",
    show_default=True,
    help="Finished cells (runs.jsonl); rerunning resumes.",
)
@click.option(
    "--report",
    type=OutputPath(),
    help="Markdown file for the table (default "
    "OUT/certified.md); only its generated section is replaced.",
)
@click.option("-q", "--quiet", is_flag=True)
def bench_certified(models, schemes, buffers, ls_budget, exact_limit, out_dir, report, quiet):
    """The default auto search on every model with its certified gap, LS beside it, and
    the optimum where a longer exact search proves it (docs/design.md, "Certified plans")."""
    report = report or str(Path(out_dir) / "certified.md")
    config = CertifiedConfig(
        schemes=comma_list(schemes) or (),
        buffers=comma_list(buffers) or (),
        ls_budget=ls_budget,
        exact_limit_s=exact_limit,
    )
    names = comma_list(models) or certified_models()
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("certified cells", enabled=not quiet) as progress:
        rows = run_certified(
            names,
            config,
            out_dir,
            report,
            command=command or "fusionplan bench certified",
            progress=progress,
        )
    click.echo(f"wrote {report} ({len(rows)} cells)")


@bench_group.command("exact")
@click.option("--models", help="Comma list (default: the zoo).")
@click.option("--schemes", default="lbdf,brr", show_default=True, help="Comma list.")
@click.option("--buffers", default="64KB,128KB,256KB,512KB,1MB,2MB", show_default=True)
@click.option(
    "--time-limit",
    type=float,
    default=60.0,
    show_default=True,
    help="Work per exact search, in seconds on the reference machine (search/effort.py).",
)
@click.option(
    "--out",
    "out_dir",
    type=OutputPath(directory=True),
    default="bench-out/exact",
    show_default=True,
)
@click.option("--report", type=OutputPath(), help="Markdown file (default OUT/exact.md).")
def bench_exact(models, schemes, buffers, time_limit, out_dir, report):
    """Time, states and peak heap for the exact search to prove the optimum."""
    report = report or str(Path(out_dir) / "exact.md")
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    rows = run_exact_table(
        comma_list(models) or zoo_names(),
        comma_list(schemes) or (),
        comma_list(buffers) or (),
        time_limit,
        out_dir,
        report,
        command=command or "fusionplan bench exact",
    )
    click.echo(f"wrote {report} ({len(rows)} cells)")


@bench_group.command("equal-time")
@click.argument("cells", nargs=-1, required=True)
@click.option("--seconds", type=float, default=10.0, show_default=True)
def bench_equal_time(cells, seconds):
    """LNS against LS and NSGA-II at equal wall time on CELLS (MODEL:SCHEME:BUFFER, e.g.
    googlenet:brr:128KB); prints a markdown table."""
    parsed = []
    for cell in cells:
        parts = cell.split(":")
        if len(parts) != 3:
            raise ConfigError(
                f"cell {cell!r} is not MODEL:SCHEME:BUFFER (e.g. googlenet:brr:128KB)"
            )
        parsed.append((parts[0], parts[1].lower(), parts[2]))
    for _, scheme, buffer in parsed:
        PlanRequest(buffer=buffer, scheme=scheme).check()
    click.echo(equal_time_table(parsed, seconds))


@bench_group.command("determinism")
@click.option("--models", help="Comma list (default: ten zoo models, Inception/ViT included).")
@click.option("--schemes", default="lbdf,brr", show_default=True, help="Comma list.")
@click.option("--buffers", default="128KB,512KB", show_default=True, help="Comma list.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--hog", type=click.IntRange(min=0), default=2, show_default=True,
              help="Busy processes during the loaded round.")  # fmt: skip
@click.option("--effort", type=float, default=1.0, show_default=True)
@click.option("--no-engines", is_flag=True, help="Skip the local vs Ray sweep comparison.")
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False),
    help="A report with `bench certified`'s section: its auto MB goes beside each cell.",
)
@click.option("--report", type=OutputPath(), default="bench-out/determinism.md",
              show_default=True)  # fmt: skip
@click.option("-q", "--quiet", is_flag=True)
def bench_determinism(
    models, schemes, buffers, repeats, hog, effort, no_engines, baseline, report, quiet
):
    """Same command, same bytes: every cell planned in fresh processes (own hash seeds),
    repeated, under a CPU hog, and swept on the local engine and on Ray."""
    cells = tuple(
        (m, s, b)
        for m in (comma_list(models) or DETERMINISM_MODELS)
        for s in (comma_list(schemes) or ())
        for b in (comma_list(buffers) or ())
    )
    for _, scheme, buffer in cells[:1]:
        PlanRequest(buffer=buffer, scheme=scheme, effort=effort).check()
    config = DeterminismConfig(cells, repeats, hog, effort, not no_engines, baseline)
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("rounds", enabled=not quiet) as progress:
        rows = run_determinism(config, report, command or "fusionplan bench determinism",
                               progress)  # fmt: skip
    same = sum(r["same_repeats"] == repeats and r["same_under_hog"] for r in rows)
    click.echo(f"wrote {report}: {same} of {len(rows)} cells identical in every round")


def optimus_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say where Optimus's code is and what runs it."""
    command = click.option(
        "--optimus-python",
        help="The interpreter that runs Optimus (needs numpy, scipy); default "
        "$FUSIONPLAN_OPTIMUS_PYTHON, else this one.",
    )(command)
    return click.option(
        "--optimus-dir",
        type=click.Path(file_okay=False),
        help="An Optimus checkout (github SheaCai/optimus); default $FUSIONPLAN_OPTIMUS_DIR.",
    )(command)


@bench_group.command("optimus")
@optimus_options
@click.option(
    "--exact-limit",
    type=float,
    default=60.0,
    show_default=True,
    help="Work per exact search, in seconds on the reference machine (search/effort.py).",
)
@click.option(
    "--report",
    type=OutputPath(),
    default="bench-out/optimus.md",
    show_default=True,
    help="Markdown file for the tables; only its generated section is replaced.",
)
@click.option(
    "--data",
    type=OutputPath(),
    default=str(OPTIMUS_DATA),
    show_default=True,
    help="JSON file for Optimus's figures (rewritten each run).",
)
@click.option("-q", "--quiet", is_flag=True)
def bench_optimus(optimus_dir, optimus_python, exact_limit, report, data, quiet):
    """Optimus's own code as the referee of the optimus profile: per cell, Optimus's optimum,
    fusionplan's and fusionplan's plan priced by Optimus's code, and every group priced both
    ways. Skips (exit 0) without an Optimus checkout."""
    root = optimus_checkout(optimus_dir)
    if root is None:
        click.echo(
            "bench optimus: skipped, no Optimus checkout (--optimus-dir or $FUSIONPLAN_OPTIMUS_DIR)"
        )
        return
    runner = OptimusRunner(root, optimus_python or "")
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    total = len(OPTIMUS_NETWORKS) * len(OPTIMUS_BUFFERS)
    with progress_bar("optimus cells", total, enabled=not quiet) as progress:
        run_optimus_bench(
            report,
            runner,
            exact_limit,
            command=command or "fusionplan bench optimus",
            progress=progress,
            data_path=data,
        )
    click.echo(f"wrote {report} and {data}")


@bench_group.command("optimus-energy")
@optimus_options
@click.option(
    "--exact-limit",
    type=float,
    default=600.0,
    show_default=True,
    help="Work per exact search, in seconds on the reference machine (search/effort.py).",
)
@click.option(
    "--networks",
    default=",".join(OPTIMUS_NETWORKS),
    show_default=True,
    help="Comma list of Optimus's networks.",
)
@click.option(
    "--report",
    type=OutputPath(),
    default="bench-out/optimus-energy.md",
    show_default=True,
    help="Markdown file for the table; only its generated section is replaced.",
)
@click.option("-q", "--quiet", is_flag=True)
def bench_optimus_energy(optimus_dir, optimus_python, exact_limit, networks, report, quiet):
    """fusionplan's energy-optimal plans against Optimus's energy optimum, both priced by
    Optimus's code, with both search times. Skips (exit 0) without an Optimus checkout."""
    root = optimus_checkout(optimus_dir)
    if root is None:
        click.echo(
            "bench optimus-energy: skipped, no Optimus checkout "
            "(--optimus-dir or $FUSIONPLAN_OPTIMUS_DIR)"
        )
        return
    chosen = [n.strip() for n in networks.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in OPTIMUS_NETWORKS]
    if unknown:
        raise click.BadParameter(
            f"{unknown[0]!r} is not one of {', '.join(OPTIMUS_NETWORKS)}", param_hint="--networks"
        )
    runner = OptimusRunner(root, optimus_python or "")
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("optimus cells", len(chosen) * len(OPTIMUS_BUFFERS), not quiet) as bar:
        run_optimus_energy_bench(
            report, runner, exact_limit, chosen,
            command=command or "fusionplan bench optimus-energy", progress=bar,
        )  # fmt: skip
    click.echo(f"wrote {report}")


@bench_group.command("zigzag")
@click.option("--lpf-limit", type=click.IntRange(min=1), default=6, show_default=True,
              help="ZigZag's LOMA loop prime factors (more: more temporal mappings).")  # fmt: skip
@click.option("--out", type=OutputPath(), help="Write the markdown table here too.")
def bench_zigzag(lpf_limit, out) -> None:
    """Single conv layers priced by ZigZag (zigzag-dse, the ``zigzag`` extra) and by
    fusionplan on the same accelerator and buffer: MACs, DRAM, energy and its parts,
    latency, side by side. Skips (exit 0) where ZigZag does not import."""
    if not zigzag_imports():
        click.echo(
            "bench zigzag: skipped, ZigZag does not import (pip install 'fusionplan[zigzag]')"
        )
        return
    table = zigzag_markdown(run_zigzag_bench(lpf_limit=lpf_limit))
    click.echo(table)
    if out:
        Path(out).write_text(table + "\n")


@bench_group.command("fidelity")
@click.option(
    "--tables",
    default=",".join(FIDELITY_TABLES),
    show_default=True,
    help="Comma list of tables: "
    + ", ".join(f"{k} ({t.title})" for k, t in FIDELITY_TABLES.items()),
)
@click.option("--models", help="Comma list of zoo names (default: the paper's twelve).")
@click.option("--buffers", default="64KB,128KB,512KB", show_default=True, help="Comma list.")
@click.option("--bytes", "bytes_", default="1,2", show_default=True,
              help="Comma list of bytes per element.")  # fmt: skip
@click.option("--report", type=OutputPath(), default="bench-out/fidelity.md", show_default=True,
              help="Markdown file; only each table's generated section is replaced.")  # fmt: skip
@click.option("--optimus-dir", type=click.Path(file_okay=False),
              help="An Optimus checkout for the optimus table; default $FUSIONPLAN_OPTIMUS_DIR "
              "(without one the table is skipped).")  # fmt: skip
@click.option("--optimus-python",
              help="Optimus's interpreter; default $FUSIONPLAN_OPTIMUS_PYTHON.")  # fmt: skip
@engine_options(default_processes=1)
@click.option("-q", "--quiet", is_flag=True)
def bench_fidelity(
    tables, models, buffers, bytes_, report, optimus_dir, optimus_python,
    engine_opts: EngineOptions, quiet,
):  # fmt: skip
    """How close fusionplan's figures are to schedules that exist: each zoo layer's
    single-layer cost over its I/O lower bound (docs/cost-model.md, "I/O lower bounds"), the
    closed forms against replayed schedules, and Optimus's code pricing the optimus profile.
    The replay table keeps each model's counts in ``fidelity-replay/`` beside the report as
    they finish and a stopped run resumes from them (delete it after changing a cost model)."""
    names = comma_list(tables) or ()
    for name in names:
        if name not in FIDELITY_TABLES:
            raise ConfigError(
                f"unknown fidelity table {name!r} (choose from: {', '.join(FIDELITY_TABLES)})"
            )
    chosen = comma_list(models) or FidelityConfig().models
    for name in chosen:
        zoo_entry(name)  # an unknown name fails before any work
    for buffer in comma_list(buffers) or ():
        parse_size(buffer)
    try:
        per_element = tuple(int(v) for v in comma_list(bytes_) or ())
    except ValueError:
        raise ConfigError(f"--bytes {bytes_!r} is not a comma list of whole numbers") from None
    if not names or not comma_list(buffers) or not per_element or min(per_element) < 1:
        raise ConfigError("--tables, --buffers and --bytes (>= 1) must each name a value")
    root = optimus_checkout(optimus_dir) if "optimus" in names else None
    runner = OptimusRunner(root, optimus_python or "") if root else None
    data = Path(report).with_name("optimus_oracle.json")
    cache = Path(report).with_name("fidelity-replay")  # each model's replay counts: resumes
    config = FidelityConfig(
        tuple(chosen), comma_list(buffers), per_element, runner, engine_opts.make(),
        optimus_data=data, cache=cache,
    )  # fmt: skip
    command = "fusionplan " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None
    with progress_bar("fidelity models", len(chosen), enabled=not quiet) as progress:
        built = run_fidelity(report, names, config, command or "fusionplan bench fidelity",
                             progress)  # fmt: skip
    skipped = [n for n in names if n not in built]
    click.echo(f"wrote {report} ({', '.join(built) or 'no table'})" + (
        f"; skipped {', '.join(skipped)}: no Optimus checkout (--optimus-dir or "
        "$FUSIONPLAN_OPTIMUS_DIR)" if skipped else ""))  # fmt: skip
