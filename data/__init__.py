"""Data: the model zoo (torchvision -> ONNX, cached) and fusion-group datasets.

``data.dataset`` (generation, on-disk format, numpy reader) is numpy-only; the
``torch_geometric`` dataset class over it is :class:`explainers.dataset.FusionGroupDataset`.
"""

from data.dataset import (
    BUFFERS_KB,
    DEFAULT_GROUPS,
    DEFAULT_UNSEEN_GROUPS,
    FORMAT_VERSION,
    DatasetError,
    GenerationPlan,
    GroupDataset,
    default_dataset_dir,
    generate_dataset,
    load_dataset,
    plan_generation,
    read_manifest,
)
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
    "BUFFERS_KB",
    "DEFAULT_GROUPS",
    "DEFAULT_UNSEEN_GROUPS",
    "FORMAT_VERSION",
    "TRAIN_MODELS",
    "UNSEEN_MODELS",
    "ZOO",
    "DatasetError",
    "GenerationPlan",
    "GroupDataset",
    "ZooEntry",
    "ZooRow",
    "cache_dir",
    "default_dataset_dir",
    "export_model",
    "generate_dataset",
    "list_zoo",
    "load_dataset",
    "load_zoo_model",
    "model_source",
    "plan_generation",
    "read_manifest",
    "resolve_model",
    "zoo_entry",
    "zoo_names",
    "zoo_path",
]
