"""Optimus's networks (data/optimus_nets.py), its profile (docs/cost-model.md, "The optimus
profile") and accelerator description files (accel_model/description.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import scipy
from click.testing import CliRunner

import fusionplan as fp
from accel_model import Accelerator, make_cost_model
from accel_model.description import load_accelerator, read_description
from accel_model.optimus_pricing import FusedGroup, OptimusView, glb_energy
from fusionplan.app.bench.optimus import DATA, optimus_accelerator, profile_price
from fusionplan.app.bench.optimus_oracle import OptimusRunner, layer_of_ops, optimus_checkout
from fusionplan.app.cli import cli
from fusionplan.data.optimus_nets import NETWORKS
from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.errors import ConfigError
from fusionplan.ir.graph import bits, mask_of
from tests.onnx_builders import residual_block, save, to_graph
from tests.test_cli import invoke

EXAMPLES = Path(__file__).parents[1] / "docs" / "examples"
OPTIMUS = optimus_checkout()
RECORDED = json.loads(DATA.read_text()) if DATA.is_file() else None
"""Optimus's figures as the bench recorded them by running its code."""

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
    # conv2_0_a -> relu -> conv2_0_b, 64 -> 64 channels on 56x56, 128 KB at 16 bits (65,536
    # elements). Optimus keeps conv_a whole and a 32-channel slice of conv_b; its tile solver
    # stops where its buffer constraint binds, (3 - 1 + h) * 56 * 64 + h * 56 * k <= 65,536
    # with k at its bound 32: h = 10.857 rows, k a hair above 32. Rounded up: 11 rows of
    # conv_b (13 of conv_a), 33 channels. conv_a keeps all 64 input and output channels: its
    # 36,864 weights are read once; conv_b's 36,864 * 56/11 = 187,671.3; with the input and
    # output (200,704 each): ceil(224,535.3) + 401,408 = 625,944 elements, as Optimus's code
    # reports. The rounded tile holds 13 * 56 * 64 + 11 * 56 * 33 = 66,920 > 65,536.
    graph = load_zoo_model("optimus_resnet18")
    names = layer_of_ops(graph, "optimus_resnet18")
    group = mask_of([v for v, n in enumerate(names) if n in ("conv2_0_a", "conv2_0_b")])
    assert [graph.nodes[v].op_type for v in bits(group)] == ["Conv", "Relu", "Conv"]
    cm = make_cost_model(graph, Accelerator.of("128KB", "brr", 2, profile="optimus"))
    assert cm.cost(group) == (2 * 66_920, 2 * 625_944, True)
    # tiles that fit (rounded down: 10 rows, 32 channels): 36,864 * 56/10 = 206,438.4, so
    # ceil(243,302.4) + 401,408 = 644,711, and the tile holds 12 * 3,584 + 10 * 56 * 32
    fitting = optimus_accelerator("optimus_resnet18", "128KB", ["rounded-up-tiles"])
    assert make_cost_model(graph, fitting).cost(group) == (2 * 60_928, 2 * 644_711, True)
    # conv_a's weights once per tile too, as a sliced conv's are: + 36,864 * 56/13 (h = 11)
    by_rows = optimus_accelerator("optimus_resnet18", "128KB", ["unsliced-weights-once"])
    assert make_cost_model(graph, by_rows).cost(group).dram == 2 * (
        401_408 + math.ceil(36_864 * 56 / 13 + 36_864 * 56 / 11)
    )


@pytest.mark.slow
def test_a_relu_led_bottleneck_costs_what_the_bottleneck_costs():
    # ResNet-50's conv4_1 block with the ReLU of the add before it: Optimus's networks have no
    # activations, so the group is [conv_a, conv_b, conv_c, add] either way; Optimus keeps
    # conv_a (256 channels) and conv_c (1,024) whole and a 32-channel slice of conv_b, a row
    # step of (256 + 32 + 1024) * 14 = 18,368 elements, and reads conv_a's input unbuffered
    graph = load_zoo_model("optimus_resnet50")
    names = layer_of_ops(graph, "optimus_resnet50")
    block = mask_of([v for v, n in enumerate(names) if n.startswith("conv4_1_")])
    leading = [v for v in range(len(graph)) if graph.succ_mask[v] & block and not block >> v & 1]
    relu = mask_of([v for v in leading if graph.nodes[v].op_type == "Relu"])
    assert relu.bit_count() == 1
    cm = make_cost_model(graph, Accelerator.of("128KB", "brr", 2, profile="optimus"))
    assert cm.cost(block | relu) == cm.cost(block)
    view = OptimusView(graph, 32, 128 * 1024, 2)
    fused = FusedGroup(view, view.layers_of(block))
    _, full, step = fused.parities()
    whole = [v for v, f in zip(fused.order, full, strict=True) if f and view.layers[v].conv]
    assert (step, [view.layers[v].nofm for v in whole]) == (18_368, [256, 1024])


def test_optimus_view_drops_activations_and_reads_inputs_without_halo():
    graph = to_graph(residual_block())
    view = OptimusView(graph, 2, 1 << 20, 1)
    activations = [v for v, n in enumerate(graph.nodes) if n.op_type == "Relu"]
    assert activations and not set(activations) & set(view.layers)
    conv = next(v for v, n in enumerate(graph.nodes) if n.op_type == "Conv")
    layer = view.layers[conv]
    assert layer.wifm == layer.wfil + (layer.wofm - 1) * layer.wstd
    assert layer.ifmap == layer.nifm * layer.hofm * layer.wofm * layer.hstd * layer.wstd


def test_glb_energy_is_optimus_arch_files():
    assert [glb_energy(kb * 1024) for kb in (128, 256, 512)] == [6.0, 9.0, 12.0]
    assert glb_energy(16 * 1024) == 3.0


