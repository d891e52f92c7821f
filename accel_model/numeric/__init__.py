"""Numeric replay: schedules executed on real values with numpy, each compute reading only
what its schedule loaded into the buffer (docs/cost-model.md, "Numeric replay")."""

from accel_model.numeric.network import NumericGraph
from accel_model.numeric.replay import Dram, GroupReplay, PlanReplay, replay_plan, replay_schedule

__all__ = ["Dram", "GroupReplay", "NumericGraph", "PlanReplay", "replay_plan", "replay_schedule"]
