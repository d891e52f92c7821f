"""Accelerator description and fusion-group cost models (LBDF, BRR)."""

from accel_model.accelerator import Accelerator, format_size, parse_size
from accel_model.base import CacheStats, CostModel, GroupCost
from accel_model.bounds import compulsory_traffic, unfusable_nodes
from accel_model.registry import COST_MODELS, cost_model_class, scheme_names

# the builtin schemes, registered in this order (the CLI's and the dataset's scheme order)
from accel_model import lbdf, brr  # noqa: E402, F401, I001  (isort would reorder them)


def make_cost_model(graph, accel: Accelerator) -> CostModel:
    """The registered cost model for ``accel.scheme`` over ``graph``."""
    return cost_model_class(accel.scheme)(graph, accel)


__all__ = [
    "Accelerator",
    "COST_MODELS",
    "CacheStats",
    "CostModel",
    "GroupCost",
    "compulsory_traffic",
    "cost_model_class",
    "format_size",
    "make_cost_model",
    "parse_size",
    "scheme_names",
    "unfusable_nodes",
]
