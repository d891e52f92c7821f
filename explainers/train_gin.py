"""Training and evaluation of the GIN validity classifier (one model per fusion scheme).

``train_gin(dataset_dir, "lbdf")`` trains :class:`explainers.gin.GINClassifier` on a dataset
written by :func:`fusionplan.data.dataset.generate_dataset`: samples are (group, buffer size)
pairs, the label is the cost model's validity under the scheme at that buffer, the buffer enters as
node features (``with_buffer``: its size and each node's bytes relative to it). Split 80/10/10
**by group** over the training networks (:meth:`fusionplan.data.reader.GroupDataset.split`);
the dataset's unseen networks, and any training networks named in ``hold_out`` (a whole
family left out), form the ``unseen`` set. Adam, cross-entropy, ``epochs`` passes over the
training split; the weights of the epoch with the best validation accuracy are kept, their
temperature is fitted on the validation split (:func:`fit_temperature`), and they are
evaluated on the test split and on the unseen set, and saved with
:func:`explainers.checkpoints.save_checkpoint` as ``gin-<scheme>.pt`` (state_dict only)
with a manifest entry holding the dataset identity, the settings and the metrics.

Reported metrics per set: accuracy, ``f1`` = F1 of the *valid* class (positive = valid,
label 1), ``f1_invalid`` and ``f1_macro`` (their mean), the confusion matrix
``[[TN, FP], [FN, TP]]`` (rows = true invalid/valid, columns = predicted invalid/valid),
and accuracy per buffer size.

Inputs are clamped to the per-column range of the training split (:class:`FeatureClip`,
recorded in the checkpoint as ``feature_range`` and re-attached by :func:`load_gin`): the
identity on in-range data, a guard against wild extrapolation on networks with ops or
windows the training networks lack (DeepLabV3's dilated ASPP convs, Resize).

Batches are assembled directly from the dataset's packed arrays (a few numpy gathers per
batch, ~0.2 ms for 64 samples) instead of building one ``torch_geometric.data.Data`` per
sample and collating them (~7 ms): the tensors are exactly those
:class:`explainers.dataset.FusionGroupDataset` yields through PyG's ``DataLoader`` (a test
checks it). A training step on 64 samples costs ~15-20 ms on one CPU thread, so this saves
about a quarter of the epoch time.

Determinism: for a seed, results are identical on one machine with one thread count (the
default is one thread, see :func:`_set_threads`); other thread counts reorder float sums.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch_geometric
from torch import nn

from explainers.checkpoints import (
    save_checkpoint,
)
from explainers.gin import KIND, GINClassifier, GINConfig, attach_feature_clip
from fusionplan.data.dataset import default_dataset_dir
from fusionplan.data.features import FEATURE_VERSION, NUM_FEATURES, with_buffer
from fusionplan.data.reader import load_dataset
from fusionplan.ir.errors import ConfigError


@dataclass(frozen=True)
class TrainSettings:
    """Everything that determines a training run besides the dataset and the scheme."""

    epochs: int = 25
    batch_size: int = 64
    lr: float = 1e-3
    lr_min: float = 1e-5  # cosine decay from lr to lr_min over the epochs
    weight_decay: float = 0.0
    seed: int = 0
    split_seed: int = 0
    class_weights: bool = False
    hold_out: tuple[str, ...] = ()  # training models moved to the unseen split


# ----------------------------------------------------------------------------- batching
class PackedSamples:
    """(group, buffer) samples of one scheme over a set of groups, batched by numpy gathers.

    Sample ``k`` is group ``groups[k // B]`` at buffer ``k % B`` (B buffer sizes), the same
    order as :class:`explainers.dataset.FusionGroupDataset`.
    """

    def __init__(self, data, scheme: str, groups: np.ndarray) -> None:
        self.data = data
        nb = len(data.buffers)
        groups = np.asarray(groups, dtype=np.int64)
        self.group = np.repeat(groups, nb)
        self.buffer_index = np.tile(np.arange(nb), len(groups))
        self.y = data.labels[scheme]["valid"][groups].reshape(-1).astype(np.int64)
        self._ei = data.edge_index

    def __len__(self) -> int:
        return len(self.group)

    def batch(
        self, ids: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x, edge_index, batch, y) for samples ``ids``."""
        d = self.data
        g = self.group[ids]
        n = d.node_ptr[g + 1] - d.node_ptr[g]
        offs = np.cumsum(n) - n
        node_idx = np.repeat(d.node_ptr[g] - offs, n) + np.arange(int(n.sum()))
        m = d.edge_ptr[g + 1] - d.edge_ptr[g]
        eoffs = np.cumsum(m) - m
        edge_idx = np.repeat(d.edge_ptr[g] - eoffs, m) + np.arange(int(m.sum()))
        ei = self._ei[:, edge_idx] + np.repeat(offs, m)
        beta = np.repeat(d.buffers[self.buffer_index[ids]], n)
        x = torch.from_numpy(with_buffer(d.x[node_idx], beta, d.bytes_per_element))
        batch = torch.from_numpy(np.repeat(np.arange(len(ids)), n))
        return x, torch.from_numpy(ei), batch, torch.from_numpy(self.y[ids])


# ----------------------------------------------------------------------------- metrics
def binary_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, Any]:
    """Accuracy, F1 of each class and macro F1, confusion matrix [[TN, FP], [FN, TP]]."""
    y_true = np.asarray(y_true).astype(bool)
    y_pred = np.asarray(y_pred).astype(bool)
    tp = int(np.sum(y_true & y_pred))
    tn = int(np.sum(~y_true & ~y_pred))
    fp = int(np.sum(~y_true & y_pred))
    fn = int(np.sum(y_true & ~y_pred))

    def f1(tp_: int, fp_: int, fn_: int) -> float:
        return 2 * tp_ / (2 * tp_ + fp_ + fn_) if tp_ + fp_ + fn_ else 1.0

    n = len(y_true)
    f1_valid, f1_invalid = f1(tp, fp, fn), f1(tn, fn, fp)
    return {
        "samples": n,
        "accuracy": (tp + tn) / n if n else float("nan"),
        "f1": f1_valid,
        "f1_invalid": f1_invalid,
        "f1_macro": (f1_valid + f1_invalid) / 2,
        "confusion": [[tn, fp], [fn, tp]],
        "valid_fraction": float(np.mean(y_true)) if n else float("nan"),
    }


