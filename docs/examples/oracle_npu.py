"""A toy accelerator behind `fusionplan plan --oracle "python3 docs/examples/oracle_npu.py"`.

It speaks the oracle protocol (docs/design.md, "Oracles"): one JSON group per line on stdin,
one JSON answer per line on stdout. Its rule stands in for a real toolchain or simulator: a
group holds every tensor it touches at once, so it fits when their bytes fit the buffer, and it
moves the tensors that cross its boundary plus its weights, once each. A single op always
runs (a real toolchain would tile it).
"""

import json
import math
import sys


def answer(query: dict) -> dict:
    b = query["bytes_per_element"]
    tensors = query["tensors"].values()
    held = sum(math.prod(t["shape"]) for t in tensors) * b
    crossing = sum(
        math.prod(t["shape"]) for t in tensors if not t["made_inside"] or t["read_outside"]
    )
    weights = sum(op["weights"] for op in query["ops"])
    return {
        "fits": held <= query["buffer_bytes"] or len(query["ops"]) == 1,
        "dram_bytes": (crossing + weights) * b,
        "buffer_bytes": held,
    }


for line in sys.stdin:
    print(json.dumps(answer(json.loads(line))), flush=True)
