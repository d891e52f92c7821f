"""Plans and splitters: the layer above the cost models and below the searches.

:mod:`fusionplan.planning.plan` holds :class:`Plan` (metrics, the independent validity check,
JSON and ONNX annotation); :mod:`fusionplan.planning.split` the splitters that turn an
invalid group into valid ones, and their registry (docs/design.md, "Splitting").
"""
