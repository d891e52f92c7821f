"""Atomic file output: a crash or a bad input never leaves a half-written file behind.

Outputs are checked before any work (:func:`check_output_path`), so a long search is not
thrown away for a path it could never write; a failure while writing is a
:class:`WriteError` naming the destination, and leaves neither the temporary file nor
the parent directories the write created.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from fusionplan.ir.errors import ConfigError


class WriteError(OSError):
    """Writing an output failed (disk full, permissions, ...). Names the destination, not
    the temporary file the OS complained about, so the CLI can print it on one line."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def check_output_path(path: str | os.PathLike, *, directory: bool = False) -> Path:
    """Fail with a one-line ``ConfigError`` unless ``path`` can be written: a file (or, with
    ``directory``, a directory) that is not there yet or can be replaced, whose parent
    exists or can be created and is writable. Creates nothing."""
    text = os.fspath(path)
    if not text:
        raise ConfigError("cannot write to an empty path")
    target = Path(text)

    def fail(reason: str) -> ConfigError:
        return ConfigError(f"cannot write {text}: {reason}")

    if target.is_dir():
        if not directory:
            raise fail("it is a directory")
        if not os.access(target, os.W_OK | os.X_OK):
            raise fail("the directory is not writable")
        return target
    if os.path.lexists(target):
        if directory:
            raise fail("it is a file, not a directory")
        if not target.is_file():
            raise fail("it is not a regular file")
    elif not directory and text.endswith(("/", os.sep)):
        raise fail("a file name cannot end with a path separator")
    ancestor = next(d for d in target.parents if os.path.lexists(d) or d == d.parent)
    if not ancestor.is_dir():
        raise fail(f"{ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise fail(f"directory {ancestor} is not writable")
    return target


def write_atomic(path: str | os.PathLike, writer: Callable[[Path], None]) -> Path:
    """Call ``writer(tmp_path)`` then rename the temporary file onto ``path``.

    The temporary file sits in ``path``'s directory (so the rename is atomic); missing
    parents are created here, and removed again if the write fails. An ``OSError`` becomes
    a :class:`WriteError` for ``path``.
    """
    path = Path(path)
    missing = list(itertools.takewhile(lambda d: not os.path.lexists(d), path.parents))
    tmp_path: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        tmp_path = Path(tmp)
        os.close(fd)
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get normal modes
        writer(tmp_path)
        os.replace(tmp_path, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            if tmp_path is not None:
                tmp_path.unlink(missing_ok=True)
            for created in missing:  # deepest first; one still in use is not empty
                created.rmdir()
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomic(path, lambda p: p.write_bytes(data))
