"""Data: the model zoo (torchvision -> ONNX, cached) and fusion-group datasets.

The dataset modules are numpy-only: ``data.dataset`` (generation), ``data.sampling``
(sampling and labelling), ``data.shards`` (on-disk format), ``data.reader`` (numpy reader);
the ``torch_geometric`` dataset class over them is
:class:`explainers.dataset.FusionGroupDataset`.
"""

from data.dataset import (
    BUFFERS_KB,
    DEFAULT_GROUPS,
    DEFAULT_UNSEEN_GROUPS,
    GenerationPlan,
    default_dataset_dir,
    generate_dataset,
    plan_generation,
)
from data.reader import GroupDataset, load_dataset, read_manifest
from data.shards import FORMAT_VERSION, DatasetError
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
