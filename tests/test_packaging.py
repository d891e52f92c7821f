"""pyproject.toml installs every package folder, search/ and data/ under the fusionplan name.

The package list is explicit (setuptools cannot discover a folder that installs under another
name), so a new subpackage missing from it would be absent from a wheel while an editable
install still finds it: this test is what catches that.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = ("fusionplan", "accel_model", "explainers", "search", "data")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]


def _installed_name(folder: Path, package_dir: dict[str, str]) -> str:
    rel = folder.relative_to(ROOT).parts
    renamed = {v: k for k, v in package_dir.items()}
    head = renamed.get(rel[0], rel[0])
    return ".".join([head, *rel[1:]])


def test_every_package_folder_is_installed_under_its_name():
    config = _setuptools()
    package_dir = config["package-dir"]
    folders = {
        _installed_name(init.parent, package_dir)
        for top in SOURCE_FOLDERS
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert set(config["packages"]) == folders


def test_search_and_data_install_only_under_the_fusionplan_namespace(tmp_path):
    """Outside the checkout (no folder on the path), as a user's program sees the install."""
    assert _setuptools()["package-dir"] == {
        "fusionplan.search": "search",
        "fusionplan.data": "data",
    }
    probe = (
        "import importlib.util as u, fusionplan.search.exact, fusionplan.data.zoo; "
        "print(u.find_spec('search'), u.find_spec('data'), fusionplan.search.exact.__file__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    search_spec, data_spec, exact_file = out.stdout.split()
    assert (search_spec, data_spec) == ("None", "None")
    assert Path(exact_file) == ROOT / "search" / "exact.py"
