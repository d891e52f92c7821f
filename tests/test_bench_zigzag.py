"""``fusionplan bench zigzag``: the accelerator and layers described to ZigZag are fusionplan's,
the bench skips cleanly where ZigZag does not import, and where it does, both tools count the
same MACs."""

from __future__ import annotations

import math
import sys

import pytest
from click.testing import CliRunner

from accel_model import Accelerator
from accel_model.hardware import Hardware
from fusionplan.app.bench.zigzag import (
    LAYERS,
    conv_op,
    dram_bits_per_cycle,
    fusionplan_figures,
    zigzag_accelerator,
    zigzag_figures,
    zigzag_mapping,
    zigzag_workload,
)
from fusionplan.app.cli import cli
from fusionplan.data.zoo import load_zoo_model

DEPTHWISE = "/features/features.3/conv/conv.1/conv.1.0/Conv"  # 144 channels, 56 x 56, 3 x 3


def test_bench_zigzag_skips_without_zigzag(monkeypatch):
    monkeypatch.setitem(sys.modules, "zigzag", None)  # `import zigzag...` raises ImportError
    monkeypatch.setitem(sys.modules, "zigzag.api", None)
    result = CliRunner().invoke(cli, ["bench", "zigzag"])
    assert result.exit_code == 0
    assert result.output.count("\n") == 1 and "skipped, ZigZag does not import" in result.output


def test_the_accelerator_zigzag_sees_is_fusionplans():
    hw = Hardware()
    arch = zigzag_accelerator(hw, 128 * 1024)
    buffer, dram = arch["memories"]["buffer"], arch["memories"]["dram"]
    # 8 banks x 8 bytes a cycle = 512 bits; ZigZag charges per access of the port's width,
    # so 64 bytes x the Horowitz fit of one 16 KB bank (2.5 pJ x 0.5^0.47 per byte)
    assert buffer["ports"][0]["bandwidth_max"] == 512
    assert buffer["r_cost"] == pytest.approx(64 * 2.5 * 0.5**0.47)
    assert buffer["size"] == 128 * 1024 * 8
    # 25.6 GB/s at 1 GHz is 204.8 bits a cycle, rounded to 205; 100 pJ a byte
    assert dram_bits_per_cycle(hw) == 205
    assert dram["r_cost"] == dram["w_cost"] == pytest.approx(100 * 205 / 8)
    assert arch["operational_array"]["sizes"] == [32, 32]
    assert arch["operational_array"]["unit_energy"] == 1.0
    assert list(arch["memories"]) == ["o_reg", "buffer", "dram"]  # ZigZag reads inner first


def test_the_layers_zigzag_sees_have_fusionplans_macs():
    graph = load_zoo_model("mobilenet_v2")
    v = conv_op(graph, DEPTHWISE)
    (layer,) = zigzag_workload(graph, v)
    sizes = dict(zip(layer["loop_dims"], layer["loop_sizes"], strict=True))
    assert sizes == {"B": 1, "K": 1, "G": 144, "OX": 56, "OY": 56, "C": 1, "FX": 3, "FY": 3}
    assert math.prod(sizes.values()) == graph.nodes[v].macs == 4064256
    assert layer["padding"] == [[1, 1], [1, 1]]
    # a depthwise conv's output channels are its groups: the rows unroll G, not K (1)
    assert zigzag_mapping(graph, v, Hardware())[0]["spatial_mapping"] == {
        "D1": ["G, 32"],
        "D2": ["OX, 32"],
    }
    for model, name, _ in LAYERS:
        g = load_zoo_model(model)
        (dense,) = zigzag_workload(g, conv_op(g, name))
        assert math.prod(dense["loop_sizes"]) == g.nodes[conv_op(g, name)].macs


def test_zigzag_and_fusionplan_count_the_same_macs():
    pytest.importorskip("zigzag.api")
    graph = load_zoo_model("mobilenet_v2")
    v = conv_op(graph, DEPTHWISE)
    hw = Hardware()
    accel = Accelerator.of("128KB", "lbdf", 2)
    z = zigzag_figures(graph, v, hw, accel.buffer_bytes, lpf_limit=2)
    f = fusionplan_figures(graph, v, accel, hw)
    assert z.macs == f.macs == graph.nodes[v].macs
    assert z.mac_pj == f.mac_pj == graph.nodes[v].macs * hw.mac_pj
    for figures in (z, f):
        assert figures.dram_pj > 0 and figures.buffer_pj > 0 and figures.energy_pj > 0
        assert figures.latency_cycles >= figures.macs / hw.macs_per_cycle
