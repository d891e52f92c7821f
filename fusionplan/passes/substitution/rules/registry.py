"""The substitution-rule registry (docs/design.md, "Plug points"): rule name -> rule class."""

from __future__ import annotations

from fusionplan.ir.registry import Registry
from fusionplan.passes.substitution.pattern import Rule

RULES: Registry[type[Rule]] = Registry("substitution rule")


def register(cls: type[Rule]) -> type[Rule]:
    """Class decorator: register a rule under its ``name`` with its ``help``."""
    parse = cls().nodes  # a malformed pattern fails at import, not in the middle of a search
    assert parse, cls.name
    return RULES.register(cls.name, cls, help=cls.help)


def make_rules(names: list[str] | None = None) -> list[Rule]:
    """Instances of the named rules (all registered ones by default), in registry order."""
    if names is None:
        return [RULES.get(n)() for n in RULES.names()]
    return [RULES.get(RULES.check(n))() for n in names]
