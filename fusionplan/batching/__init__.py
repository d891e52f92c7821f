"""Dynamic batching (ED-Batch): policies that batch the ready ops of dynamic dataflow graphs,
a PQ-tree memory planner that keeps batched operands contiguous, and a PyTorch executor.

See docs/design.md ("Batching"). Pieces, bottom up: ``graph`` (typed dataflow graphs),
``workloads`` (chains, trees, lattices), ``frontier`` and ``bounds`` (the ready set, the
batch-count lower bound), ``policies`` and ``fsm`` (depth, agenda, learned FSM), ``pqtree`` and
``layout`` (memory planning), ``cells`` and ``executor`` (torch), ``pipeline`` (one run).
"""

from fusionplan.batching import fsm as _fsm  # noqa: F401  registers the "fsm" policy
from fusionplan.batching.policies import POLICIES
from fusionplan.batching.workloads import WORKLOADS

__all__ = ["POLICIES", "WORKLOADS"]
