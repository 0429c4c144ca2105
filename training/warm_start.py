"""Warm start: continue from a checkpoint of an earlier attempt instead of from scratch.

The planner picks the checkpoint (the last one taken before the problem began) and writes
it into the run_spec as init_checkpoint + start_epoch; this module restores it.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from remedy.state_schema import CHECKPOINT_META_FILE
from remedy.training.checkpoint import CheckpointError, load_checkpoint


@dataclass
class WarmStart:
    epoch: int  # epochs already trained: the first epoch to run
    step: int  # updates already done: the job's steps continue from here
    optimizer_restored: bool


def restore(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    hyperparameters: dict[str, float],
) -> WarmStart:
    """Load the model; load the optimizer state too when the optimizer kind is unchanged.

    A strategy may have changed the optimizer (SGD -> Adam): its state does not carry over,
    so only the weights are loaded then. Loading optimizer state also loads the old param
    group settings; `hyperparameters` (weight decay, momentum, ...) are re-applied after it
    so the strategy's change is what trains.
    """
    path = Path(path)
    try:
        saved_kind = json.loads((path / CHECKPOINT_META_FILE).read_text()).get("optimizer")
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path / CHECKPOINT_META_FILE}: unreadable ({exc})") from exc
    same_kind = saved_kind == type(optimizer).__name__
    info = load_checkpoint(path, model, optimizer if same_kind else None)
    for group in optimizer.param_groups:
        group.update({k: v for k, v in hyperparameters.items() if k in group})
    return WarmStart(epoch=info.epoch, step=info.step, optimizer_restored=same_kind)
