"""Repro bundles: everything needed to replay one failing training step, without pickles.

A bundle is a folder written by the NaN guard (training/guard.py) when a step's loss or
gradients are non-finite, before the update is applied:

  bundle.json          format, step, epoch, learning rate, loss, grad_norm, the non-finite
                       gradients, the job's hyperparameters, code version, the batch's sample
                       ids and the data shard ("file:index") of each, Python/NumPy RNG state,
                       and the SHA-256 of every other file
  batch.safetensors    images, labels, sample_ids of the batch
  rng.safetensors      torch's CPU RNG state before the step's forward, the data-order
                       generator's state, NumPy's MT19937 key
  state/               model + optimizer before the step (a training/checkpoint.py checkpoint)

bundle.json's own SHA-256 ("manifest_sha256", over its canonical content without it) covers
the manifest too; bundles written before it read unchecked.

It is written under a temporary name and renamed into place. Reading checks the manifest, so
a truncated or modified file fails with BundleError naming it, before anything is loaded:
only regular files are opened (a symlink, FIFO or device never is), every field is checked
(types, bounds, the file names it lists), every file's SHA-256, and the batch and RNG
tensors' dtypes and shapes.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file
from torch import nn

from remedy.debugger.exceptions import CorruptStoreFile
from remedy.debugger.store import open_regular
from remedy.training.checkpoint import save_checkpoint, sha256_file

FORMAT = "remedy-repro-bundle-v1"
META_FILE = "bundle.json"
BATCH_FILE = "batch.safetensors"
RNG_FILE = "rng.safetensors"
STATE_DIR = "state"
REPO = Path(__file__).resolve().parents[1]
MANIFEST_SHA256 = "manifest_sha256"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # the sample ids of a batch of a million, and more
STATE_FILES = ("checkpoint.json", "model.safetensors", "optimizer.safetensors")


class BundleError(ValueError):
    pass


@dataclass
class Bundle:
    path: Path
    meta: dict[str, Any]
    images: torch.Tensor
    labels: torch.Tensor
    sample_ids: torch.Tensor
    rng: dict[str, torch.Tensor]

    @property
    def state_path(self) -> Path:
        return self.path / STATE_DIR


def code_version() -> dict[str, Any]:
    """What ran: package and library versions, and the git commit when there is one."""
    version: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        version["remedy"] = metadata.version("remedy")
    except metadata.PackageNotFoundError:
        version["remedy"] = None
    try:
        git = ["git", "-C", str(REPO)]
        commit = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if commit.returncode == 0:
            version["git_commit"] = commit.stdout.strip()
            version["git_dirty"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass  # no git here: the versions above still say what ran
    return version


def write_bundle(
    folder: Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    images: torch.Tensor,
    labels: torch.Tensor,
    sample_ids: torch.Tensor,
    torch_rng: torch.Tensor,
    shuffle: torch.Generator,
    meta: dict[str, Any],
) -> Path:
    """Write a bundle to `folder` (replacing one there) and return its path.

    meta carries the step's facts (step, epoch, learning_rate, loss, grad_norm, nonfinite,
    hyperparameters, shards); formats, versions, RNG and checksums are added here.
    """
    tmp = folder.with_name(f".tmp-{folder.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(
        {
            "images": images.detach().contiguous(),
            "labels": labels.contiguous(),
            "sample_ids": sample_ids.contiguous(),
        },
        tmp / BATCH_FILE,
    )
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # the legacy global generator, always MT19937
    keys, position = numpy_state[1:3]  # its key array and position
    save_file(
        {
            "torch_cpu": torch_rng.contiguous(),
            "shuffle": shuffle.get_state().contiguous(),
            "numpy_keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        },
        tmp / RNG_FILE,
    )
    saved = save_checkpoint(
        tmp / ".state", model, optimizer, epoch=meta["epoch"], step=meta["step"]
    )
    os.replace(saved, tmp / STATE_DIR)
    shutil.rmtree(tmp / ".state")
    python_state = random.getstate()
    files = [BATCH_FILE, RNG_FILE] + [
        f"{STATE_DIR}/{p.name}" for p in sorted((tmp / STATE_DIR).iterdir())
    ]
    record = {
        "format": FORMAT,
        **meta,
        "code_version": code_version(),
        "rng": {
            "numpy_position": int(position),
            "python": [python_state[0], list(python_state[1]), python_state[2]],
        },
        "sha256": {name: sha256_file(tmp / name) for name in files},
    }
    write_manifest(tmp, record)
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder


def manifest_sha256(record: dict[str, Any]) -> str:
    """SHA-256 of a manifest's canonical JSON, its own checksum left out."""
    content = {k: v for k, v in record.items() if k != MANIFEST_SHA256}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(folder: Path, record: dict[str, Any]) -> None:
    """bundle.json, sealed with its own checksum."""
    sealed = {**record, MANIFEST_SHA256: manifest_sha256(record)}
    (folder / META_FILE).write_text(json.dumps(sealed, indent=2, allow_nan=False) + "\n")


