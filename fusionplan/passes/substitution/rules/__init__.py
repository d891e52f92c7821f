"""The builtin substitution rules, one module per family (docs/design.md, "Graph
substitution"); importing this package registers them all in :data:`RULES`."""

from fusionplan.passes.substitution.rules.registry import RULES, make_rules, register

# isort: off
# registration order is the order rules are tried and listed
from fusionplan.passes.substitution.rules import fusion
from fusionplan.passes.substitution.rules import merge
from fusionplan.passes.substitution.rules import algebraic
# isort: on

__all__ = ["RULES", "algebraic", "fusion", "make_rules", "merge", "register"]
