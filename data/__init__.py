"""Data: the model zoo (torchvision -> ONNX, cached), GNN group features and fusion-group
datasets.

The dataset modules are numpy-only: ``data.dataset`` (generation), ``data.sampling``
(sampling and labelling), ``data.shards`` (on-disk format), ``data.reader`` (numpy reader);
the ``torch_geometric`` dataset class over them is
:class:`explainers.dataset.FusionGroupDataset`.

Import the module you need (``from data.zoo import zoo_path``): this package re-exports
nothing, so loading the zoo for planning does not load dataset generation.
"""
