"""Output paths are checked before any work, and a failed write is one line (docs/design.md,
"Conventions"): a plan that cannot be saved must not cost a whole search first.

Commands run in process through the console entry point (``fusionplan.app.cli:main``), so
exit codes and stderr are what a user sees and the work functions can be replaced by ones
that fail loudly: an output-path error that is reported proves that nothing was loaded or
started. ``test_issue_example_through_the_console_script`` runs the installed script once.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from fusionplan.app.cli import main
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.io import WriteError, check_output_path, write_text_atomic
from tests.onnx_builders import residual_block, save
from tests.test_cli import FAST, run_bin

AS_ROOT = os.geteuid() == 0  # root ignores permissions: a read-only directory is writable


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding a file, a directory and a read-only directory."""
    (tmp_path / "file").write_text("not a directory\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "ro").mkdir(mode=0o555)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fusionplan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """Run the CLI in process; (exit code, stderr lines)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.strip().splitlines()


# Each command with the function that starts its work, replaced by one that fails loudly;
# plan and sweep also name a model that does not exist (loading it would be the error).
FILE_OPTIONS = {
    "plan -o": (["plan", "missing.onnx", *FAST, "-o"], "fusionplan.app.cli.common.load"),
    "plan --onnx-out": (
        ["plan", "missing.onnx", *FAST, "--onnx-out"],
        "fusionplan.app.cli.common.load",
    ),
    "sweep -o": (["sweep", "missing.onnx", *FAST, "-o"], "fusionplan.app.cli.common.load"),
    "sweep --plot": (["sweep", "missing.onnx", *FAST, "--plot"], "fusionplan.app.cli.common.load"),
    "bench --report": (
        ["bench", "--quick", "-q", "--report"],
        "fusionplan.app.cli.bench.run_bench",
    ),
    "zoo export -o": (["zoo", "export", "resnet18", "-o"], "fusionplan.app.cli.zoo.export_model"),
    "train explain-eval --json": (
        ["train", "explain-eval", "missing.onnx", "--scheme", "lbdf", "-q", "--json"],
        "explainers.eval_cuts.explain_eval",
    ),
}
DIR_OPTIONS = {
    "dataset generate -o": (
        ["dataset", "generate", "-q", "-o"],
        "fusionplan.app.cli.dataset.generate_dataset",
    ),
    "train gin --out": (
        ["train", "gin", "--scheme", "lbdf", "-q", "--out"],
        "explainers.train_gin.train_gin",
    ),
    "bench --out": (["bench", "--quick", "-q", "--out"], "fusionplan.app.cli.bench.run_bench"),
}
FILE_CASES = {
    "under a file": ("file/x.out", "cannot write file/x.out: file is not a directory"),
    "deep under a file": ("file/a/x.out", "cannot write file/a/x.out: file is not a directory"),
    "empty": ("", "cannot write to an empty path"),
    "a directory": ("dir", "cannot write dir: it is a directory"),
    "read-only": ("ro/x.out", "cannot write ro/x.out: directory ro is not writable"),
}
DIR_CASES = {
    "under a file": ("file/out", "cannot write file/out: file is not a directory"),
    "empty": ("", "cannot write to an empty path"),
    "a file": ("file", "cannot write file: it is a file, not a directory"),
    "read-only": ("ro/out", "cannot write ro/out: directory ro is not writable"),
    "read-only itself": ("ro", "cannot write ro: the directory is not writable"),
}
READ_ONLY = pytest.mark.skipif(AS_ROOT, reason="root writes into read-only directories")


def _cases(options: dict[str, tuple[list[str], str]], cases: dict[str, tuple[str, str]]):
    return [
        pytest.param(
            args,
            work,
            path,
            message,
            marks=READ_ONLY if problem.startswith("read-only") else (),
            id=f"{command}: {problem}",
        )
        for command, (args, work) in options.items()
        for problem, (path, message) in cases.items()
    ]


@pytest.mark.parametrize(
    ("args", "work", "path", "message"),
    _cases(FILE_OPTIONS, FILE_CASES) + _cases(DIR_OPTIONS, DIR_CASES),
)
def test_bad_output_fails_before_any_work(
    args, work, path, message, cwd: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    def started(*args, **kwargs):
        raise AssertionError(f"{work} ran before the outputs were checked")

    monkeypatch.setattr(work, started)
    before = sorted(cwd.rglob("*"))
    code, err = fusionplan(capsys, *args, path)
    assert code == 2
    assert err == [f"fusionplan: error: {message}"]
    assert sorted(cwd.rglob("*")) == before  # nothing written, no directory made


def test_issue_example_through_the_console_script(tmp_path: Path):
    """The filed issue: `plan MODEL -o some_file/x.json` crashed after the whole search."""
    save(residual_block(), tmp_path, "res")
    (tmp_path / "some_file").write_text("")
    proc = run_bin("plan", "res.onnx", *FAST, "-o", "some_file/x.json", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "fusionplan: error: cannot write some_file/x.json: some_file is not a directory"
    ]
    assert proc.stdout == ""


def test_nested_outputs_are_created(cwd: Path, capsys):
    save(residual_block(), cwd, "res")
    plan = ["plan", "res.onnx", "--buffer", "500B", *FAST]
    code, err = fusionplan(capsys, *plan, "-o", "out/sub/plan.json", "--onnx-out", "out/m.onnx")
    assert (code, err) == (0, [])
    assert (cwd / "out/sub/plan.json").read_text().startswith("{")
    assert (cwd / "out/m.onnx").stat().st_size > 0
    code, err = fusionplan(capsys, "sweep", "res.onnx", "--buffers", "1KB", *FAST, "-o", "a/b.csv")
    assert (code, err) == (0, [])
    assert (cwd / "a/b.csv").read_text().startswith("model,scheme,buffer,")
    assert not list(cwd.rglob(".*.tmp"))


def test_checks_create_no_directory(cwd: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    """A directory that is not there yet passes the check, and the check does not make it:
    the command (here a stand-in for dataset generation) does, when it writes."""
    from fusionplan.app.cli import dataset

    seen = []

    def generate(out: Path, **options) -> dict:
        seen.append(out)
        assert not (cwd / "new").exists()
        group_counts = {"groups": 1, "samples_per_scheme": 5}
        counts = {"counts": {"train": group_counts, "unseen": group_counts}}
        return {**counts, "generation_seconds": 0, "engine": "local", "tasks_per_node": ""}

    monkeypatch.setattr(dataset, "generate_dataset", generate)
    code, err = fusionplan(capsys, "dataset", "generate", "-q", "-o", "new/sub/ds")
    assert (code, err) == (0, [])
    assert seen == [Path("new/sub/ds")]


WRITES = {
    "plan JSON": (["plan", "res.onnx", *FAST, "-o"], "out/sub/plan.json"),
    "annotated ONNX": (["plan", "res.onnx", *FAST, "--onnx-out"], "out/m.onnx"),
    "sweep CSV": (["sweep", "res.onnx", "--buffers", "1KB", *FAST, "-o"], "out/s.csv"),
    "sweep PNG": (["sweep", "res.onnx", "--buffers", "1KB", *FAST, "--plot"], "s.png"),
}


@pytest.mark.parametrize(("args", "path"), list(WRITES.values()), ids=list(WRITES))
def test_failed_write_is_one_line_and_leaves_nothing(
    args, path, cwd: Path, capsys, monkeypatch: pytest.MonkeyPatch
):
    save(residual_block(), cwd, "res")
    before = sorted(cwd.rglob("*"))

    replace = os.replace

    def disk_full(src, dst):
        if Path(dst).name != Path(path).name:  # e.g. a cache matplotlib writes
            return replace(src, dst)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src))

    monkeypatch.setattr(os, "replace", disk_full)
    code, err = fusionplan(capsys, *args, path)
    assert code == 2
    assert err == [f"fusionplan: error: cannot write {path}: No space left on device"]
    assert sorted(cwd.rglob("*")) == before  # no temporary, no output, no new directory


def test_check_output_path_reports_a_read_only_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The permission check itself, also where the tests run as root (os.access stubbed)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != ro)
    message = f"cannot write {ro}/a/b.json: directory {ro} is not writable"
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        check_output_path(ro / "a" / "b.json")
    with pytest.raises(ConfigError, match="the directory is not writable"):
        check_output_path(ro, directory=True)
    assert check_output_path(tmp_path / "x" / "y.json") == tmp_path / "x" / "y.json"


def test_write_atomic_keeps_directories_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (tmp_path / "kept").mkdir()

    def io_error(src, dst):
        raise OSError(errno.EIO, os.strerror(errno.EIO), str(src))

    monkeypatch.setattr(os, "replace", io_error)
    path = tmp_path / "kept" / "new" / "x.json"
    with pytest.raises(WriteError) as failed:
        write_text_atomic(path, "{}")
    assert str(failed.value) == f"cannot write {path}: Input/output error"
    assert failed.value.errno == errno.EIO
    assert [p.name for p in tmp_path.rglob("*")] == ["kept"]
