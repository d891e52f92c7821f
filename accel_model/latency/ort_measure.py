"""Time one op with onnxruntime on the CPU: a one-node ONNX model per signature.

The model uses opset 17 (plus ``com.microsoft`` opset 1 for FusedConv/FusedGemm); weights
are initializers, run-time inputs are fed data from :func:`~accel_model.latency.bench.
operand_arrays`. The session keeps ORT's default optimization level, as a deployment would
(so a Conv may run in ORT's blocked NCHWc layout, reorders included). One intra-op thread
by default: the result does not depend on what else the machine is running.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from accel_model.latency.bench import cpu_model, median_seconds, operand_arrays, slug
from accel_model.latency.signature import OpSignature
from fusionplan.ir.errors import ConfigError

OPSET = 17
IR_VERSION = 8  # the IR version of opset 17, which every supported onnxruntime reads


class OrtMeasurer:
    """Measures signatures with onnxruntime's CPU execution provider."""

    def __init__(
        self, *, threads: int = 1, warmup: int = 2, repeats: int = 10, budget_s: float = 0.1
    ) -> None:
        import onnxruntime as ort  # heavy: 0.3 s, and only measuring needs it

        self._ort = ort
        self.threads = threads
        self.warmup, self.repeats, self.budget_s = warmup, repeats, budget_s
        self.device_id = slug(f"ort-cpu-{ort.__version__}-{cpu_model()}-{threads}t")

    def measure(self, sig: OpSignature) -> float:
        """Median seconds of one ``session.run`` of the op alone."""
        model, feeds = one_node_model(sig)
        options = self._ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # no warnings about unused initializers and the like
        try:
            session = self._ort.InferenceSession(
                model.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
            session.run(None, feeds)
        except Exception as err:  # ORT raises its own exception types for a bad model
            raise ConfigError(f"onnxruntime cannot run {sig.op}: {_first_line(err)}") from err
        return median_seconds(
            lambda: session.run(None, feeds), self.warmup, self.repeats, self.budget_s
        )


def one_node_model(sig: OpSignature) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model holding just ``sig``'s op, and the feeds for its run-time inputs."""
    if not sig.outputs:
        raise ConfigError(f"{sig.op} signature has no outputs to build a model from")
    arrays = operand_arrays(sig)
    present = [i for i, t in enumerate(sig.inputs) if t is not None]
    # an op whose inputs are all weights would be constant-folded away: feed the first
    fed = {i for i in present if not sig.inputs[i].const} or set(present[:1])
    names = [f"in{i}" if t is not None else "" for i, t in enumerate(sig.inputs)]
    graph_inputs, initializers, feeds = [], [], {}
    for i in present:
        if i in fed:
            graph_inputs.append(_value_info(names[i], sig.inputs[i].dtype, sig.inputs[i].shape))
            feeds[names[i]] = arrays[i]
        else:
            initializers.append(numpy_helper.from_array(arrays[i], names[i]))
    outputs = [f"out{i}" for i in range(len(sig.outputs))]
    node = helper.make_node(sig.op, names, outputs, domain=sig.domain, **dict(sig.attrs))
    graph = helper.make_graph(
        [node],
        "op",
        graph_inputs,
        [_value_info(n, t.dtype, None) for n, t in zip(outputs, sig.outputs, strict=True)],
        initializers,
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if sig.domain:
        opsets.append(helper.make_opsetid(sig.domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = IR_VERSION
    return model, feeds


def _value_info(name: str, dtype: str, shape: tuple[int, ...] | None) -> onnx.ValueInfoProto:
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, shape)


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__
