"""``fusionplan train gin|pg|rg|eval|explain-eval``: the GIN classifier, the trainable
explainers, how the GIN scores on a given model, and how the explainers point at cuts."""

from __future__ import annotations

import json
from pathlib import Path

import click

from explainers import EXPLAINERS
from explainers.checkpoints import weights_dir
from fusionplan.app.cli.common import (
    OutputPath,
    comma_list,
    print_table,
    progress_bar,
    scheme_option,
    whole_kb_sizes,
)
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import write_text_atomic


@click.group("train")
def train_group() -> None:
    """Train the GIN classifier and the parametric explainers; weights go to the shipped
    location unless --out is given (then set FUSIONPLAN_WEIGHTS_DIR to use them)."""


_SCHEME = scheme_option(required=True)
_SEED = click.option("--seed", type=int, default=0, show_default=True)
_OUT = click.option(
    "--out",
    type=OutputPath(directory=True),
    default=weights_dir,
    help="Weights directory (default: the shipped weights, or $FUSIONPLAN_WEIGHTS_DIR).",
)


@train_group.command("gin")
@_SCHEME
@click.option("--dataset", type=click.Path(file_okay=False), help="Dataset directory.")
@click.option("--epochs", type=int, default=25, show_default=True)
@click.option("--hidden", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--layers", type=click.IntRange(min=1), default=4, show_default=True)
@click.option(
    "--hold-out",
    help="Comma list of the dataset's training models to leave out of training and score "
    "as unseen (leave a whole family out to measure generalisation to it).",
)
@_SEED
@_OUT
@click.option("--quiet", "-q", is_flag=True)
def train_gin_cmd(scheme, dataset, epochs, hidden, layers, hold_out, seed, out, quiet) -> None:
    """Train the GIN validity classifier of one scheme (80/10/10 split by group), then fit
    its temperature on the validation split."""
    # torch and torch_geometric (seconds to import) load when training starts, not for
    # --help or a bad option
    from explainers.train_gin import train_gin
    from fusionplan.data.dataset import default_dataset_dir

    with progress_bar(f"GIN {scheme} epochs", enabled=not quiet) as progress:
        metrics = train_gin(
            dataset or default_dataset_dir(),
            scheme,
            epochs=epochs,
            seed=seed,
            progress=progress,
            out_dir=out,
            hidden=hidden,
            layers=layers,
            hold_out=comma_list(hold_out) or (),
        )
    rows = []
    for split in ("test", "unseen"):
        m = metrics[split]
        if m:
            rows.append([split, f"{m['accuracy']:.4f}", f"{m['f1']:.4f}", f"{m['ece']:.4f}",
                         str(m["confusion"])])  # fmt: skip
    print_table(
        ["split", "accuracy", "F1 (valid)", "ECE", "confusion [[TN, FP], [FN, TP]]"],
        rows,
        title=f"GIN {scheme.upper()} (temperature {metrics['temperature']:.3f})",
    )


@train_group.command("eval")
@click.argument("model")
@_SCHEME
@click.option(
    "--groups",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Groups of the model drawn and labelled by the cost model.",
)
@click.option(
    "--buffers",
    default="64KB,128KB,256KB,512KB,1MB,2MB",
    show_default=True,
    help="Comma list of buffer sizes.",
)
@click.option(
    "--adapt",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Then teach a copy of the GIN this model with up to N oracle answers from a second "
    "draw, and score it after every round of 64.",
)
@click.option(
    "--pick",
    type=click.Choice(["uncertain", "random"]),
    default="uncertain",
    show_default=True,
    help="Which samples --adapt asks about: where the GIN is least sure, or at random.",
)
@_SEED
@click.option("--json", "json_path", type=OutputPath(), help="Write the scores as JSON here.")
@click.option("--quiet", "-q", is_flag=True)
def eval_cmd(model, scheme, groups, buffers, adapt, pick, seed, json_path, quiet) -> None:
    """Score the GIN of a scheme on MODEL (zoo name, ONNX file or synthetic graph such as
    nasnet-c3): accuracy, F1 and the false-valid rate (overflowing groups called valid) per
    buffer, against the cost model's labels. Uses the shipped weights or
    $FUSIONPLAN_WEIGHTS_DIR. With --adapt N, also how the scores grow with oracle answers
    (active learning, explainers/active.py)."""
    picked = click.get_current_context().get_parameter_source("pick")
    if not adapt and picked is not click.core.ParameterSource.DEFAULT:
        raise click.BadParameter("--pick chooses what --adapt N asks about; give --adapt too")
    sizes = whole_kb_sizes(buffers)
    # torch and torch_geometric (seconds to import) load once the options are good
    from explainers.active import adapt_gin_on
    from explainers.eval_gin import evaluate_gin_on, scores_json
    from explainers.gin import load_gin_model

    kbs = [s // 1024 for s in sizes]
    with progress_bar(f"labelling {model} ({scheme})", enabled=not quiet) as progress:
        if adapt:
            curve = adapt_gin_on(
                load_gin_model(scheme), model, scheme, queries=adapt, pick=pick, groups=groups,
                buffers_kb=kbs, seed=seed, progress=progress,
            )  # fmt: skip
            scores = curve[0].scores
        else:
            scores = evaluate_gin_on(
                model, scheme, groups=groups, buffers_kb=kbs, seed=seed, progress=progress
            )
    _print_scores(scores, f"GIN {scheme.upper()} on {model}")
    data = {"model": model, "scheme": scheme, "groups": groups, "seed": seed,
            "scores": scores_json(scores)}  # fmt: skip
    if adapt:
        _print_scores(curve[-1].scores, f"after {curve[-1].queries} answers ({pick})")
        rows = [
            [str(p.queries), f"{p.overall.accuracy:.4f}", f"{p.overall.f1:.4f}",
             f"{p.overall.false_valid:.4f}"]
            for p in curve
        ]  # fmt: skip
        print_table(
            ["answers", "accuracy", "F1 (valid)", "false-valid"],
            rows,
            title=f"learning {model} from the oracle ({pick} picks, rounds of 64)",
        )
        data["adapt"] = {"pick": pick, "queries": adapt,
                         "curve": [{"queries": p.queries, "scores": scores_json(p.scores)}
                                   for p in curve]}  # fmt: skip
    if json_path:
        write_text_atomic(Path(json_path), json.dumps(data, indent=2) + "\n")


def _print_scores(scores, title: str) -> None:
    rows = [
        ["all" if s.buffer_kb is None else f"{s.buffer_kb} KB", str(s.samples),
         f"{s.valid_share:.3f}", f"{s.accuracy:.4f}", f"{s.f1:.4f}", f"{s.false_valid:.4f}"]
        for s in scores
    ]  # fmt: skip
    print_table(
        ["buffer", "samples", "valid share", "accuracy", "F1 (valid)", "false-valid"],
        rows,
        title=title,
    )


@train_group.command("explain-eval")
@click.argument("model")
@_SCHEME
@click.option(
    "--groups",
    type=click.IntRange(min=1),
    default=70,
    show_default=True,
    help="Invalid groups of 8-63 ops judged per buffer.",
)
@click.option(
    "--buffers", default="64KB,128KB,512KB", show_default=True, help="Comma list of buffer sizes."
)
@click.option(
    "--explainers",
    "kinds",
    default="gnne,pg,rg",
    show_default=True,
    help="Comma list of explainers judged besides tree, the middle edge and a random edge.",
)
@_SEED
@click.option("--json", "json_path", type=OutputPath(), help="Write the scores as JSON here.")
@click.option("--quiet", "-q", is_flag=True)
def explain_eval_cmd(model, scheme, groups, buffers, kinds, seed, json_path, quiet) -> None:
    """Judge the explainers of a scheme by what a split needs on MODEL (zoo name or ONNX
    file): how often the top-ranked edge spans a cut after which every part fits, and the
    cheapest such cut, against the cost-model ranker (tree), the edge spanning the middle cut
    and a random edge. Groups no single cut fixes are counted apart. Uses the shipped weights
    or $FUSIONPLAN_WEIGHTS_DIR."""
    sizes = whole_kb_sizes(buffers)
    explainers = [k.strip().lower() for k in kinds.split(",") if k.strip()]
    unknown = [k for k in explainers if k not in EXPLAINERS.names()]
    if unknown or len(set(explainers)) != len(explainers):
        raise click.BadParameter(
            f"distinct names among {', '.join(EXPLAINERS.names())}, got {kinds!r}",
            param_hint="--explainers",
        )
    # torch and torch_geometric (seconds to import) load once the options are good
    from explainers.eval_cuts import explain_eval

    with progress_bar(f"judging {model} ({scheme})", enabled=not quiet) as progress:
        report = explain_eval(
            model, scheme, groups=groups, buffers_kb=[s // 1024 for s in sizes],
            explainers=explainers, seed=seed, progress=progress,
        )  # fmt: skip
    print_table(
        ["buffer", "invalid groups", "need 2+ cuts", "mean ops", "fixing positions"],
        [[f"{d.buffer_kb} KB", str(d.groups), str(d.needs_two_cuts), f"{d.mean_ops:.1f}",
          f"{d.fixing_positions:.1%}"] for d in report.draws],
        title=f"{model} ({scheme.upper()}): invalid groups judged",
    )  # fmt: skip
    for name in dict.fromkeys(s.ranker for s in report.scores):
        mine = [s for s in report.scores if s.ranker == name]
        print_table(
            ["buffer", "groups", "top-1 fixing", "top-1 cheapest", "s / group", "GIN says valid"],
            [["all" if s.buffer_kb is None else f"{s.buffer_kb} KB", str(s.groups),
              f"{s.fixing:.1%}", f"{s.cheapest:.1%}", f"{s.seconds:.4f}",
              "-" if s.gin_valid is None else str(s.gin_valid)] for s in mine],
            title=f"{name} on {model} ({scheme.upper()})",
        )  # fmt: skip
    if json_path:
        data = {"model": model, "scheme": scheme, "groups": groups, "seed": seed,
                **report.to_json()}  # fmt: skip
        write_text_atomic(Path(json_path), json.dumps(data, indent=2) + "\n")


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
    """Train a registered explainer with a progress bar and report the checkpoint written."""
    train = EXPLAINERS.get(kind).train
    if train is None:
        raise ConfigError(f"explainer '{kind}' has nothing to train")
    with progress_bar(f"{kind.upper()} {scheme} epochs", enabled=not quiet) as progress:
        result = train(scheme, dataset, progress=progress, directory=Path(out), **options)
    click.echo(f"wrote {result.path} ({result.meta.get('train_seconds', 0):.0f} s)")
