"""Data: the model zoo (torchvision -> ONNX, cached) and, later, fusion-group datasets."""

from data.zoo import (
    TRAIN_MODELS,
    UNSEEN_MODELS,
    ZOO,
    ZooEntry,
    ZooRow,
    cache_dir,
    export_model,
    list_zoo,
    load_zoo_model,
    model_source,
    resolve_model,
    zoo_entry,
    zoo_names,
    zoo_path,
)

__all__ = [
    "TRAIN_MODELS",
    "UNSEEN_MODELS",
    "ZOO",
    "ZooEntry",
    "ZooRow",
    "cache_dir",
    "export_model",
    "list_zoo",
    "load_zoo_model",
    "model_source",
    "resolve_model",
    "zoo_entry",
    "zoo_names",
    "zoo_path",
]
