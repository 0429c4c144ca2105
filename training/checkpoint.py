"""Checkpoints as safetensors + a JSON sidecar: nothing here is ever unpickled.

A checkpoint is a folder checkpoints/epoch-NNNN/ (or step-NNNNNNNNN/ mid-epoch) holding
model.safetensors,
optimizer.safetensors and checkpoint.json (epoch, step, optimizer param groups and the
SHA-256 of both tensor files). The folder is written under a temporary name and renamed into
place, so a reader sees a whole checkpoint or none; the hashes catch truncation or tampering.
The sidecar's name is part of the training contract (remedy.state_schema.CHECKPOINT_META_FILE)
so that the flow reads a checkpoint's epoch and step without importing torch.
"""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from remedy.state_schema import CHECKPOINT_META_FILE

FORMAT = "remedy-checkpoint-v1"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
STEP_PREFIX = "step-"  # step-NNNNNNNNN: a checkpoint taken mid-epoch (checkpoint_every_steps)


class CheckpointError(ValueError):
    pass


@dataclass
class CheckpointInfo:
    path: Path
    epoch: int
    step: int


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _param_names(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """Model names of the optimizer's parameters, in the optimizer's state_dict order."""
    names = {id(param): name for name, param in model.named_parameters()}
    ordered = [param for group in optimizer.param_groups for param in group["params"]]
    missing = [i for i, param in enumerate(ordered) if id(param) not in names]
    if missing:
        raise CheckpointError(f"optimizer parameters {missing} do not belong to the model")
    return [names[id(param)] for param in ordered]


def save_checkpoint(
    folder: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    step: int,
    name: str | None = None,
) -> Path:
    """Write checkpoint folder/NAME (default epoch-NNNN; epoch = epochs completed, step =
    updates done) and return its path."""
    folder = Path(folder)
    name = name or f"epoch-{epoch:04d}"
    final = folder / name
    tmp = folder / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    model_tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(model_tensors, tmp / MODEL_FILE)

    # Optimizer state by parameter name ("stacks.0.0.conv1.weight.momentum_buffer"), so the
    # file reads on its own; non-tensor state (rare) goes to the JSON.
    state = optimizer.state_dict()
    names = _param_names(model, optimizer)
    optimizer_tensors, optimizer_scalars = {}, {}
    for index, values in state["state"].items():
        for key, value in values.items():
            if isinstance(value, torch.Tensor):
                optimizer_tensors[f"{names[index]}.{key}"] = value.detach().contiguous()
            elif value is not None:
                optimizer_scalars[f"{names[index]}.{key}"] = value
    save_file(optimizer_tensors, tmp / OPTIMIZER_FILE)

    groups = [{k: v for k, v in group.items() if k != "params"} for group in state["param_groups"]]
    for group, params in zip(groups, state["param_groups"], strict=True):
        group["params"] = [names[i] for i in params["params"]]
    meta = {
        "format": FORMAT,
        "epoch": epoch,
        "step": step,
        "optimizer": type(optimizer).__name__,
        "param_groups": groups,
        "optimizer_scalars": optimizer_scalars,
        "sha256": {name: sha256_file(tmp / name) for name in (MODEL_FILE, OPTIMIZER_FILE)},
    }
    (tmp / CHECKPOINT_META_FILE).write_text(json.dumps(meta, indent=2) + "\n")

    if final.exists():
        shutil.rmtree(final)  # rewriting the same epoch (a rerun): the newer one wins
    os.replace(tmp, final)
    return final


def step_checkpoint_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:09d}"


def prune_step_checkpoints(folder: str | Path, keep: int) -> None:
    """Remove all but the `keep` most recent step checkpoints (epoch ones stay)."""
    found = sorted(p for p in Path(folder).glob(f"{STEP_PREFIX}*") if p.is_dir())
    for old in found[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads((path / CHECKPOINT_META_FILE).read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no {CHECKPOINT_META_FILE}; not a checkpoint") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path / CHECKPOINT_META_FILE}: unreadable ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path / CHECKPOINT_META_FILE}: not a {FORMAT} sidecar")
    for key in ("epoch", "step", "param_groups", "sha256"):
        if key not in meta:
            raise CheckpointError(f"{path / CHECKPOINT_META_FILE}: missing {key!r}")
    # Each field's type, so a damaged sidecar is named here, not a TypeError deep in torch.
    counts = all(type(meta[key]) is int and meta[key] >= 0 for key in ("epoch", "step"))
    groups = meta["param_groups"]
    if (
        not counts
        or not isinstance(meta["sha256"], dict)
        or not isinstance(meta.get("optimizer_scalars", {}), dict)
        or not isinstance(groups, list)
        or not all(isinstance(group, dict) for group in groups)
    ):
        raise CheckpointError(
            f"{path / CHECKPOINT_META_FILE}: malformed (a field of the wrong type)"
        )
    return meta


def load_verified(
    path: Path, name: str, meta: dict[str, Any], error: type[Exception] = CheckpointError
) -> dict[str, torch.Tensor]:
    """A safetensors file whose SHA-256 the sidecar recorded; `error` names what is wrong."""
    file = path / name
    if not file.is_file():
        raise error(f"{file}: missing")
    if sha256_file(file) != meta["sha256"].get(name):
        raise error(f"{file}: checksum mismatch (truncated or modified)")
    try:
        return load_file(file)
    except (SafetensorError, OSError) as exc:
        raise error(f"{file}: unreadable ({exc})") from exc


def load_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> CheckpointInfo:
    """Restore model (and optimizer) state in place from a checkpoint folder."""
    path = Path(path)
    meta = _read_meta(path)
    try:
        model.load_state_dict(load_verified(path, MODEL_FILE, meta), strict=True)
    except RuntimeError as exc:  # missing/unexpected keys or wrong shapes
        raise CheckpointError(f"{path / MODEL_FILE}: does not fit the model ({exc})") from exc

    if optimizer is not None:
        _restore_optimizer(path, meta, model, optimizer)
    return CheckpointInfo(path=path, epoch=int(meta["epoch"]), step=int(meta["step"]))


def _restore_optimizer(
    path: Path, meta: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    names = _param_names(model, optimizer)
    index_of = {name: i for i, name in enumerate(names)}
    params = [param for group in optimizer.param_groups for param in group["params"]]
    saved = load_verified(path, OPTIMIZER_FILE, meta) | meta.get("optimizer_scalars", {})
    state: dict[int, dict[str, Any]] = {}
    for full_key, value in saved.items():
        name, _, key = full_key.rpartition(".")
        if name not in index_of:
            raise CheckpointError(f"{path}: optimizer state for unknown parameter {name!r}")
        param = params[index_of[name]]
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
            raise CheckpointError(
                f"{path}: {full_key} has shape {tuple(value.shape)}, "
                f"parameter has {tuple(param.shape)}"
            )
        state.setdefault(index_of[name], {})[key] = value

    groups = meta["param_groups"]
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointError(
            f"{path}: {len(groups)} optimizer param groups, expected {len(optimizer.param_groups)}"
        )
    param_groups, start = [], 0
    for group, current in zip(groups, optimizer.param_groups, strict=True):
        count = len(current["params"])
        hyper = {k: v for k, v in group.items() if k != "params"}
        param_groups.append(hyper | {"params": list(range(start, start + count))})
        start += count
    try:
        optimizer.load_state_dict({"state": state, "param_groups": param_groups})
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: optimizer state does not fit ({exc})") from exc
