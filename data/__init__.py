"""Data: the model zoo (torchvision -> ONNX, cached), GNN group features and fusion-group
datasets.

The dataset modules are numpy-only: ``fusionplan.data.dataset`` (generation),
``fusionplan.data.sampling`` (sampling and labelling), ``fusionplan.data.shards`` (on-disk format),
``fusionplan.data.reader`` (numpy reader); the ``torch_geometric`` dataset class over them is
:class:`explainers.dataset.FusionGroupDataset`.

Import the module you need (``from fusionplan.data.zoo import zoo_path``): this package re-exports
nothing, so loading the zoo for planning does not load dataset generation.
"""
