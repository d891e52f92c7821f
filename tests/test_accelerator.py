"""Accelerator description: buffer sizes (KB = 1024 B), schemes, bytes per element."""

from __future__ import annotations

import pytest

from accel_model import Accelerator, format_size, make_cost_model, parse_size, scheme_names
from accel_model.brr import BRR
from accel_model.lbdf import LBDF
from fusionplan.ir.errors import ConfigError, FusionPlanError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("256KB", 256 * 1024),
        ("0.5MB", 512 * 1024),
        ("131072", 131072),
        (131072, 131072),
        ("128 kb", 128 * 1024),
        ("1MiB", 1024 * 1024),
        ("1GB", 1024**3),
        ("64K", 64 * 1024),
        ("100B", 100),
        (" 2 MB ", 2 * 1024 * 1024),
        (1024.0, 1024),
    ],
)
def test_parse_size_accepts(text, expected) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        ("0", "'0'"),
        (0, "0"),
        ("12XB", "'12XB'"),
        ("-5KB", "'-5KB'"),
        ("abc", "'abc'"),
        ("1.5B", "'1.5B'"),
        ("", "''"),
        (-3, "-3"),
        (True, "True"),
        (float("inf"), "inf"),
        (float("nan"), "nan"),
        ("1e3", "'1e3'"),
    ],
)
def test_parse_size_rejects(bad, shown) -> None:
    with pytest.raises(ConfigError) as info:
        parse_size(bad)
    message = str(info.value)
    assert shown in message
    assert "\n" not in message
    assert isinstance(info.value, FusionPlanError)


def test_unknown_unit_is_named() -> None:
    with pytest.raises(ConfigError, match="unknown unit 'XB'"):
        parse_size("12XB")


def test_format_size_round_trips() -> None:
    for nbytes in (100, 1024, 256 * 1024, 512 * 1024, 3 * 1024**2, 1024**3):
        assert parse_size(format_size(nbytes)) == nbytes
    assert format_size(256 * 1024) == "256KB"
    assert format_size(512 * 1024) == "512KB"
    assert format_size(1536 * 1024) == "1.5MB"


def test_accelerator_of() -> None:
    acc = Accelerator.of("256KB", "BRR", 2)
    assert acc == Accelerator(262144, "brr", 2)
    assert Accelerator.of(1024).scheme == "lbdf"
    assert Accelerator.of(1024).bytes_per_element == 1
    assert "256KB" in acc.describe() and "BRR" in acc.describe()


def test_accelerator_rejects_unknown_scheme() -> None:
    with pytest.raises(ConfigError) as info:
        Accelerator.of("256KB", "magic")
    assert "'magic'" in str(info.value)
    assert "brr" in str(info.value) and "lbdf" in str(info.value)


def test_accelerator_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="bytes per element"):
        Accelerator.of("256KB", "lbdf", 0)
    with pytest.raises(ConfigError, match="positive"):
        Accelerator(0)
    with pytest.raises(ConfigError, match="'-1KB'"):
        Accelerator.of("-1KB")


def test_schemes_are_registered() -> None:
    assert {"lbdf", "brr"} <= set(scheme_names())


def test_make_cost_model_picks_the_scheme() -> None:
    from tests.onnx_builders import conv_chain, to_graph

    graph = to_graph(conv_chain())
    assert type(make_cost_model(graph, Accelerator.of("1KB", "lbdf"))) is LBDF
    model = make_cost_model(graph, Accelerator.of("1KB", "brr", 2))
    assert type(model) is BRR
    assert (model.beta, model.b, model.name) == (1024, 2, "brr")
