"""The graph-substitution bench: every search on CNNs, a BERT-like encoder and OCGGS's
ResNet-block stacks (docs/design.md, "Graph substitution").

Each (model, search, K) cell runs ``fusionplan substitute`` in a child process, so its peak
resident memory is its own (``VmHWM``); the parent then times the original and the
rewritten model in onnxruntime on this CPU (median of ``repeats`` runs, one thread and all
threads). Cells are appended to ``runs.jsonl`` in the output directory as they finish, so a
rerun resumes; the markdown table is rebuilt from that file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx

from fusionplan.data.synthetic import SYNTHETIC
from fusionplan.data.zoo import model_source
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import write_atomic, write_text_atomic
from fusionplan.passes.substitution.measure import ort_latencies
from fusionplan.passes.substitution.pipeline import DEPTH_SEARCHES

MODELS = (
    "squeezenet",
    "resnet50",
    "googlenet",
    "resnext50_32x4d",
    "bert_encoder",
    "resnet_stack2",
    "resnet_stack4",
    "resnet_stack6",
    "resnet_stack8",
)
BENCH_SEARCHES = ("metaflow", "taso", "ocggs-prune", "ocggs-dpp", "ocggs-sample", "autograph")


@dataclass(frozen=True)
class Cell:
    model: str
    search: str
    depth: int | None  # K, for the exact searches
    ops_before: int
    ops_after: int
    sum_before_ms: float
    sum_after_ms: float  # the search's graph (the cost it reached)
    sum_chosen_ms: float  # the graph written after the measured guard
    mixed_before_ms: float
    mixed_after_ms: float
    search_s: float
    generated: int
    budget_hit: bool
    peak_mb: float
    max_rel_error: float
    cpu1_before_ms: float
    cpu1_after_ms: float
    cpun_before_ms: float
    cpun_after_ms: float
    cpu1_searched_ms: float  # the search's own graph, before the measured guard
    dropped: list[str]  # rule families the guard removed
    rules: dict[str, int]

    @property
    def key(self) -> tuple[str, str, int | None]:
        return self.model, self.search, self.depth


_CHILD = (
    "import sys\n"
    "from fusionplan.app.cli import main\n"
    "try:\n"
    "    main(sys.argv[2:])\n"
    "finally:\n"
    "    status = open('/proc/self/status').read().splitlines()\n"
    "    hwm = next(line for line in status if line.startswith('VmHWM'))\n"
    "    open(sys.argv[1], 'w').write(hwm)\n"
)
"""Runs the CLI in the child, then records its peak resident memory (VmHWM: the process's
own high-water mark; ``getrusage`` would report the parent's size at fork)."""


def model_file(name: str, directory: Path) -> Path:
    """An ONNX file for a zoo name or a synthetic model (written once into ``directory``)."""
    if name in SYNTHETIC:
        path = directory / f"{name}.onnx"
        if not path.exists():
            model = SYNTHETIC[name]()
            write_atomic(path, lambda tmp: onnx.save(model, os.fspath(tmp)))
        return path
    return model_source(name)


def run_bench(
    models: Sequence[str],
    searches: Sequence[str],
    out: Path,
    *,
    depths: Sequence[int] = (5,),
    budget: int = 5000,
    repeats: int = 20,
    progress: Callable[[str], None] | None = None,
) -> list[Cell]:
    """Run every missing cell into ``out/runs.jsonl``; all cells, in file order."""
    for name in models:
        if name not in SYNTHETIC:
            model_source(name)  # an unknown model fails before any work
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs.jsonl"
    done = {c.key for c in read_cells(runs)}
    for name in models:
        path = model_file(name, out)
        original = onnx.load(os.fspath(path))
        for search in searches:
            for depth in _depths(name, search, depths):
                if (name, search, depth) in done:
                    continue
                cell = _run_cell(name, path, original, search, depth, budget, repeats)
                with runs.open("a") as f:
                    f.write(json.dumps(asdict(cell)) + "\n")
                if progress is not None:
                    progress(f"{name} {search}{'' if depth is None else f' K={depth}'}")
    return read_cells(runs)


def _depths(model: str, search: str, depths: Sequence[int]) -> Sequence[int | None]:
    """K values for a cell: none for heuristic searches; every K on OCGGS's block stacks,
    the first elsewhere (the exact searches spend their budget long before K = 10 there)."""
    if search not in DEPTH_SEARCHES:
        return (None,)
    return depths if model.startswith("resnet_stack") else depths[:1]


def _run_cell(
    name: str,
    path: Path,
    original: onnx.ModelProto,
    search: str,
    depth: int | None,
    budget: int,
    repeats: int,
) -> Cell:
    with tempfile.TemporaryDirectory() as tmp:
        rewritten = Path(tmp) / "out.onnx"
        peak_file = Path(tmp) / "peak"
        command = [
            sys.executable, "-c", _CHILD, os.fspath(peak_file),
            "substitute", os.fspath(path), "--search", search, "--budget", str(budget),
            "--json", "-q", "--guard", "-o", os.fspath(rewritten),
        ]  # fmt: skip
        if depth is not None:
            command += ["--depth", str(depth)]
        log = Path(tmp) / "report.json"
        with log.open("w") as stdout, (Path(tmp) / "stderr").open("w") as stderr:
            child = subprocess.Popen(command, stdout=stdout, stderr=stderr)
            status = child.wait()
        if status:
            error = (Path(tmp) / "stderr").read_text().strip()
            raise ConfigError(f"substitute {name} --search {search} failed: {error}")
        stdout = log.read_text()
        report = json.loads(stdout)
        searched = report["guard"]["searched_cost"]
        before, after = _cpu_ms(original, onnx.load(os.fspath(rewritten)), repeats)
        peak = int(peak_file.read_text().split()[1]) / 1024  # "VmHWM: N kB"
    rules: dict[str, int] = {}
    for step in report["steps"]:
        rules[step["rule"]] = rules.get(step["rule"], 0) + 1
    return Cell(
        model=name,
        search=search,
        depth=depth,
        ops_before=sum(report["ops_before"].values()),
        ops_after=sum(report["ops_after"].values()),
        sum_before_ms=report["before"]["sum"] * 1e3,
        sum_after_ms=searched["sum"] * 1e3,
        sum_chosen_ms=report["after"]["sum"] * 1e3,
        mixed_before_ms=report["before"]["mixed"] * 1e3,
        mixed_after_ms=searched["mixed"] * 1e3,
        search_s=report["seconds"],
        generated=report["generated"],
        budget_hit=report["budget_hit"],
        peak_mb=peak,
        max_rel_error=report["max_rel_error"],
        cpu1_before_ms=before[0],
        cpu1_after_ms=after[0],
        cpun_before_ms=before[1],
        cpun_after_ms=after[1],
        cpu1_searched_ms=report["guard"]["searched_ms"],
        dropped=report["guard"]["dropped"],
        rules=rules,
    )


def _cpu_ms(
    original: onnx.ModelProto, rewritten: onnx.ModelProto, repeats: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """Median onnxruntime ms of both models, timed interleaved, on one thread and on every
    core: ((original 1t, original all), (rewritten 1t, rewritten all))."""
    every = os.cpu_count() or 1
    one = ort_latencies([original, rewritten], threads=1, repeats=repeats)
    many = ort_latencies([original, rewritten], threads=every, repeats=repeats)
    return (one[0] * 1e3, many[0] * 1e3), (one[1] * 1e3, many[1] * 1e3)


def read_cells(path: Path) -> list[Cell]:
    if not path.exists():
        return []
    return [Cell(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def markdown(cells: Sequence[Cell]) -> str:
    """The results table: analytic H100 costs, search effort, measured CPU latency."""
    head = (
        "| model | search | K | ops | sum ms (H100) | speedup | mixed ms | search s | graphs "
        "| peak MB | CPU 1t ms (search's graph) | CPU all ms | guard dropped | rel. err |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for c in cells:
        rows.append(
            f"| {c.model} | {c.search} | {c.depth or ''} | {c.ops_before}->{c.ops_after} "
            f"| {c.sum_before_ms:.3f}->{c.sum_after_ms:.3f} "
            f"| {c.sum_before_ms / c.sum_after_ms:.2f}x "
            f"| {c.mixed_before_ms:.3f}->{c.mixed_after_ms:.3f} | {c.search_s:.2f} "
            f"| {c.generated}{'*' if c.budget_hit else ''} | {c.peak_mb:.0f} "
            f"| {c.cpu1_before_ms:.2f}->{c.cpu1_after_ms:.2f} ({c.cpu1_searched_ms:.2f}) "
            f"| {c.cpun_before_ms:.2f}->{c.cpun_after_ms:.2f} | {_dropped(c)} "
            f"| {c.max_rel_error:.0e} |"
        )
    return head + "\n".join(rows) + "\n"


def _dropped(c: Cell) -> str:
    """What the guard removed, and the estimated speedup of what it kept."""
    if not c.dropped:
        return "-"
    return f"{', '.join(c.dropped)} ({c.sum_before_ms / c.sum_chosen_ms:.2f}x kept)"


def write_markdown(cells: Sequence[Cell], path: Path) -> None:
    write_text_atomic(path, markdown(cells))
