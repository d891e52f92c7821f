"""Optimus's networks (data/optimus_nets.py), its profile (docs/cost-model.md, "The optimus
profile") and accelerator description files (accel_model/description.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import fusionplan as fp
from accel_model import Accelerator, make_cost_model
from accel_model.description import load_accelerator, read_description
from data.optimus_nets import NETWORKS
from data.zoo import load_zoo_model
from fusionplan.app.cli import cli
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import mask_of
from tests.onnx_builders import residual_block, save, to_graph
from tests.test_cli import invoke

EXAMPLES = Path(__file__).parents[1] / "docs" / "examples"

# Optimus's own totals (conv, depthwise and FC weights, no biases) and layer counts
WEIGHTS = {
    "optimus_resnet18": (11_171_008, 21),
    "optimus_resnet50": (25_502_912, 54),
    "optimus_vgg16": (14_710_464, 13),
    "optimus_squeezenet": (1_244_448, 26),
    "optimus_mobilenet": (4_209_088, 15),
}


@pytest.mark.parametrize("name", list(NETWORKS))
def test_the_layer_tables_match_optimus(name):
    layers = NETWORKS[name][0]()
    weights = 0
    for layer in layers:
        if layer.op == "conv":
            weights += layer.c_in * layer.c_out * layer.kernel**2
        elif layer.op == "dw":
            weights += layer.c_in * layer.kernel**2
        elif layer.op == "fc":
            weights += layer.c_in * layer.c_out
    dense = sum(layer.op in ("conv", "fc") for layer in layers)
    assert (weights, dense) == WEIGHTS[name]


@pytest.mark.slow
def test_resnet18_imports_with_optimus_shapes():
    graph = load_zoo_model("optimus_resnet18")
    convs = [v for v, n in enumerate(graph.nodes) if n.kind == "conv"]
    assert len(convs) == 21
    assert sum(graph.nodes[v].weights for v in convs) == 11_171_008
    assert graph.out_shape(len(graph) - 1) == (512, 1, 1)  # ends at pool5, no FC


@pytest.mark.slow
def test_a_resnet18_group_costs_what_optimus_reports():
    # conv2_0_a -> relu -> conv2_0_b, 64 -> 64 channels on 56x56, 128 KB at 16 bits
    # (65,536 elements). Optimus keeps conv_a whole (3 rows) and a 32-channel slice of conv_b
    # (1 row): 64*3*56 + 32*56 = 12,544, add-one-line 64*56 + 32*56 = 5,376; weights 73,728
    # stream, h = floor((65536 - 12544) / 5376) + 1 = 10; its reported weight reads are
    # 36,864 * 56/12 (conv_a keeps 12 rows per tile) + 36,864 * 56/10, rounded up 378,471;
    # plus the input and output 200,704 each: 779,879 elements (Optimus's own figure).
    graph = load_zoo_model("optimus_resnet18")
    # layer 2 of the table is conv2_0_a (a conv and its relu), layer 3 conv2_0_b
    ops = [v for v, n in enumerate(graph.nodes) if n.name.startswith(("/ops.2/", "/ops.3/"))]
    assert [graph.nodes[v].op_type for v in ops] == ["Conv", "Relu", "Conv"]
    group = mask_of(ops)
    cm = make_cost_model(graph, Accelerator.of("128KB", "brr", 2, profile="optimus"))
    terms = cm.terms(group)
    assert (terms.footprint, terms.row_step, terms.h_tile) == (12_544, 5_376, 10)
    assert cm.cost(group).dram == 2 * 779_879
    # the realistic BRR also keeps conv_a's input (a 32-channel slice of 5 rows): 21,504,
    # h = floor((65536 - 21504) / 5376) + 1 = 9, and streams the weights once per tile: 7
    real = make_cost_model(graph, Accelerator.of("128KB", "brr", 2))
    assert real.terms(group).footprint == 12_544 + 32 * 5 * 56
    assert (real.terms(group).h_tile, real.terms(group).tiles) == (9, 7)
    assert real.cost(group).dram == 2 * (2 * 200_704 + 7 * 73_728)


@pytest.mark.slow
def test_squeezenet_optimus_profile_is_at_most_optimus():
    graph = load_zoo_model("optimus_squeezenet")
    for buffer, optimus_mb in (("128KB", 5.25), ("256KB", 3.43), ("512KB", 3.12)):
        optimus = fp.plan(graph, buffer, "brr", bytes_per_element=2, profile="optimus",
                          search="exact")  # fmt: skip
        real = fp.plan(graph, buffer, "brr", bytes_per_element=2, search="exact")
        assert optimus.metrics.gap == 0.0  # proven
        assert optimus.metrics.dram_bytes <= optimus_mb * 2**20
        assert real.metrics.dram_bytes >= optimus.metrics.dram_bytes


# ----------------------------------------------------------------------------- files
def test_yaml_and_toml_descriptions(tmp_path):
    acc = load_accelerator(EXAMPLES / "optimus-128KB.yaml")
    assert acc == Accelerator.of("128KB", "brr", 2, profile="optimus", pe_unroll=32)
    assert acc.profile == "optimus" and not acc.depthwise_weights
    toml = tmp_path / "a.toml"
    toml.write_text('buffer = "64KB"\nscheme = "brr"\npe_unroll = 8\nin_place = false\n')
    acc = load_accelerator(toml)
    assert (acc.buffer_bytes, acc.pe_unroll, acc.in_place) == (65536, 8, False)
    assert load_accelerator(toml, "1MB").buffer_bytes == 1 << 20  # an explicit buffer wins
    assert load_accelerator(EXAMPLES / "edge-npu.toml").describe() == "256KB buffer, BRR, 1 B/elem"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.yaml", "buffer: 1KB\nbuffr: 2\n", "unknown key 'buffr'"),
        ("a.yaml", "buffer: 1KB\npe_unroll: many\n", "pe_unroll must be a int"),
        ("a.yaml", "buffer: 1KB\nin_place: 1\n", "in_place must be a bool"),
        ("a.yaml", "- 1\n- 2\n", "must hold a mapping"),
        ("a.yaml", "buffer: [1\n", "is not valid"),
        ("a.toml", "buffer = \n", "is not valid"),
        ("a.json", "{}", "must end in .yaml"),
        ("a.yaml", "scheme: brr\n", "gives no buffer size"),
        ("a.yaml", "buffer: 1KB\nscheme: lbdf\nprofile: optimus\n", "brr scheme only"),
        # every value is checked when the file is read, naming the file and the key
        ("a.yaml", "buffer: 1KB\nscheme: tpu\n", "a.yaml: key 'scheme': 'tpu' is not one of lbdf"),
        ("a.yaml", "buffer: 1KB\npe_unroll: -4\n", "a.yaml: key 'pe_unroll': -4 is below 0"),
        ("a.yaml", "buffer: 1KB\nprofile: fast\n", "key 'profile': 'fast' is not one"),
        ("a.yaml", "buffer: 1KB\nsingle_layer: all\n", "key 'single_layer': 'all' is not one of"),
        ("a.yaml", "buffer: 1KB\nbytes_per_element: 0\n", "key 'bytes_per_element': 0 is below 1"),
        ("a.yaml", "buffer: 0KB\n", "key 'buffer': buffer size '0KB' must be positive"),
        ("a.yaml", "buffer: 1KB\nconventions: [fast]\n", "key 'conventions': 'fast' is not one"),
        ("a.yaml", "", "holds no settings"),
        ("a.yaml", "# to do\n", "holds no settings"),
        ("a.toml", "", "holds no settings"),
    ],
)
def test_bad_descriptions_are_one_line_errors(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_accelerator(path)
    assert "\n" not in str(err.value)


def test_the_cli_reads_a_description_and_options_win(tmp_path):
    src = tmp_path / "acc.yaml"
    src.write_text("buffer: 2KB\nscheme: brr\nbytes_per_element: 2\npe_unroll: 2\n")
    model = save(residual_block(), tmp_path)
    out = invoke("plan", model, "--accelerator", src, "-q", "--json")
    acc = json.loads(out.stdout)["accelerator"]
    assert (acc["buffer_bytes"], acc["scheme"], acc["bytes_per_element"], acc["pe_unroll"]) == (
        2048, "brr", 2, 2,
    )  # fmt: skip
    out = invoke("plan", model, "--accelerator", src, "--buffer", "4KB", "--pe-unroll", "0",
                 "-q", "--json")  # fmt: skip
    acc = json.loads(out.stdout)["accelerator"]
    assert (acc["buffer_bytes"], acc["pe_unroll"], acc["scheme"]) == (4096, 0, "brr")
    bad = tmp_path / "bad.yaml"
    bad.write_text("buffer: 2KB\ncolour: red\n")
    result = CliRunner().invoke(cli, ["plan", str(model), "--accelerator", str(bad)])
    assert result.exit_code == 2 and "unknown key 'colour'" in result.output


def test_the_cli_blames_a_bad_value_on_the_file_not_the_option(tmp_path):
    src = tmp_path / "acc.yaml"
    src.write_text("buffer: 2KB\nscheme: tpu\npe_unroll: -4\nprofile: fast\n")
    model = save(residual_block(), tmp_path)
    result = CliRunner().invoke(cli, ["plan", str(model), "--accelerator", str(src)])
    assert result.exit_code == 2
    assert f"{src}: key 'scheme': 'tpu' is not one of lbdf, brr" in result.output
    assert "'--scheme'" not in result.output


def test_the_api_takes_a_description(tmp_path):
    graph = to_graph(residual_block())
    src = tmp_path / "acc.toml"
    src.write_text('buffer = "2KB"\nscheme = "brr"\npe_unroll = 2\n')
    by_file = fp.plan(graph, accelerator=src, search="exact")
    by_args = fp.plan(graph, "2KB", "brr", pe_unroll=2, search="exact")
    assert by_file.metrics.dram_bytes == by_args.metrics.dram_bytes
    assert by_file.cost_model.accel == by_args.cost_model.accel
    bigger = fp.plan(graph, "8KB", accelerator=src, search="exact")
    assert bigger.cost_model.accel.buffer_bytes == 8192
    assert read_description(src)["pe_unroll"] == 2
