"""``fusionplan bench zigzag``: fusionplan's single-layer energy and latency against ZigZag's
(KU Leuven's ``zigzag-dse``, the optional ``zigzag`` extra) on a handful of conv layers.

Per layer, both tools see the same layer (batch 1, 16-bit operands, partial sums kept at 16
bits), the same buffer and the same accelerator: fusionplan's :class:`Hardware` described to
ZigZag as a ``pe_rows`` x ``pe_cols`` MAC array unrolling output channels (a depthwise conv's
groups) on its rows and output columns on its columns, one 16-bit output register per PE
(outputs stay in the PEs under ``cout-ow``; free, as fusionplan charges none), one on-chip
buffer holding inputs, weights and partial sums with fusionplan's bandwidth and energy per
byte, and DRAM with fusionplan's bandwidth and energy per byte. ZigZag searches its temporal
mappings (LOMA) for the least energy; fusionplan's figure is the layer's own group
(:class:`~accel_model.energy.MetricsModel` of the op alone: its single-layer loop order,
docs/cost-model.md "Single-layer cost", read off the schedule it priced).
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from accel_model import Accelerator, make_cost_model
from accel_model.energy import FJ_PER_PJ, MetricsModel
from accel_model.hardware import Hardware
from fusionplan.data.zoo import load_zoo_model
from fusionplan.ir.graph import OpGraph

LAYERS: tuple[tuple[str, str, str], ...] = (
    ("resnet18", "/layer1/layer1.0/conv1/Conv", "3x3"),
    ("resnet18", "/layer3/layer3.0/conv1/Conv", "3x3 stride 2"),
    ("resnet18", "/layer2/layer2.0/downsample/downsample.0/Conv", "1x1 stride 2"),
    ("mobilenet_v2", "/features/features.2/conv/conv.0/conv.0.0/Conv", "1x1"),
    ("mobilenet_v2", "/features/features.3/conv/conv.1/conv.1.0/Conv", "3x3 depthwise"),
    ("mobilenet_v2", "/features/features.2/conv/conv.1/conv.1.0/Conv", "3x3 dw stride 2"),
)
"""(zoo model, op name, what it is): a 3x3, a strided 3x3, a strided 1x1, a 1x1, a depthwise
and a strided depthwise conv."""

BUFFER = "128KB"
BYTES_PER_ELEMENT = 2
ELEMENT_BITS = 8 * BYTES_PER_ELEMENT


@dataclass(frozen=True)
class LayerFigures:
    """One tool's figures for one layer; energies in pJ."""

    macs: int
    dram_bytes: float
    buffer_bytes: float
    dram_pj: float
    buffer_pj: float
    mac_pj: float
    latency_cycles: float

    @property
    def energy_pj(self) -> float:
        return self.dram_pj + self.buffer_pj + self.mac_pj


@dataclass(frozen=True)
class Row:
    model: str
    op: str
    what: str
    zigzag: LayerFigures
    fusionplan: LayerFigures


def zigzag_imports() -> bool:
    """Whether ZigZag's API imports here (the bench skips where it does not)."""
    try:
        # zigzag-dse is an optional extra (the ``zigzag`` dependency group), imported only here
        import zigzag.api  # noqa: F401
    except ImportError:
        return False
    return True


def conv_op(graph: OpGraph, name: str) -> int:
    """The id of the conv called ``name`` in ``graph``."""
    v = graph.node_index[name]
    if graph.nodes[v].op_type != "Conv":
        raise ValueError(f"{name} is a {graph.nodes[v].op_type}, not a Conv")
    return v


def fusionplan_figures(graph: OpGraph, v: int, accel: Accelerator, hw: Hardware) -> LayerFigures:
    """fusionplan's single-layer figures of op ``v``: the metrics of its own group."""
    m = MetricsModel(make_cost_model(graph, accel), hw).group(1 << v)
    return LayerFigures(
        macs=m.macs,
        dram_bytes=m.dram_bytes,
        buffer_bytes=m.buffer_bytes,
        dram_pj=m.dram_fj / FJ_PER_PJ,
        buffer_pj=m.buffer_fj / FJ_PER_PJ,
        mac_pj=m.mac_fj / FJ_PER_PJ,
        latency_cycles=m.latency_cycles,
    )


