"""User-facing errors. The CLI prints ``str(err)`` on one line and exits non-zero."""


class FusionPlanError(Exception):
    """Base class for every error caused by bad input rather than a bug."""


class ModelError(FusionPlanError):
    """The model file is missing, not ONNX, or cannot be turned into an op graph."""


class GraphError(ModelError):
    """The op graph breaks an invariant (a cycle, a dangling tensor, no compute ops)."""


class ConfigError(FusionPlanError):
    """A setting is malformed: buffer size, scheme, search name, budget, ..."""


class PlanError(FusionPlanError):
    """A plan file is malformed or does not match the model it is applied to."""


class FusionPlanWarning(UserWarning):
    """Something about the input that does not stop the command but makes its figures less
    trustworthy (an op costed by a guess); the CLI prints it as one ``warning:`` line."""
