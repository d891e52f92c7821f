"""The ``fusionplan`` command line. Thin: parse, call the API, print; nothing imports it.

One module per command group (``plan`` and ``sweep``, ``zoo``, ``dataset``, ``train``,
``bench``, ``report``, ...), each imported only when its command runs, so ``fusionplan
--help`` lists them without loading numpy, onnx or the cost models. Every error caused by
bad input is a :class:`FusionPlanError`, printed on one line with exit code 2; output paths
are checked before any work, and outputs are written atomically, so a failure leaves no
partial file. An ``OSError`` (a write that fails anyway: disk full, a race) is one line and
exit code 2 too.
"""

from __future__ import annotations

import importlib
import signal
import sys
import warnings
from typing import TextIO

import click

from fusionplan.ir.errors import FusionPlanError, FusionPlanWarning
from fusionplan.ir.version import VERSION

EXIT_BAD_INPUT = 2

COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("fusionplan.app.cli.plan:plan_cmd", "Plan fusion for MODEL (ONNX file or zoo name)."),
    "sweep": ("fusionplan.app.cli.plan:sweep_cmd", "DRAM traffic of MODEL across buffer sizes."),
    "zoo": (
        "fusionplan.app.cli.zoo:zoo_group",
        "The built-in model zoo (torchvision, no weights).",
    ),
    "dataset": ("fusionplan.app.cli.dataset:dataset_group", "Fusion-group datasets for GNNs."),
    "train": ("fusionplan.app.cli.train:train_group", "Train the GIN and the explainers."),
    "bench": ("fusionplan.app.cli.bench:bench_group", "Reproduce the paper; measure speed."),
    "substitute": (
        "fusionplan.app.cli.substitute:substitute_cmd",
        "Rewrite MODEL's graph by cost-based substitution search.",
    ),
    "streams": (
        "fusionplan.app.cli.streams:streams_cmd",
        "Schedule MODEL's ops onto parallel GPU streams (Nimble).",
    ),
    "batch": (
        "fusionplan.app.cli.batch:batch_cmd",
        "Batch a dynamic network's ops (ED-Batch) and run it.",
    ),
    "report": (
        "fusionplan.app.cli.report:report_cmd",
        "An interactive HTML report of plan files and sweep tables.",
    ),
}
"""Command name -> ("module:attribute", the one-line help ``fusionplan --help`` shows)."""


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (help lines come from COMMANDS)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name][0].partition(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short) for name, (_, short) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="fusionplan")
def cli() -> None:
    """Plan layer fusion of a DNN (ONNX file or zoo model) for an accelerator buffer."""


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one-line errors and exit code 2 for bad input and failed writes;
    an interrupt stops the command at once with exit code 130, writing nothing."""
    _interruptible()
    _one_line_warnings()
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
    except (FusionPlanError, OSError) as exc:  # a WriteError reads "cannot write PATH: reason"
        click.echo(f"fusionplan: error: {exc}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        click.echo("fusionplan: interrupted", err=True)
        sys.exit(130)


def _one_line_warnings() -> None:
    """Print fusionplan's own warnings (:class:`FusionPlanWarning`) as one line each, like its
    errors, instead of Python's file:line report; other warnings are left as they are."""
    show = warnings.showwarning

    def show_warning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, FusionPlanWarning):
            click.echo(f"fusionplan: warning: {message}", err=True)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = show_warning


def _interruptible() -> None:
    """Let SIGINT raise KeyboardInterrupt even when the process was started with it ignored.

    A shell runs a script's background jobs (``fusionplan plan ... &``) with SIGINT ignored,
    and Python keeps an inherited SIG_IGN, so ``kill -INT`` (or Ctrl-C reaching such a job)
    used to be swallowed: the search ran to its end and wrote its outputs. Nothing here
    needs SIGINT ignored, and every output is written atomically after the work, so an
    interrupt leaves no file behind.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
