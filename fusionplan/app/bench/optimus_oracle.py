"""Optimus's own code as the referee of the ``optimus`` profile (docs/cost-model.md, "The
optimus profile").

Optimus (SheaCai/optimus, MIT) is never imported here: an Optimus checkout named by
``FUSIONPLAN_OPTIMUS_DIR`` (or ``--optimus-dir``) is run in a subprocess, in the interpreter
named by ``FUSIONPLAN_OPTIMUS_PYTHON`` (default: this one; Optimus needs numpy and scipy),
through ``optimus_driver.py``, which exchanges JSON on stdin/stdout. This module maps
fusionplan's ops of ``data/optimus_nets.py`` models to Optimus's layer names and back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusionplan.data.optimus_nets import NETWORKS
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import Group, OpGraph, bits

DRIVER = Path(__file__).with_name("optimus_driver.py")
DIR_ENV, PYTHON_ENV = "FUSIONPLAN_OPTIMUS_DIR", "FUSIONPLAN_OPTIMUS_PYTHON"
BUFFER_KB = {"128KB": 128, "256KB": 256, "512KB": 512}


def optimus_checkout(path: str | os.PathLike | None = None) -> Path | None:
    """The Optimus checkout at ``path`` (else ``$FUSIONPLAN_OPTIMUS_DIR``), or None when
    neither is set. A path that is set but holds no Optimus is a ConfigError."""
    raw = path if path is not None else os.environ.get(DIR_ENV)
    if not raw:
        return None
    root = Path(raw).expanduser()
    if not (root / "fusion" / "scheduling" / "interlayer.py").is_file():
        raise ConfigError(f"{root} is not an Optimus checkout (no fusion/scheduling/)")
    return root


@dataclass(frozen=True)
class OptimusRunner:
    """Runs Optimus's code on JSON tasks (see ``optimus_driver.py``)."""

    root: Path
    python: str = ""

    @property
    def interpreter(self) -> str:
        return self.python or os.environ.get(PYTHON_ENV) or sys.executable

    def run(self, tasks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Answer ``tasks`` in one Optimus process (networks are loaded once per buffer)."""
        request = json.dumps({"optimus_dir": str(self.root.resolve()), "tasks": list(tasks)})
        done = subprocess.run(
            [self.interpreter, str(DRIVER)],
            input=request,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no message"]
            raise ConfigError(f"Optimus's code failed ({self.interpreter}): {tail[0]}")
        return json.loads(done.stdout)["answers"]

    def versions(self) -> dict[str, str]:
        """The interpreter, numpy and scipy that run Optimus, and the checkout's commit."""
        probe = "import sys, numpy, scipy; print(sys.version.split()[0], numpy.__version__, "
        probe += "scipy.__version__)"
        out = subprocess.run(
            [self.interpreter, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.split()
        head = self.root / ".git" / "HEAD"
        commit = ""
        if head.is_file():
            commit = subprocess.run(
                ["git", "-C", str(self.root), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        return {"python": out[0], "numpy": out[1], "scipy": out[2], "commit": commit}


def layer_of_ops(graph: OpGraph, network: str) -> list[str]:
    """Optimus's layer name for each op of ``graph`` (``data/optimus_nets.py``'s ``network``):
    an op under ``/ops.<i>/`` belongs to layer i; the bare Add and Concat nodes that the
    export names ``/Add``, ``/Add_1``, ... belong to the add and concat layers in order."""
    layers = NETWORKS[network][0]()
    joins = {
        kind: [i for i, layer in enumerate(layers) if layer.op == kind]
        for kind in ("add", "concat")
    }
    seen = {"add": 0, "concat": 0}
    names = []
    for node in graph.nodes:
        if node.name.startswith("/ops."):
            index = int(node.name.split("/")[1].removeprefix("ops."))
        else:
            kind = {"Add": "add", "Concat": "concat"}.get(node.op_type)
            if kind is None:
                raise ConfigError(f"{network}: op {node.name} belongs to no Optimus layer")
            index = joins[kind][seen[kind]]
            seen[kind] += 1
        names.append(layers[index].name)
    return names


def optimus_group(graph: OpGraph, names: list[str], group: Group) -> list[str]:
    """The Optimus layers of a fusionplan group, in layer order: its ops' layers, less an
    activation whose layer's main op lies outside the group (Optimus's networks have no
    activations: a ReLU belongs to the conv or add before it)."""
    main = {}
    for v, node in enumerate(graph.nodes):
        if node.op_type != "Relu":
            main.setdefault(names[v], v)
    picked = {names[v] for v in bits(group) if group >> main[names[v]] & 1}
    return [n for n in dict.fromkeys(names) if n in picked]
