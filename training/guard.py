"""The built-in job's NaN guard: the shared policy, plus a repro bundle and contact tracing.

Before the optimizer applies an update the job asks `guard.passes(...)`: the loss and the
total gradient norm, computed for the log anyway, must be finite (training/nan_guard.py,
the policy every job's guard follows: "stop", "skip" or "off", the NonFiniteGradient
status, the stop request). Per step the guard also keeps torch's RNG state and the model's
buffers (batch-norm statistics, which the failing forward has already moved). When an
update is bad, the guard adds what only the built-in job knows:
  - the buffers are restored: the model stays as it was, finite;
  - a repro bundle (training/bundle.py) is written under OUTPUT_DIR/repro/step-NNNNNN and
    replayed at once (training/replay.py) to name the first non-finite module and any bad
    records (in "skip", for the first bad update only; the later ones are checked for bad
    records alone); the status, written into the folder $REMEDY_RULE_STATUS_DIR names (set
    by the backend; OUTPUT_DIR/rule_status without it), carries bundle, localisation and
    suspect samples;
  - samples that are the bad records of two or more skipped updates are a data problem.

Contact tracing: OUTPUT_DIR/trace/epoch-NNNN.safetensors holds each epoch's order as sample
ids (int32), and trace/index.jsonl the step it starts at, so any step's batch can be named
later (batch_of_step) for the cost of one small file per epoch.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from remedy.debugger import store
from remedy.state_schema import Hyperparameters
from remedy.state_schema.job_env import RULE_STATUS_DIR, RULE_STATUS_DIR_ENV
from remedy.training.bundle import write_bundle
from remedy.training.data import DataSplit
from remedy.training.nan_guard import Evidence, NanGuardPolicy, finite
from remedy.training.replay import find_bad_records, replay

TRACE_DIR = "trace"
TRACE_INDEX = "index.jsonl"


class ContactTrace:
    """One file per epoch: the order in which the epoch visits the samples, as ids."""

    def __init__(self, output_dir: Path, batch_size: int) -> None:
        self.folder = output_dir / TRACE_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self.batch_size = batch_size
        (self.folder / TRACE_INDEX).write_text("")  # a relaunch in this folder starts afresh

    def epoch(self, epoch: int, first_step: int, ids: torch.Tensor) -> None:
        name = f"epoch-{epoch:04d}.safetensors"
        save_file({"sample_ids": ids.to(torch.int32).contiguous()}, self.folder / name)
        line: dict[str, Any] = {"epoch": epoch, "first_step": first_step}
        line["batch_size"] = self.batch_size
        line |= {"samples": len(ids), "file": name}
        with (self.folder / TRACE_INDEX).open("a") as index:
            index.write(json.dumps(line) + "\n")


def batch_of_step(output_dir: str | Path, step: int) -> list[int]:
    """The sample ids of a step's batch (steps count from 1), from a job's trace."""
    folder = Path(output_dir) / TRACE_DIR
    for line in (folder / TRACE_INDEX).read_text().splitlines():
        entry = json.loads(line)
        size, first = entry["batch_size"], entry["first_step"]
        if first <= step < first + math.ceil(entry["samples"] / size):
            ids = load_file(folder / entry["file"])["sample_ids"]
            start = (step - first) * size
            return ids[start : start + size].tolist()
    raise KeyError(f"step {step} is not in the trace of {output_dir}")


def rule_status_dir(output_dir: Path) -> Path:
    """$REMEDY_RULE_STATUS_DIR, or OUTPUT_DIR/rule_status when it is not set: the backend
    names the folder it reads rule statuses from; a job run by hand uses its own."""
    folder = os.environ.get(RULE_STATUS_DIR_ENV)
    return Path(folder) if folder else output_dir / RULE_STATUS_DIR


class NanGuard(NanGuardPolicy):
    """The policy (training/nan_guard.py) with the built-in job's bundle, replay and trace."""

    def __init__(
        self,
        config: Hyperparameters,
        output_dir: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        train_data: DataSplit,
        shuffle: torch.Generator,
    ) -> None:
        super().__init__(config.nan_guard, rule_status_dir(output_dir))
        self.config = config
        self.output_dir = output_dir
        self.model, self.optimizer = model, optimizer
        self.data, self.shuffle = train_data, shuffle
        self.suspect_counts: Counter[int] = Counter()
        self.bundle: Path | None = None
        self.trace = ContactTrace(output_dir, config.batch_size)
        self._rng = torch.get_rng_state()
        self._buffers: list[torch.Tensor] = []
        self._first_details: dict[str, Any] = {}  # of the bundled update: the closing status's

    def new_epoch(self, epoch: int, first_step: int, order: torch.Tensor) -> None:
        assert self.data.ids is not None
        self.trace.epoch(epoch, first_step, self.data.ids[order])

    def before_step(self) -> None:
        """Keep what the forward changes: the RNG (dropout) and buffers (batch norm)."""
        if self.mode != "off":
            self._rng = torch.get_rng_state()
            self._buffers = [buffer.clone() for buffer in self.model.buffers()]

    def passes(
        self, step: int, epoch: int, loss: float, grad_norm: float, batch: torch.Tensor
    ) -> bool:
        """True when the update may be applied; on False it was not, and the guard acted
        (`stopped` then says whether the job must stop)."""
        if self.mode == "off" or finite(loss, grad_norm):
            return True
        with torch.no_grad():
            for buffer, before in zip(self.model.buffers(), self._buffers, strict=True):
                buffer.copy_(before)
        images, labels = self.data.images[batch], self.data.labels[batch]
        assert self.data.ids is not None
        ids = self.data.ids[batch]
        if self.bundle is None:  # the first bad update ("stop" meets only one)
            details = self._capture(step, epoch, loss, grad_norm, images, labels, ids)
            self._first_details = details
        else:
            rng = torch.get_rng_state()
            positions = find_bad_records(self.model, images, labels, self._rng)
            torch.set_rng_state(rng)  # the check replays with the step's RNG: training goes on
            details = {"suspect_samples": ids[positions].tolist()}
        self.optimizer.zero_grad(set_to_none=True)
        self.suspect_counts.update(details["suspect_samples"])
        self.record_bad(step, self._evidence(details, _what(loss, grad_norm)))
        return False

    # -- helpers --------------------------------------------------------------------------

    def _closing_evidence(self) -> Evidence:
        """The bundled update's bundle, localisation and suspects; the data problem as now."""
        return self._evidence(self._first_details, self.latest.what)

    def _capture(
        self,
        step: int,
        epoch: int,
        loss: float,
        grad_norm: float,
        images: torch.Tensor,
        labels: torch.Tensor,
        ids: torch.Tensor,
    ) -> dict[str, Any]:
        nonfinite = [
            name
            for name, p in self.model.named_parameters()
            if p.grad is not None and not torch.isfinite(p.grad).all()
        ]
        meta = {
            "step": step,
            "epoch": epoch,
            "learning_rate": self.optimizer.param_groups[0]["lr"],
            "loss": loss if math.isfinite(loss) else None,
            "grad_norm": grad_norm if math.isfinite(grad_norm) else None,
            "nonfinite": {"loss": not math.isfinite(loss), "gradients": nonfinite},
            "hyperparameters": self.config.hyperparameters(),
            "samples": {
                "ids": ids.tolist(),
                "shards": [self.data.shard_of(i) for i in ids.tolist()],
            },
        }
        folder = self.output_dir / "repro" / f"step-{step:06d}"
        self.bundle = write_bundle(
            folder,
            model=self.model,
            optimizer=self.optimizer,
            images=images,
            labels=labels,
            sample_ids=ids,
            torch_rng=self._rng,
            shuffle=self.shuffle,
            meta=meta,
        )
        result = replay(folder)  # from disk: proves the bundle reproduces, and localises
        store.write_json(folder / "replay.json", result.to_json())  # outside the manifest
        print(result.summary(), flush=True)
        return {
            "bundle": str(folder.resolve()),
            "localisation": result.localisation,
            "reproduced": result.reproduced,
            "suspect_samples": result.suspect_samples,
        }

    def _evidence(self, details: dict[str, Any], what: str) -> Evidence:
        """The status's keys and notes: the bundle, the first non-finite module, the
        suspect samples of `details`, and the data problem (samples failing repeatedly)."""
        repeated = sorted(i for i, n in self.suspect_counts.items() if n >= 2)
        data_problem = None
        if repeated:
            data_problem = {
                "samples": repeated,
                "shards": [self.data.shard_of(i) for i in repeated],
                "failures": max(self.suspect_counts[i] for i in repeated),
            }
        suspects = details.get("suspect_samples", [])
        notes = []
        if self.bundle is not None:
            notes.append(f"repro bundle {self.bundle} (remedy repro)")
        if details.get("localisation"):
            notes.append(f"first non-finite: {details['localisation']}")
        if data_problem:
            notes.append(f"samples {repeated} failed repeatedly: bad records")
        elif suspects:
            notes.append(f"the update is finite without samples {suspects}")
        keys = {
            "bundle": None if self.bundle is None else str(self.bundle.resolve()),
            "localisation": details.get("localisation"),
            "suspect_samples": suspects,
            "suspect_shards": [self.data.shard_of(i) for i in suspects],
            "data_problem": data_problem,
        }
        return Evidence(what=what, notes=tuple(notes), keys=keys)


def _what(loss: float, grad_norm: float) -> str:
    """What was not finite, for the status text."""
    parts = [] if math.isfinite(loss) else [f"loss {loss}"]
    if not math.isfinite(grad_norm):
        parts.append("non-finite gradients")
    return " and ".join(parts)