def zigzag_workload(graph: OpGraph, v: int) -> list[dict[str, Any]]:
    """Conv ``v`` in ZigZag's workload format, grouped as ZigZag's own ONNX parser writes a
    conv (G groups of K output and C input channels), with its padding."""
    node = graph.nodes[v]
    c_in, h_in, w_in = graph.tensors[node.inputs[0]].shape
    c_out, h_out, w_out = graph.out_shape(v)
    g = node.groups
    top, left, bottom, right = node.pads
    (kh, kw), bits = node.kernel, ELEMENT_BITS
    return [
        {
            "id": 0,
            "name": node.name,
            "operator_type": "Conv",
            "equation": "O[b][g][k][oy][ox]+=W[g][k][c][fy][fx]*I[b][g][c][iy][ix]",
            "dimension_relations": [
                f"ix={node.stride[1]}*ox+{node.dilation[1]}*fx",
                f"iy={node.stride[0]}*oy+{node.dilation[0]}*fy",
            ],
            "loop_dims": ["B", "K", "G", "OX", "OY", "C", "FX", "FY"],
            "loop_sizes": [1, c_out // g, g, w_out, h_out, c_in // g, kw, kh],
            "operand_precision": {"W": bits, "I": bits, "O": bits, "O_final": bits},
            "operand_source": {"I": 0},
            "pr_loop_dims": ["IX", "IY"],
            "pr_loop_sizes": [w_in, h_in],
            "padding": [[left, right], [top, bottom]],
        }
    ]


def zigzag_mapping(graph: OpGraph, v: int, hw: Hardware) -> list[dict[str, Any]]:
    """The spatial mapping of fusionplan's ``cout-ow`` dataflow: rows unroll output channels
    (a depthwise conv's output channels are its groups), columns output columns."""
    if hw.dataflow != "cout-ow":
        raise ValueError(f"bench zigzag describes the cout-ow dataflow only, not {hw.dataflow}")
    node = graph.nodes[v]
    rows = "G" if node.groups > 1 and graph.out_shape(v)[0] == node.groups else "K"
    return [
        {
            "name": "default",
            "spatial_mapping": {"D1": [f"{rows}, {hw.pe_rows}"], "D2": [f"OX, {hw.pe_cols}"]},
            "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"},
        }
    ]


def dram_bits_per_cycle(hw: Hardware) -> int:
    """fusionplan's DRAM bandwidth in whole bits per cycle (ZigZag's unit), rounded."""
    return max(round(hw.dram_gb_per_s * 8000 / hw.clock_mhz), 1)


def _port(name: str, kind: str, bits: int, allocation: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "bandwidth_min": ELEMENT_BITS,
        "bandwidth_max": bits,
        "allocation": allocation,
    }


def zigzag_accelerator(hw: Hardware, buffer_bytes: int) -> dict[str, Any]:
    """``hw`` with a ``buffer_bytes`` buffer in ZigZag's accelerator format. ZigZag counts
    accesses of a port's full width, so each access costs the energy per byte times the
    width in bytes: the energy per byte moved is fusionplan's."""
    every = [f"{op}, {d}" for op in ("I1", "I2") for d in ("fh", "tl")]
    outputs = [f"O, {d}" for d in ("fh", "tl", "fl", "th")]
    buf_bits = 8 * hw.buffer_bytes_per_cycle
    dram_bits = dram_bits_per_cycle(hw)
    return {
        "name": "fusionplan",
        "memories": {
            "o_reg": {  # one 16-bit partial sum per PE: cout-ow keeps outputs in the PEs
                "size": ELEMENT_BITS,
                "r_cost": 0.0,
                "w_cost": 0.0,
                "area": 0.0,
                "latency": 1,
                "operands": ["O"],
                "ports": [
                    _port("r_port_1", "read", ELEMENT_BITS, ["O, tl", "O, th"]),
                    _port("w_port_1", "write", ELEMENT_BITS, ["O, fh", "O, fl"]),
                ],
                "served_dimensions": [],
            },
            "buffer": {
                "size": 8 * buffer_bytes,
                "r_cost": hw.buffer_energy(buffer_bytes) * buf_bits / 8,
                "w_cost": hw.buffer_energy(buffer_bytes) * buf_bits / 8,
                "area": 0.0,
                "latency": 1,
                "operands": ["I1", "I2", "O"],
                "ports": [_port("rw_port_1", "read_write", buf_bits, every + outputs)],
                "served_dimensions": ["D1", "D2"],
            },
            "dram": {
                "size": 8 * 2**40,
                "r_cost": hw.dram_pj_per_byte * dram_bits / 8,
                "w_cost": hw.dram_pj_per_byte * dram_bits / 8,
                "area": 0.0,
                "latency": 1,
                "operands": ["I1", "I2", "O"],
                "ports": [_port("rw_port_1", "read_write", dram_bits, every + outputs)],
                "served_dimensions": ["D1", "D2"],
            },
        },
        "operational_array": {
            "unit_energy": hw.mac_pj,
            "unit_area": 1.0,
            "dimensions": ["D1", "D2"],
            "sizes": [hw.pe_rows, hw.pe_cols],
        },
    }


