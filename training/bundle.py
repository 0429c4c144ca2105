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

It is written under a temporary name and renamed into place. Reading checks the manifest, so
a truncated or modified file fails with BundleError naming it, before anything is loaded.
"""

from __future__ import annotations

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
from remedy.training.checkpoint import load_verified, save_checkpoint, sha256_file
from safetensors.torch import save_file
from torch import nn

FORMAT = "remedy-repro-bundle-v1"
META_FILE = "bundle.json"
BATCH_FILE = "batch.safetensors"
RNG_FILE = "rng.safetensors"
STATE_DIR = "state"
REPO = Path(__file__).resolve().parents[1]


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
    keys, position = np.random.get_state()[1:3]  # legacy global MT19937: key array + position
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
    (tmp / META_FILE).write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder


def read_bundle(path: str | Path) -> Bundle:
    """Check and load a bundle folder (the model state is loaded by the replay)."""
    path = Path(path)
    if not path.is_dir():
        raise BundleError(f"{path}: not a folder (a repro bundle is a folder)")
    try:
        meta = json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        raise BundleError(f"{path}: no {META_FILE}; not a repro bundle") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path / META_FILE}: unreadable, truncated or modified ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BundleError(f"{path / META_FILE}: not a {FORMAT} manifest")
    required = ("step", "epoch", "hyperparameters", "sha256", "samples")
    missing = [key for key in required if key not in meta]
    if missing or not isinstance(meta["sha256"], dict):
        raise BundleError(f"{path / META_FILE}: missing {', '.join(missing) or 'sha256'}")
    expected = [BATCH_FILE, RNG_FILE] + [
        f"{STATE_DIR}/{name}" for name in ("checkpoint.json", "model.safetensors")
    ]
    unlisted = [name for name in expected if name not in meta["sha256"]]
    if unlisted:
        raise BundleError(f"{path / META_FILE}: no checksum for {', '.join(unlisted)}")
    for name in meta["sha256"]:  # the state files are loaded later, by load_checkpoint
        if name.startswith(f"{STATE_DIR}/"):
            file = path / name
            if not file.is_file() or sha256_file(file) != meta["sha256"][name]:
                raise BundleError(f"{file}: missing, truncated or modified")
    batch = load_verified(path, BATCH_FILE, meta, BundleError)
    rng = load_verified(path, RNG_FILE, meta, BundleError)
    if set(batch) != {"images", "labels", "sample_ids"} or "torch_cpu" not in rng:
        raise BundleError(f"{path}: batch or RNG file lacks expected tensors")
    return Bundle(
        path=path,
        meta=meta,
        images=batch["images"],
        labels=batch["labels"],
        sample_ids=batch["sample_ids"],
        rng=rng,
    )
