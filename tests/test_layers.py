"""The layering contract of docs/design.md ("Layers"), checked over the AST of every module.

Every import counts: module level, inside functions, under ``TYPE_CHECKING``, and the
``"module:attr"`` targets given to ``register_lazy`` and its wrappers (imported when the
entry is first used).
A module may import its own package, anything in a lower layer, and third-party libraries;
never a higher layer or a sibling package of its own layer. Each pass package under
``fusionplan.passes`` is a package of its own, so two passes cannot import each other; the
``fusionplan.passes`` module above them composes them. Imports inside functions are allowed
only for the heavy libraries, and in CLI commands for the modules that load them, each with
a one-line reason in a comment.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# bottom to top; packages in one layer are independent of each other
LAYERS: tuple[tuple[str, ...], ...] = (
    ("fusionplan.ir",),
    ("fusionplan.engines",),
    ("accel_model",),
    ("fusionplan.planning",),
    ("fusionplan.data",),
    ("fusionplan.passes.manager",),
    (
        "fusionplan.search",
        "explainers",
        "fusionplan.passes.substitution",
        "fusionplan.passes.streams",
        "fusionplan.batching",
    ),
    ("fusionplan.passes",),
    ("fusionplan.app",),
)
FACADE = ("fusionplan", "fusionplan.__main__")  # the package front: reaches the app by name
OURS = ("fusionplan", "accel_model", "explainers")  # top-level import names
FOLDERS = {
    "fusionplan": "fusionplan",
    "accel_model": "accel_model",
    "explainers": "explainers",
    "search": "fusionplan.search",
    "data": "fusionplan.data",
}
"""Source folder -> the package it installs as (pyproject.toml's package-dir)."""
HEAVY = frozenset(
    {
        "torch",
        "torchvision",
        "torch_geometric",
        "pymoo",
        "openbox",
        "ConfigSpace",
        "onnxruntime",
        "ray",
        "matplotlib",
        "zigzag",
    }
)
"""Libraries that may be imported inside a function: each costs 0.5-7 s to import or is an
optional extra, and most commands never need it (matplotlib: 1.1 s, only for plots; zigzag:
the optional ``zigzag`` extra, only for ``bench zigzag``)."""
CLI = "fusionplan.app.cli"
"""A CLI command may import the module of its body inside the command (with a reason), so
that ``fusionplan GROUP --help`` or a bad option answers without loading torch; the import
still has to go downward."""


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the imported module, dotted (relative imports resolved)
    line: int
    in_function: bool


def module_name(path: Path) -> str:
    folder, *parts = path.relative_to(ROOT).with_suffix("").parts
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS[folder], *parts])


def source_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def imports_of(path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend(Import(name, a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.append(Import(name, base, child.lineno, in_function))
            elif (lazy := _lazy_target(child)) is not None:
                found.append(Import(name, lazy, child.lineno, False))
            visit(child, inner)

    visit(tree, False)
    return found


def _lazy_target(node: ast.AST) -> str | None:
    """The module of a ``"module:attr"`` string passed to a call (``register_lazy`` and the
    helpers that wrap it), if the module is one of ours; else None."""
    if not isinstance(node, ast.Call):
        return None
    for arg in node.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            module, sep, attr = arg.value.partition(":")
            if sep and attr.isidentifier() and module.split(".")[0] in OURS:
                return module
    return None


def layer_of(module: str) -> tuple[int, str] | None:
    """(layer index, package) of one of our modules; None for the facade or third party."""
    best: tuple[int, str] | None = None
    for i, packages in enumerate(LAYERS):
        for pkg in packages:
            if (module == pkg or module.startswith(pkg + ".")) and (
                best is None or len(pkg) > len(best[1])
            ):
                best = (i, pkg)
    return best


def violations() -> list[str]:
    bad = []
    for path in source_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for imp in imports_of(path):
            top = imp.target.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{imp.line}"
            if imp.in_function and top not in ("__future__",):
                if top not in HEAVY and not imp.module.startswith(CLI):
                    bad.append(f"{where}: import of {imp.target} inside a function")
                elif not _has_reason(lines, imp.line):
                    bad.append(f"{where}: function-level import of {imp.target} has no reason")
            if top not in OURS or imp.module in FACADE:
                continue
            src, dst = layer_of(imp.module), layer_of(imp.target)
            if src is None:
                bad.append(f"{where}: module {imp.module} is in no layer")
                continue
            if dst is None:
                bad.append(f"{where}: {imp.module} imports the package facade ({imp.target})")
            elif dst[0] > src[0]:
                bad.append(f"{where}: {imp.module} imports {imp.target}, a higher layer")
            elif dst[0] == src[0] and dst[1] != src[1]:
                bad.append(f"{where}: {imp.module} imports {imp.target}, a sibling package")
    return bad


def _has_reason(lines: list[str], line: int) -> bool:
    """A comment on the import line, on the line above, or above the block of imports."""
    i = line - 1
    while i > 0 and lines[i - 1].lstrip().startswith(("import ", "from ")):
        i -= 1
    return any("#" in lines[j] for j in range(max(i - 1, 0), line))


def test_every_module_is_in_a_layer_and_imports_only_downward():
    assert violations() == []


def test_checker_catches_an_upward_sideways_and_lazy_import(tmp_path, monkeypatch):
    """The check itself can fail: plant bad imports in a copy of two modules."""
    fake = tmp_path / "fusionplan" / "ir"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "bad.py").write_text(
        "from fusionplan.search.problem import FusionProblem\n"
        "def f():\n    import numpy\n    import torch\n"
    )
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "bad.py").write_text("import explainers.gin  # sideways\n")
    passes = tmp_path / "fusionplan" / "passes"
    (passes / "streams").mkdir(parents=True)
    (passes / "streams" / "bad.py").write_text(
        "from fusionplan.passes.substitution.cost import GraphCost\n"
        "REG.register_lazy('x', 'fusionplan.batching.cells:Cell', help='')\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = "\n".join(violations())
    assert (
        "fusionplan/ir/bad.py:1: fusionplan.ir.bad imports fusionplan.search.problem, "
        "a higher layer" in found
    )
    assert "fusionplan/ir/bad.py:3: import of numpy inside a function" in found
    assert "fusionplan/ir/bad.py:4: function-level import of torch has no reason" in found
    assert "search/bad.py:1: fusionplan.search.bad imports explainers.gin, a sibling package" in (
        found
    )
    streams = "fusionplan/passes/streams/bad.py"
    assert (
        f"{streams}:1: fusionplan.passes.streams.bad imports "
        "fusionplan.passes.substitution.cost, a sibling package"
    ) in found
    assert (
        f"{streams}:2: fusionplan.passes.streams.bad imports fusionplan.batching.cells, "
        "a sibling package"
    ) in found


@pytest.mark.parametrize(
    ("module", "layer"),
    [("fusionplan.ir.graph", 0), ("fusionplan.engines.local", 1), ("accel_model.brr", 2),
     ("fusionplan.passes.manager", 5), ("fusionplan.search.exact", 6),
     ("fusionplan.passes.streams.measure", 6), ("fusionplan.passes.substitution", 6),
     ("fusionplan.batching.graph", 6), ("fusionplan.passes", 7),
     ("fusionplan.app.cli", 8), ("fusionplan", None)],
)  # fmt: skip
def test_layer_of(module, layer):
    found = layer_of(module)
    assert (found[0] if found else None) == layer
