"""A checkpoint as the flow sees it: a folder with a JSON sidecar, read without torch.

The training contract says where a job writes checkpoints; each folder holds the tensors
(safetensors) and CHECKPOINT_META_FILE with at least the epoch and step it was taken at.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKPOINT_META_FILE = "checkpoint.json"


@dataclass(frozen=True)
class Checkpoint:
    path: str
    epoch: int  # epochs completed when it was taken: the relaunch's first epoch
    step: int  # updates done when it was taken (counted across warm starts)
