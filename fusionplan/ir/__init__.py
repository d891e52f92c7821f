"""The bottom layer: the model IR and its one ONNX importer, the planner's op graph lowered
from it, partitions, errors, atomic io, the registry helper.

Nothing here imports a sibling package (accel_model, search, data, explainers) or a higher
layer of fusionplan; every other package builds on it (docs/design.md, "Layers").
"""
