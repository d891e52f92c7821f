"""The GIN validity classifier (DESIGN section 7): is this fusion group valid at this buffer?

Four ``GINConv`` layers (hidden 128, ReLU), sum readout, a linear head with two logits
(0 = invalid, 1 = valid). The buffer size enters as a node feature, so one model per scheme
covers every buffer size. ``forward`` takes ``edge_weight`` (a soft edge mask) as well,
because the explainers learn masks over edges and need the model to honour them.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch_geometric.nn import MessagePassing, global_add_pool

from data.features import NUM_FEATURES

INVALID, VALID = 0, 1


@dataclass(frozen=True)
class GINConfig:
    in_features: int = NUM_FEATURES
    hidden: int = 128
    layers: int = 4


class MaskableGINConv(MessagePassing):
    """GIN layer ``MLP((1 + eps) x_i + sum_j w_ji x_j)``: PyG's GINConv plus edge weights,
    so a learned edge mask can switch messages off (PyG's explainers also inject masks
    into every ``MessagePassing`` layer; the explicit weight serves our RG-Explainer)."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__(aggr="add")
        self.mlp = mlp
        self.eps = nn.Parameter(torch.zeros(1))

    def forward(self, x, edge_index, edge_weight=None):
        out = self.propagate(edge_index, x=x, edge_weight=edge_weight)
        return self.mlp((1 + self.eps) * x + out)

    def message(self, x_j, edge_weight):
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j


class GINClassifier(nn.Module):
    def __init__(self, config: GINConfig | None = None) -> None:
        super().__init__()
        self.config = config or GINConfig()
        c = self.config
        dims = [c.in_features] + [c.hidden] * c.layers
        self.convs = nn.ModuleList(
            MaskableGINConv(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, b), nn.ReLU()))
            for a, b in itertools.pairwise(dims)
        )
        self.head = nn.Linear(c.hidden, 2)

    def forward(self, x, edge_index, batch=None, edge_weight=None):
        """Logits (num_graphs, 2); ``batch`` maps nodes to graphs (all one graph if None)."""
        if batch is None:
            batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        h = x
        for conv in self.convs:
            h = conv(h, edge_index, edge_weight)
        return self.head(global_add_pool(h, batch))

    def config_dict(self) -> dict:
        return asdict(self.config)