@torch.no_grad()
def logits_of(model: GINClassifier, packed: PackedSamples, batch_size: int = 512) -> torch.Tensor:
    """The model's logits (samples, 2) over every sample of ``packed``."""
    model.eval()
    out = []
    for start in range(0, len(packed), batch_size):
        x, ei, b, _ = packed.batch(np.arange(start, min(start + batch_size, len(packed))))
        out.append(model(x, ei, b))
    return torch.cat(out) if out else torch.zeros(0, 2)


def predict(model: GINClassifier, packed: PackedSamples, batch_size: int = 512) -> np.ndarray:
    """Predicted labels (0 invalid, 1 valid) of every sample of ``packed``."""
    return logits_of(model, packed, batch_size).argmax(1).numpy()


def calibration_error(p_valid: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error: the sample-weighted mean over equal-width confidence
    bins of |accuracy - mean confidence|, confidence that of the predicted class."""
    conf = np.maximum(p_valid, 1 - p_valid)
    right = (p_valid >= 0.5) == y.astype(bool)
    which = np.minimum(((conf - 0.5) * 2 * bins).astype(int), bins - 1)
    total = 0.0
    for k in range(bins):
        sel = which == k
        if sel.any():
            total += sel.sum() * abs(right[sel].mean() - conf[sel].mean())
    return float(total / len(y)) if len(y) else float("nan")


def fit_temperature(model: GINClassifier, packed: PackedSamples) -> float:
    """The temperature (a power of 2 on a 1/64-octave grid over 2^-4 .. 2^6) that minimises
    the negative log-likelihood of ``packed`` (temperature scaling, Guo et al. 2017). A
    grid, not an optimiser: deterministic, and the NLL is convex in 1/T, so one minimum."""
    with torch.no_grad():
        model.temperature.fill_(1.0)
        logits = logits_of(model, packed).double()
        y = torch.from_numpy(packed.y)
        grid = torch.pow(2.0, torch.arange(-256, 385, dtype=torch.float64) / 64)
        nll = [float(nn.functional.cross_entropy(logits / t, y)) for t in grid]
    return float(grid[int(np.argmin(nll))])


def evaluate(model: GINClassifier, packed: PackedSamples) -> dict[str, Any]:
    """:func:`binary_metrics` of ``model`` on ``packed``, plus accuracy per buffer (KB) and
    the calibration error."""
    logits = logits_of(model, packed)
    pred = logits.argmax(1).numpy()
    metrics = binary_metrics(packed.y, pred)
    metrics["ece"] = calibration_error(torch.softmax(logits, 1)[:, 1].numpy(), packed.y)
    per_buffer = {}
    for bi, beta in enumerate(packed.data.buffers):
        sel = packed.buffer_index == bi
        per_buffer[str(int(beta) // 1024)] = float(np.mean(pred[sel] == packed.y[sel]))
    metrics["accuracy_per_buffer_kb"] = per_buffer
    return metrics


# ----------------------------------------------------------------------------- training
def _set_threads(threads: int | None) -> None:
    """One intra-op thread unless told otherwise (argument or ``FUSIONPLAN_TORCH_THREADS``).

    Measured on the shared 2-core machine: with another busy process, two threads ran an
    epoch in ~200 s against ~17 s for one (OpenMP threads spin while they wait for a core);
    on an idle machine two threads are ~1.5x faster.
    """
    if threads is None:
        threads = int(os.environ.get("FUSIONPLAN_TORCH_THREADS", "0") or 0) or 1
    torch.set_num_threads(max(1, int(threads)))


def train_gin(
    dataset_dir: str | os.PathLike | None,
    scheme: str,
    epochs: int = 25,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 1e-3,
    progress: Callable[[int, int], None] | None = None,
    out_dir: str | os.PathLike | None = None,
    *,
    split_seed: int = 0,
    class_weights: bool = False,
    threads: int | None = None,
    save: bool = True,
    log: Callable[[str], None] | None = None,
    hidden: int = GINConfig.hidden,
    layers: int = GINConfig.layers,
    hold_out: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Train the GIN for ``scheme`` on the dataset at ``dataset_dir``; returns the metrics.

    ``progress(epoch, epochs)`` is called after every epoch; ``log`` (if given) receives one
    line per epoch. With ``save`` the best-validation weights go to ``out_dir`` (default:
    :func:`explainers.checkpoints.weights_dir`, i.e. the shipped weights unless
    ``FUSIONPLAN_WEIGHTS_DIR`` is set). The returned dict has ``test``, ``unseen``, ``val``
    metric dicts (see the module docstring), ``best_epoch``, ``train_seconds``,
    ``history`` (per epoch: loss, train and validation accuracy) and the checkpoint path.
    Deterministic for a seed on one machine and thread count.
    """

    dataset_dir = Path(dataset_dir) if dataset_dir is not None else default_dataset_dir()

    settings = TrainSettings(
        epochs=int(epochs), batch_size=int(batch_size), lr=float(lr), seed=int(seed),
        split_seed=int(split_seed), class_weights=bool(class_weights),
        hold_out=tuple(dict.fromkeys([hold_out] if isinstance(hold_out, str) else hold_out)),
    )  # fmt: skip
    if settings.epochs < 1 or settings.batch_size < 1 or not settings.lr > 0:
        raise ConfigError("epochs and batch size must be >= 1 and the learning rate > 0")
    data = load_dataset(dataset_dir)
    scheme = scheme.lower()
    if scheme not in data.labels:
        raise ConfigError(
            f"the dataset at {dataset_dir} has no labels for scheme '{scheme}' "
            f"(it has {', '.join(data.schemes)})"
        )
    _set_threads(threads)
    started = time.perf_counter()
    parts = data.split(settings.split_seed, hold_out=settings.hold_out)
    if len(parts["train"]) == 0 or len(parts["val"]) == 0:
        if settings.hold_out and not len(parts["train"]) + len(parts["val"]):
            raise ConfigError(
                f"holding out {', '.join(settings.hold_out)} leaves no training model in the "
                f"dataset at {dataset_dir}"
            )
        raise ConfigError(f"the dataset at {dataset_dir} is too small to split 80/10/10")
    packed = {k: PackedSamples(data, scheme, v) for k, v in parts.items()}

    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    config = GINConfig(in_features=NUM_FEATURES, hidden=int(hidden), layers=int(layers))
    model = GINClassifier(config)
    clip_range = feature_range(data, parts["train"])
    attach_feature_clip(model, clip_range)  # the identity on the training split
    opt = torch.optim.Adam(model.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, settings.epochs, settings.lr_min)
    weight = None
    if settings.class_weights:
        frac = float(np.mean(packed["train"].y))
        weight = torch.tensor([0.5 / max(1 - frac, 1e-6), 0.5 / max(frac, 1e-6)])
    loss_fn = nn.CrossEntropyLoss(weight=weight)

    best = (-1.0, 0, None)  # (val accuracy, epoch, state)
    history = []
    train = packed["train"]
    for epoch in range(1, settings.epochs + 1):
        model.train()
        order = rng.permutation(len(train))
        total = correct = 0
        loss_sum = 0.0
        for start in range(0, len(order), settings.batch_size):
            ids = order[start : start + settings.batch_size]
            x, ei, b, y = train.batch(ids)
            logits = model(x, ei, b)
            loss = loss_fn(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(ids)
            correct += int((logits.argmax(1) == y).sum())
            total += len(ids)
        sched.step()
        val_acc = float(np.mean(predict(model, packed["val"]) == packed["val"].y))
        history.append(
            {"epoch": epoch, "loss": loss_sum / total, "train_accuracy": correct / total,
             "val_accuracy": val_acc}
        )  # fmt: skip
        if val_acc > best[0]:
            best = (val_acc, epoch, {k: v.detach().clone() for k, v in model.state_dict().items()})
        if log is not None:
            log(
                f"epoch {epoch:3d}  loss {loss_sum / total:.4f}  train {correct / total:.4f}  "
                f"val {val_acc:.4f}  ({time.perf_counter() - started:.0f}s)"
            )
        if progress is not None:
            progress(epoch, settings.epochs)
    train_seconds = time.perf_counter() - started
    model.load_state_dict(best[2])
    model.eval()
    ece_before = {k: evaluate(model, packed[k])["ece"] for k in ("val", "test")}
    model.temperature.fill_(fit_temperature(model, packed["val"]))
    metrics: dict[str, Any] = {
        "scheme": scheme,
        "best_epoch": best[1],
        "temperature": float(model.temperature),
        "ece_uncalibrated": ece_before,
        "train_seconds": round(train_seconds, 1),
        "val": evaluate(model, packed["val"]),
        "test": evaluate(model, packed["test"]),
        "unseen": evaluate(model, packed["unseen"]) if len(packed["unseen"]) else None,
        "unseen_per_model": _per_model(model, data, scheme, parts["unseen"]),
        "history": history,
    }
    if save:
        meta = {
            "dataset": {
                "path": str(Path(dataset_dir)),
                "content_sha256": data.content_sha256,
                "seed": data.manifest["seed"],
                "format_version": data.manifest["format_version"],
                "groups": {k: len(v) for k, v in parts.items()},
                "samples": {k: len(v) for k, v in packed.items()},
                "train_models": [
                    m for m in data.manifest["train_models"] if m not in settings.hold_out
                ],
                "unseen_models": list(
                    dict.fromkeys([*data.manifest["unseen_models"], *settings.hold_out])
                ),
                "buffers_kb": data.manifest["buffers_kb"],
            },
            "settings": asdict(settings),
            "config": asdict(config),
            "gin_config": asdict(config),
            "feature_version": FEATURE_VERSION,
            "feature_range": clip_range,
            "metrics": {k: _summary(metrics[k]) for k in ("val", "test", "unseen") if metrics[k]},
            "best_epoch": best[1],
            "temperature": metrics["temperature"],
            "ece_uncalibrated": metrics["ece_uncalibrated"],
            "train_seconds": metrics["train_seconds"],
            "versions": _versions(),
            "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        directory = Path(out_dir) if out_dir is not None else None
        path = save_checkpoint(model.state_dict(), KIND, scheme, meta, directory)
        metrics["checkpoint"] = str(path)
    return metrics


def feature_range(data, groups: np.ndarray) -> dict[str, list[float]]:
    """Per-column min and max of the model input over ``groups`` at every buffer size."""
    lengths = data.node_ptr[groups + 1] - data.node_ptr[groups]
    starts = data.node_ptr[groups] - (np.cumsum(lengths) - lengths)
    rows = np.repeat(starts, lengths) + np.arange(int(lengths.sum()))
    low = np.full(NUM_FEATURES, np.inf)
    high = np.full(NUM_FEATURES, -np.inf)
    for beta in data.buffers:
        x = with_buffer(data.x[rows], int(beta), data.bytes_per_element)
        low, high = np.minimum(low, x.min(axis=0)), np.maximum(high, x.max(axis=0))
    return {"min": [float(v) for v in low], "max": [float(v) for v in high]}


def _per_model(model, data, scheme: str, groups: np.ndarray) -> dict[str, dict[str, Any]]:
    out = {}
    for mi, name in enumerate(data.models):
        sel = groups[data.model_index[groups] == mi]
        if len(sel):
            out[name] = _summary(evaluate(model, PackedSamples(data, scheme, sel)))
    return out


def _summary(m: dict[str, Any]) -> dict[str, Any]:
    keys = ("samples", "accuracy", "f1", "f1_macro", "confusion", "accuracy_per_buffer_kb", "ece")
    return {k: (round(m[k], 5) if isinstance(m[k], float) else m[k]) for k in keys}


def _versions() -> dict[str, str]:
    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__}