@pytest.mark.parametrize("name", list(NETWORKS))
def test_every_op_belongs_to_an_optimus_layer(name):
    graph = load_zoo_model(name)
    names = layer_of_ops(graph, name)
    assert set(names) == {layer.name for layer in NETWORKS[name][0]()}
    for v, node in enumerate(graph.nodes):  # an activation belongs to the layer before it
        if node.op_type == "Relu":
            producer = graph.tensors[node.inputs[0]].producer
            assert names[v] == names[producer]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["optimus_resnet18", "optimus_mobilenet", "optimus_squeezenet"])
def test_fusing_is_monotone_over_down_sets_and_the_floor_holds(name):
    # what the exact search assumes of the profile (docs/cost-model.md, "The optimus profile"):
    # a down-set of a fusing group fuses, and every fusing group holds at least its floor
    graph = load_zoo_model(name)
    cm = make_cost_model(graph, optimus_accelerator(name, "128KB"))
    rng = random.Random(0)
    succ = graph.succ_mask
    checked = 0
    for _ in range(20):
        group = 1 << rng.randrange(len(graph))
        for _ in range(rng.randint(1, 9)):
            grow = [c for v in bits(group) for c in bits(succ[v] & ~group)]
            if grow:
                group |= 1 << rng.choice(grow)
        while group & (group - 1):
            if cm.is_valid(group):
                assert cm.buffer_floor(group) < cm.beta
                checked += 1
            sinks = [v for v in bits(group) if not succ[v] & group]
            smaller = group & ~(1 << rng.choice(sinks))
            assert not (cm.is_valid(group) and not cm.is_valid(smaller)), bits(group)
            group = smaller
    assert checked


@pytest.mark.slow
@pytest.mark.parametrize("cell", sorted(RECORDED["cells"]) if RECORDED else [])
def test_the_profile_prices_optimus_optima_as_its_code_did(cell):
    # Optimus's optima and their group prices, as its code reported them when the bench
    # ran (data/optimus_oracle.json). SLSQP's answer for a layer alone changes with the
    # scipy release, so single layers under the solver are compared only on the same release.
    network, buffer = cell.split("|")
    graph = load_zoo_model(network)
    names = layer_of_ops(graph, network)
    cm = make_cost_model(graph, optimus_accelerator(network, buffer))
    same_scipy = RECORDED["optimus"]["scipy"] == scipy.__version__
    checked = 0
    for side in ("energy", "dram"):
        recorded = RECORDED["cells"][cell][side]
        for layers, dram in zip(recorded["groups"], recorded["group_dram"], strict=True):
            solved_alone = len(layers) == 1 and "optimus-solver" in cm.accel.conventions
            if solved_alone and not same_scipy:
                continue
            assert profile_price(cm, names, layers) == dram, layers
            checked += 1
    assert checked


@pytest.mark.slow
def test_squeezenet_optimus_profile_is_at_most_optimus():
    # fusionplan's proven optimum under the profile, below Optimus's own optimum (its
    # energy objective, as recorded by running its code) at every buffer
    graph = load_zoo_model("optimus_squeezenet")
    for buffer in ("128KB", "256KB", "512KB"):
        plan = fp.plan(graph, accelerator=optimus_accelerator("optimus_squeezenet", buffer),
                       search="exact")  # fmt: skip
        assert plan.metrics.gap == 0.0  # proven
        recorded = RECORDED["cells"][f"optimus_squeezenet|{buffer}"]["energy"]["dram"]
        assert plan.metrics.dram_bytes <= 2 * recorded


@pytest.mark.skipif(OPTIMUS is None, reason="no Optimus checkout ($FUSIONPLAN_OPTIMUS_DIR)")
def test_optimus_code_prices_the_group_as_the_profile_does():
    runner = OptimusRunner(OPTIMUS)
    task = {"kind": "price", "net": "optimus_resnet18", "buffer_kb": 128}
    groups = [["conv2_0_a", "conv2_0_b"], ["conv1"], ["pool1"], ["conv2_0_res", "conv2_1_a"]]
    answer = runner.run([{**task, "groups": groups}])[0]["groups"]
    assert (answer[0]["dram"], answer[0]["overflow"], answer[0]["buffer_need"]) == (
        625_944, True, 66_920,
    )  # fmt: skip
    assert answer[2]["dram"] == 0  # a pool alone moves nothing in Optimus
    assert not answer[3]["priced"]  # a group led by a local layer: Optimus never fuses it
    graph = load_zoo_model("optimus_resnet18")
    names = layer_of_ops(graph, "optimus_resnet18")
    cm = make_cost_model(graph, Accelerator.of("128KB", "brr", 2, profile="optimus"))
    same_scipy = runner.versions()["scipy"] == scipy.__version__  # SLSQP's answer varies
    for layers, found in zip(groups, answer, strict=True):
        if layers == ["conv1"] and not same_scipy:
            continue
        expected = found["dram"] if found["priced"] else None
        assert profile_price(cm, names, layers) == expected


def test_bench_optimus_skips_without_a_checkout(monkeypatch):
    monkeypatch.delenv("FUSIONPLAN_OPTIMUS_DIR", raising=False)
    result = CliRunner().invoke(cli, ["bench", "optimus", "-q"])
    assert result.exit_code == 0
    assert result.output.count("\n") == 1 and "skipped, no Optimus checkout" in result.output


def test_a_wrong_optimus_dir_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="is not an Optimus checkout") as err:
        optimus_checkout(tmp_path)
    assert "\n" not in str(err.value)


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
    edge = load_accelerator(EXAMPLES / "edge-npu.toml")
    assert edge.describe() == "256KB buffer, BRR, 1 B/elem, pe_unroll 16"


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
