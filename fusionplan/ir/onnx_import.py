"""ONNX -> :class:`OpGraph`, the planner's entry: import once into the model IR
(:func:`fusionplan.ir.onnx_model.from_onnx`: checked, shapes inferred, constants folded),
then lower it (:func:`fusionplan.ir.lowering.lower`: views removed, BatchNormalization
folded into its Conv, (C, H, W) tensors with their row axes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from fusionplan.ir.errors import ConfigError, ModelError
from fusionplan.ir.graph import OpGraph
from fusionplan.ir.lowering import lower
from fusionplan.ir.onnx_model import fix_input_shapes, from_onnx, read_onnx


def load_model(
    source: str | Path,
    *,
    name: str | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
) -> OpGraph:
    """Import an ONNX file as an :class:`OpGraph`.

    ``input_shapes`` fixes graph-input shapes (e.g. ``{"input": (1, 3, 224, 224)}``) for
    models exported with dynamic axes. ``strict_ops`` turns unknown ops into an error.
    """
    path = Path(source)
    if not path.is_file():
        raise ModelError(f"model file not found: {path}")
    return graph_from_proto(
        read_onnx(path),
        name=name or path.stem,
        input_shapes=input_shapes,
        strict_ops=strict_ops,
        check_path=path,
    )


def graph_from_proto(
    model: onnx.ModelProto,
    *,
    name: str = "model",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    strict_ops: bool = False,
    check_path: Path | None = None,
) -> OpGraph:
    """Import an in-memory ``onnx.ModelProto`` (see :func:`load_model`); ``input_shapes``
    change ``model`` in place."""
    if input_shapes:
        check_batch_one(input_shapes)
        fix_input_shapes(model, input_shapes)
    # Checking by path handles external weights and models over 2 GB.
    path = check_path if check_path is not None and not input_shapes else None
    graph = from_onnx(model, path=path, require_shapes=False)
    return lower(graph, name=name, strict_ops=strict_ops)


def check_batch_one(input_shapes: Mapping[str, Sequence[int]]) -> None:
    """Refuse a fixed input shape with a batch other than 1: the op graph is one inference
    (:func:`chw` folds leading axes into the channels), so a batch of 2 would be planned as
    one image with twice the channels, not as two images. The batch is the first axis, or
    the second in the sequence-first token layout (T, 1, D)."""
    for name, dims in input_shapes.items():
        dims = tuple(int(d) for d in dims)
        sequence_first = len(dims) == 3 and dims[1] == 1
        if len(dims) >= 2 and dims[0] != 1 and not sequence_first:
            shape = "x".join(map(str, dims))
            fixed = "x".join(map(str, (1, *dims[1:])))
            raise ConfigError(
                f"input shape {name}={shape} has batch {dims[0]}, but the planner plans batch 1 "
                f"(one inference; a batch would be folded into the channels): use {name}={fixed}"
            )
