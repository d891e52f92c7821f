"""The README's quick start is a promise: CI must run exactly its test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


# lines of .ci/run that are not the README's command: comments, shell options, the working
# directory and the environment (a fresh cache: nothing may come from a developer's machine)
CI_SETUP = ("#", "set ", "cd ", "export ", "unset ", "trap ")


def _ci_lines() -> list[str]:
    text = (ROOT / ".ci" / "run").read_text()
    return [ln for ln in text.splitlines() if ln and not ln.startswith(CI_SETUP)]


def test_ci_runs_the_readme_test_command():
    setup_and_plan, setup_and_test = _readme_commands()
    assert " && ".join(_ci_lines()) == setup_and_test
    assert "fusionplan plan" in setup_and_plan and "pytest" in setup_and_test


def test_ci_uses_a_fresh_cache():
    text = (ROOT / ".ci" / "run").read_text().splitlines()
    first_command = next(i for i, ln in enumerate(text) if ln in _ci_lines())
    setup = text[:first_command]
    assert any(ln.startswith('export FUSIONPLAN_CACHE_DIR="$(mktemp -d)"') for ln in setup)
    for var in ("FUSIONPLAN_WEIGHTS_DIR", "FUSIONPLAN_DATASET_DIR"):
        assert any(ln.startswith("unset ") and var in ln.split() for ln in setup), var
