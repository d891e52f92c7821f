"""The README's quick start is a promise: CI must run exactly its test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def test_ci_runs_the_readme_test_command():
    setup_and_plan, setup_and_test = _readme_commands()
    ci_lines = [
        ln
        for ln in (ROOT / ".ci" / "run").read_text().splitlines()
        if ln and not ln.startswith(("#", "set ", "cd "))
    ]
    assert " && ".join(ci_lines) == setup_and_test
    assert "fusionplan plan" in setup_and_plan and "pytest" in setup_and_test
