"""The on-disk format of fusion-group datasets: shard specs and seeds, ``.npz`` files, sha256.

The format is documented in ``docs/dataset.md``; in short, a directory with
``manifest.json`` and ``shards/<model>-b<bin>.npz`` files (plain ``.npy`` members, never
pickles).
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from fusionplan.ir.errors import FusionPlanError

FORMAT_NAME = "fusionplan-groups"
FORMAT_VERSION = 1
"""Bump when the shard layout or the sampling procedure changes."""
MANIFEST = "manifest.json"
SHARD_DIR = "shards"


class DatasetError(FusionPlanError):
    """A dataset directory is missing, incomplete, corrupt or of another format version."""


def _regenerate_hint(path: Path) -> str:
    return f"run `fusionplan dataset generate --output {path}` to (re)build or finish it"


# ----------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class ModelInfo:
    """A network in the dataset: name, role, where it came from, and a fingerprint of its
    op graph. ``source`` is the zoo name, or the absolute path of an ONNX file;
    ``zoo_file`` is the zoo cache file name (empty for a file)."""

    name: str
    role: str  # "train" or "unseen"
    source: str
    zoo_file: str
    nodes: int
    edges: int
    graph_sha256: str


@dataclass(frozen=True)
class ShardSpec:
    """Everything that determines one shard's bytes. Stored inside the shard; a shard on
    disk whose stored spec equals the expected one is reused on resume."""

    model: str
    role: str
    source: str  # zoo name or absolute ONNX path
    graph_sha256: str
    bin_index: int
    lo: int
    hi: int
    quota: int
    seed: int  # the dataset seed
    shard_seed: int  # derived from (seed, model, bin)
    buffers: tuple[int, ...]  # bytes
    schemes: tuple[str, ...]
    bytes_per_element: int
    feature_version: int
    sampler: tuple[float | int, ...] = ()  # (p_lo, p_hi, pool factor, max stale, max partitions)
    format_version: int = FORMAT_VERSION
    profile: str = "fusionplan"  # the cost conventions labels are computed under

    @property
    def file(self) -> str:
        return f"{SHARD_DIR}/{self.model}-b{self.bin_index}.npz"

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["buffers"] = list(self.buffers)
        d["schemes"] = list(self.schemes)
        d["sampler"] = list(self.sampler)
        if self.profile == "fusionplan":
            del d["profile"]  # the default: specs written before profiles existed still match
        return d


def shard_seed(seed: int, model: str, bin_index: int) -> int:
    """A 63-bit seed for shard (model, bin) of a dataset with ``seed``; stable across runs
    and platforms (sha256, not Python's salted ``hash``)."""
    digest = hashlib.sha256(f"{FORMAT_NAME}:{seed}:{model}:{bin_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def graph_fingerprint(graph) -> str:
    """sha256 of the op graph's structure and attributes (node names included)."""
    text = repr((graph.nodes, graph.tensors, graph.inputs, graph.outputs))
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------- shard files
def write_npz(path: Path | BinaryIO, arrays: dict[str, np.ndarray]) -> None:
    """A deflated ``.npz`` with fixed member timestamps, so equal arrays give equal bytes
    (``np.savez`` stamps the current time into the zip). Never pickles."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as f:
                a = np.asarray(arrays[name])  # ascontiguousarray would make 0-d arrays 1-d
                if not a.flags.c_contiguous:
                    a = a.copy(order="C")
                np.lib.format.write_array(f, a, allow_pickle=False)


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of a shard (``allow_pickle=False``: an object array is an error)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_shard_spec(path: Path) -> dict[str, Any] | None:
    """The spec stored in a shard, or None if the file is unreadable or not a shard."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return json.loads(str(z["meta"][()]))["spec"]
    except Exception:  # a truncated/foreign file: regenerate it
        return None
