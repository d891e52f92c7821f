"""``fusionplan train eval``: the GIN scored on a given model against the cost model's labels,
per buffer, with the false-valid rate (overflowing groups called valid)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fusionplan.app.cli import cli
from tests.onnx_builders import residual_block, save

pytest.importorskip("torch_geometric")

from explainers.eval_gin import BufferScore


def test_a_score_is_the_hand_counted_one() -> None:
    # two invalid samples (one called valid), two valid ones (one called invalid)
    s = BufferScore.of(128, np.array([0, 0, 1, 1]), np.array([1, 0, 1, 0]))
    assert (s.samples, s.valid_share, s.accuracy) == (4, 0.5, 0.5)
    assert s.f1 == pytest.approx(2 * 1 / (2 * 1 + 1 + 1))
    assert s.false_valid == 0.5  # 1 of the 2 invalid samples predicted valid
    assert BufferScore.of(None, np.array([1, 1]), np.array([1, 0])).false_valid == 0.0


def test_eval_command_scores_every_buffer_and_is_deterministic(tmp_path: Path) -> None:
    model = save(residual_block(16), tmp_path, "res")
    outs = []
    for name in ("a.json", "b.json"):
        out = tmp_path / name
        result = CliRunner().invoke(
            cli,
            ["train", "eval", str(model), "--scheme", "lbdf", "--groups", "12",
             "--buffers", "1KB,4KB,64KB", "--json", str(out), "-q"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "false-valid" in result.output
        outs.append(out.read_text())
    assert outs[0] == outs[1]  # same seed, same groups, same scores
    scores = json.loads(outs[0])["scores"]
    assert [s["buffer_kb"] for s in scores] == [1, 4, 64, None]
    per_buffer, overall = scores[:-1], scores[-1]
    assert overall["samples"] == sum(s["samples"] for s in per_buffer) > 0
    assert overall["valid_share"] == pytest.approx(
        sum(s["valid_share"] * s["samples"] for s in per_buffer) / overall["samples"]
    )
    for s in scores:
        assert 0 <= s["false_valid"] <= 1 and 0 <= s["accuracy"] <= 1


def test_eval_adapt_prints_how_the_scores_grow_with_answers(tmp_path: Path) -> None:
    model = save(residual_block(16), tmp_path, "res")
    out = tmp_path / "adapt.json"
    result = CliRunner().invoke(
        cli,
        ["train", "eval", str(model), "--scheme", "lbdf", "--groups", "12",
         "--buffers", "1KB,4KB,64KB", "--adapt", "80", "--json", str(out), "-q"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "learning" in result.output and "answers" in result.output
    data = json.loads(out.read_text())
    curve = data["adapt"]["curve"]
    assert curve[0]["queries"] == 0 and curve[0]["scores"] == data["scores"]
    steps = [p["queries"] for p in curve]
    assert steps == sorted(steps) and steps[-1] <= 80
    assert all(0 < b - a <= 64 for a, b in itertools.pairwise(steps))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--buffers", "1500B"], "Invalid value for --buffers: whole KB sizes"),
        (["--groups", "0"], "Invalid value for '--groups'"),
        (["--pick", "random"], "--pick chooses what --adapt N asks about; give --adapt too"),
    ],
)
def test_bad_options_fail_in_one_line_before_any_work(tmp_path, args, message) -> None:
    model = save(residual_block(), tmp_path, "res")
    result = CliRunner().invoke(cli, ["train", "eval", str(model), "--scheme", "brr", *args])
    assert result.exit_code != 0
    assert message in result.output
