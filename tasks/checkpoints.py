"""The checkpoints a stopped attempt can offer a warm start: its own and the one it began from.

Read from each checkpoint's JSON sidecar only (epoch, step); no tensor is loaded here.
"""

from __future__ import annotations

import json
from pathlib import Path

from remedy.jobs.local.backend import LocalBackend
from remedy.state_schema import State
from remedy.strategies import Checkpoint
from remedy.training.checkpoint import META_FILE


def read_checkpoint(path: Path) -> Checkpoint | None:
    try:
        meta = json.loads((path / META_FILE).read_text())
        epoch, step = int(meta["epoch"]), int(meta["step"])
        return Checkpoint(path=str(path.resolve()), epoch=epoch, step=step)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # half-written or foreign: not a candidate


def available_checkpoints(state: State, run_dir: str) -> list[Checkpoint]:
    found: list[Checkpoint] = []
    attempt = state.current_attempt
    if attempt is not None and state.run_spec.backend == "local":
        folder = LocalBackend(run_dir).paths(attempt.job_name).root / "checkpoints"
        found += [c for p in sorted(folder.glob("epoch-*")) if (c := read_checkpoint(p))]
    started_from = attempt.spec.init_checkpoint if attempt else None
    if started_from and (c := read_checkpoint(Path(started_from))):
        found.append(c)
    return found
