"""Small CNNs (ONNX, built with ``onnx_builders.Net``) for the dataset and GIN tests.

Real zoo networks take seconds to export into the tests' throw-away cache; these take
milliseconds and still have what the dataset needs: residual joins, a concat branch,
strided stages, a squeeze-excite style multiply, a global pool and a classifier, and a
spread of buffer requirements across :data:`TINY_BUFFERS_KB`.
"""

from __future__ import annotations

from pathlib import Path

from tests.onnx_builders import Net, save

TINY_BUFFERS_KB = (2, 4, 8, 16, 32)


def tiny_cnn(seed: int = 0, width: int = 8, hw: int = 32, blocks: int = 3):
    """A ~30-op CNN: stem, ``blocks`` residual stages (the middle one with an SE-style
    gate, the last one strided with a concat of two branches), GAP, FC."""
    net = Net(seed)
    c = width
    t = net.conv("x", "stem", 3, c)
    t = net.op("Relu", [t], "stem_relu.out", "stem_relu")
    h = hw
    for b in range(blocks):
        p = f"b{b}"
        c_out = c * 2 if b == blocks - 1 else c
        stride = 2 if b == blocks - 1 else 1
        u = net.conv(t, f"{p}_c1", c, c_out, stride=stride)
        u = net.op("Relu", [u], f"{p}_r1.out", f"{p}_r1")
        u = net.conv(u, f"{p}_c2", c_out, c_out)
        if b == 1:  # squeeze-excite gate: GAP -> 1x1 -> sigmoid -> multiply
            g = net.op("GlobalAveragePool", [u], f"{p}_gap.out", f"{p}_gap")
            g = net.conv(g, f"{p}_fc", c_out, c_out, k=1)
            g = net.op("Sigmoid", [g], f"{p}_sig.out", f"{p}_sig")
            u = net.op("Mul", [u, g], f"{p}_se.out", f"{p}_se")
        if stride == 1:
            u = net.op("Add", [u, t], f"{p}_add.out", f"{p}_add")
        else:  # strided: a 1x1 strided shortcut, concatenated with the main branch
            s = net.conv(t, f"{p}_short", c, c_out, k=1, stride=2)
            u = net.op("Concat", [u, s], f"{p}_cat.out", f"{p}_cat", axis=1)
            c_out *= 2
            h //= 2
        t = net.op("Relu", [u], f"{p}_r2.out", f"{p}_r2")
        c = c_out
    t = net.op("GlobalAveragePool", [t], "gap.out", "gap")
    t = net.conv(t, "fc", c, 10, k=1)
    return net.model([("x", [1, 3, hw, hw])], [(t, [1, 10, 1, 1])], f"tiny{seed}")


def save_tiny(directory: Path, name: str, **kwargs) -> Path:
    return save(tiny_cnn(**kwargs), Path(directory), name)