def _read_regular(file: Path, limit: int | None = None) -> bytes:
    """A whole regular file (never a symlink, FIFO or device: see open_regular)."""
    try:
        fd, size = open_regular(file)
    except FileNotFoundError:
        raise BundleError(f"{file}: missing") from None
    except CorruptStoreFile as exc:
        raise BundleError(str(exc)) from None
    try:
        if limit is not None and size > limit:
            raise BundleError(f"{file}: {size} bytes, more than the {limit} allowed")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(size + 1)
    finally:
        os.close(fd)
    if len(data) != size:
        raise BundleError(f"{file}: changed while being read")
    return data


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _check_manifest(meta: Any, where: Path) -> dict[str, Any]:
    """The manifest's fields, each checked (type, bounds, names), or BundleError."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BundleError(f"{where}: not a {FORMAT} manifest")
    if MANIFEST_SHA256 in meta:
        try:
            ok = meta[MANIFEST_SHA256] == manifest_sha256(meta)
        except (TypeError, ValueError):  # NaN or the like: never written by us
            ok = False
        if not ok:
            raise BundleError(f"{where}: checksum mismatch (truncated or modified)")
    required = ("step", "epoch", "hyperparameters", "sha256", "samples")
    missing = [key for key in required if key not in meta]
    if missing or not isinstance(meta["sha256"], dict):
        raise BundleError(f"{where}: missing {', '.join(missing) or 'sha256'}")
    for key in ("step", "epoch"):
        if not _is_count(meta[key]):
            raise BundleError(f"{where}: {key} {str(meta[key])[:50]} is not a count")
    if not isinstance(meta["hyperparameters"], dict):
        raise BundleError(f"{where}: hyperparameters is not an object")
    samples = meta["samples"]
    shards = samples.get("shards", []) if isinstance(samples, dict) else None
    if not isinstance(shards, list) or not all(isinstance(x, str) for x in shards):
        raise BundleError(f"{where}: samples.shards is not a list of names")
    allowed = {BATCH_FILE, RNG_FILE} | {f"{STATE_DIR}/{name}" for name in STATE_FILES}
    for name, digest in meta["sha256"].items():
        if name not in allowed:  # never a path of its choosing (../, /etc/...)
            raise BundleError(f"{where}: sha256 lists {name[:100]!r}, not a bundle file")
        if not isinstance(digest, str) or len(digest) != 64:
            raise BundleError(f"{where}: sha256 of {name} is not a SHA-256")
    return meta


def _load_tensors(path: Path, name: str, meta: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A safetensors file of the bundle, read once, checked against its SHA-256, loaded."""
    file = path / name
    data = _read_regular(file)
    if hashlib.sha256(data).hexdigest() != meta["sha256"].get(name):
        raise BundleError(f"{file}: checksum mismatch (truncated or modified)")
    try:
        return load_safetensors(data)
    except (SafetensorError, OSError, ValueError) as exc:
        raise BundleError(f"{file}: unreadable ({exc})") from exc


def _check_tensors(
    path: Path, batch: dict[str, torch.Tensor], rng: dict[str, torch.Tensor]
) -> None:
    """The batch and RNG hold what a replay feeds torch, with the dtypes and shapes it needs."""
    if set(batch) != {"images", "labels", "sample_ids"} or "torch_cpu" not in rng:
        raise BundleError(f"{path}: batch or RNG file lacks expected tensors")
    images, labels, ids = batch["images"], batch["labels"], batch["sample_ids"]
    size = images.shape[0] if images.dim() == 4 else 0
    if not images.is_floating_point() or size == 0:
        raise BundleError(f"{path / BATCH_FILE}: images {tuple(images.shape)} are not a batch")
    for what, tensor in (("labels", labels), ("sample_ids", ids)):
        if tensor.dtype not in (torch.int64, torch.int32) or tuple(tensor.shape) != (size,):
            raise BundleError(f"{path / BATCH_FILE}: {what} do not fit {size} images")
    state = rng["torch_cpu"]
    if state.dtype != torch.uint8 or state.shape != torch.get_rng_state().shape:
        raise BundleError(f"{path / RNG_FILE}: torch_cpu is not a CPU RNG state")


def read_bundle(path: str | Path) -> Bundle:
    """Check and load a bundle folder (the model state is loaded by the replay)."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"{path}: not a folder (a repro bundle is a folder)")
    manifest = path / META_FILE
    try:
        raw = _read_regular(manifest, MAX_MANIFEST_BYTES)
    except BundleError as exc:
        if str(exc) == f"{manifest}: missing":
            raise BundleError(f"{path}: no {META_FILE}; not a repro bundle") from None
        raise
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise BundleError(f"{manifest}: unreadable, truncated or modified ({exc})") from None
    meta = _check_manifest(meta, manifest)
    if (path / STATE_DIR).is_symlink():  # its files would be read from wherever it points
        raise BundleError(f"{path / STATE_DIR}: a symbolic link, not the bundle's folder")
    expected = [BATCH_FILE, RNG_FILE] + [
        f"{STATE_DIR}/{name}" for name in ("checkpoint.json", "model.safetensors")
    ]
    unlisted = [name for name in expected if name not in meta["sha256"]]
    if unlisted:
        raise BundleError(f"{manifest}: no checksum for {', '.join(unlisted)}")
    for name in meta["sha256"]:  # the state files are loaded later, by load_checkpoint
        if name.startswith(f"{STATE_DIR}/"):
            file = path / name
            try:
                digest = hashlib.sha256(_read_regular(file)).hexdigest()
            except BundleError as exc:
                raise BundleError(f"{exc}; missing, truncated or modified") from None
            if digest != meta["sha256"][name]:
                raise BundleError(f"{file}: missing, truncated or modified")
    batch = _load_tensors(path, BATCH_FILE, meta)
    rng = _load_tensors(path, RNG_FILE, meta)
    _check_tensors(path, batch, rng)
    shards = meta["samples"].get("shards")
    if shards is not None and len(shards) != len(batch["sample_ids"]):
        raise BundleError(f"{manifest}: samples.shards does not name each sample of the batch")
    return Bundle(
        path=path,
        meta=meta,
        images=batch["images"],
        labels=batch["labels"],
        sample_ids=batch["sample_ids"],
        rng=rng,
    )