def zigzag_figures(
    graph: OpGraph, v: int, hw: Hardware, buffer_bytes: int, lpf_limit: int = 6
) -> LayerFigures:
    """ZigZag's figures for conv ``v``: its least-energy mapping on ``hw`` (module docstring)."""
    # zigzag-dse is an optional extra (the ``zigzag`` dependency group), imported only here
    from zigzag.api import get_hardware_performance_zigzag

    logging.getLogger("zigzag").setLevel(logging.ERROR)  # its stages log every mapping
    accelerator = zigzag_accelerator(hw, buffer_bytes)
    with tempfile.TemporaryDirectory(prefix="fusionplan-zigzag-") as tmp:
        arch, mapping = Path(tmp, "accelerator.yaml"), Path(tmp, "mapping.yaml")
        arch.write_text(yaml.safe_dump(accelerator, sort_keys=False))  # inner first
        mapping.write_text(yaml.safe_dump(zigzag_mapping(graph, v, hw), sort_keys=False))
        _, _, cmes = get_hardware_performance_zigzag(
            zigzag_workload(graph, v),
            str(arch),
            str(mapping),
            opt="energy",
            dump_folder=str(Path(tmp, "out")),
            lpf_limit=lpf_limit,
            loma_show_progress_bar=False,
        )
    cme = cmes[0][1][0][0]
    energy = {"dram": 0.0, "buffer": 0.0, "o_reg": 0.0}
    for layer_op, per_level in cme.mem_energy_breakdown.items():
        mem_op = cme.memory_operand_links.layer_to_mem_op(layer_op)
        for level, pj in enumerate(per_level):
            energy[cme.accelerator.get_memory_level(mem_op, level).name] += pj
    per_byte = hw.buffer_energy(buffer_bytes)
    return LayerFigures(
        macs=int(cme.layer.total_mac_count),
        dram_bytes=energy["dram"] / hw.dram_pj_per_byte if hw.dram_pj_per_byte else math.nan,
        buffer_bytes=energy["buffer"] / per_byte if per_byte else math.nan,
        dram_pj=energy["dram"],
        buffer_pj=energy["buffer"],  # the output registers cost 0 pJ, as in fusionplan
        mac_pj=cme.mac_energy,
        latency_cycles=cme.latency_total2,
    )


def run_zigzag_bench(
    layers: tuple[tuple[str, str, str], ...] = LAYERS,
    buffer: str = BUFFER,
    hw: Hardware | None = None,
    lpf_limit: int = 6,
) -> list[Row]:
    """Every layer priced by both tools on the same accelerator (module docstring)."""
    hw = hw or Hardware()
    accel = Accelerator.of(buffer, "lbdf", BYTES_PER_ELEMENT)
    graphs: dict[str, OpGraph] = {}
    rows = []
    for model, name, what in layers:
        graph = graphs.get(model) or graphs.setdefault(model, load_zoo_model(model))
        v = conv_op(graph, name)
        rows.append(
            Row(
                model,
                name,
                what,
                zigzag_figures(graph, v, hw, accel.buffer_bytes, lpf_limit),
                fusionplan_figures(graph, v, accel, hw),
            )
        )
    return rows


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def markdown(rows: list[Row], buffer: str = BUFFER, hw: Hardware | None = None) -> str:
    """The side-by-side table: each figure as ZigZag / fusionplan (ratio ZigZag over
    fusionplan)."""
    hw = hw or Hardware()
    head = (
        f"Single conv layers, {buffer} buffer, 16-bit, batch 1, on {hw.describe()}"
        + (" (fusionplan's default hardware)" if hw == Hardware() else "")
        + "; each cell is ZigZag / fusionplan (ratio).\n\n"
        "| layer | MACs | DRAM KB | buffer KB | energy uJ | DRAM uJ | buffer uJ | MAC uJ "
        "| latency k cycles |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for r in rows:
        z, f = r.zigzag, r.fusionplan
        cells = [f"{r.model} {r.what}", f"{z.macs} / {f.macs}"]
        for a, b, scale in (
            (z.dram_bytes, f.dram_bytes, 1024),
            (z.buffer_bytes, f.buffer_bytes, 1024),
            (z.energy_pj, f.energy_pj, 1e6),
            (z.dram_pj, f.dram_pj, 1e6),
            (z.buffer_pj, f.buffer_pj, 1e6),
            (z.mac_pj, f.mac_pj, 1e6),
            (z.latency_cycles, f.latency_cycles, 1e3),
        ):
            cells.append(f"{a / scale:.1f} / {b / scale:.1f} ({_ratio(a, b)})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
