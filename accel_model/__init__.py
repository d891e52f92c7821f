"""Accelerator description and fusion-group cost models (LBDF, BRR)."""

from accel_model.accelerator import Accelerator, format_size, parse_size
from accel_model.base import CacheStats, CostModel, GroupCost
from accel_model.bounds import compulsory_traffic, unfusable_nodes
from accel_model.registry import COST_MODELS, cost_model_class, scheme_names

# isort: off
# the builtin schemes register themselves, in this order (the CLI's and the dataset's order)
from accel_model import lbdf
from accel_model import brr
# isort: on


def make_cost_model(graph, accel: Accelerator) -> CostModel:
    """The registered cost model for ``accel.scheme`` over ``graph``."""
    return cost_model_class(accel.scheme)(graph, accel)


__all__ = [
    "COST_MODELS",
    "Accelerator",
    "CacheStats",
    "CostModel",
    "GroupCost",
    "brr",
    "compulsory_traffic",
    "cost_model_class",
    "format_size",
    "lbdf",
    "make_cost_model",
    "parse_size",
    "scheme_names",
    "unfusable_nodes",
]
