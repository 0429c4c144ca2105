"""The NaN guard: check each step before its update, and trace which samples fed it.

Before the optimizer applies an update the job asks `guard.passes(...)`: the loss and the
total gradient norm (summed in float64, so finite exactly when every gradient is) must be
finite. Both are computed for the log anyway, so the check itself is two float tests; per
step the guard also keeps torch's RNG state and the model's buffers (batch-norm statistics,
which the failing forward has already moved). When a step fails:
  - the update is skipped and the buffers restored: the model stays as it was, finite;
  - a repro bundle (training/bundle.py) is written under OUTPUT_DIR/repro/step-NNNNNN and
    replayed at once (training/replay.py) to name the first non-finite module and any bad
    records; the finding is written as rule status NonFiniteGradient.json in the rule
    evaluator's shape, plus bundle, localisation and suspect samples, into the folder
    $REMEDY_RULE_STATUS_DIR names (set by the backend; OUTPUT_DIR/rule_status without it);
  - nan_guard "stop": the job stops (stop file + result "Stopped"), like a StopTraining action;
    nan_guard "skip": it goes on, counting bad batches, and stops after MAX_SKIPPED_BATCHES.
    Samples that are the bad records of two or more skipped batches are a data problem.

Contact tracing: OUTPUT_DIR/trace/epoch-NNNN.safetensors holds each epoch's order as sample
ids (int32), and trace/index.jsonl the step it starts at, so any step's batch can be named
later (batch_of_step) for the cost of one small file per epoch.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from remedy.debugger import store
from remedy.debugger.modes import ModeKeys
from remedy.debugger.status import RuleStatus, RuleStatusRecord, status_path
from remedy.state_schema import Hyperparameters
from remedy.state_schema.job_env import RULE_STATUS_DIR, RULE_STATUS_DIR_ENV, STOP_FILE_ENV
from remedy.training.bundle import write_bundle
from remedy.training.data import DataSplit
from remedy.training.replay import find_bad_records, replay

RULE_NAME = "NonFiniteGradient"
MAX_SKIPPED_BATCHES = 20  # "skip" gives up after this many: the run is not training any more
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


class NanGuard:
    def __init__(
        self,
        config: Hyperparameters,
        output_dir: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        train_data: DataSplit,
        shuffle: torch.Generator,
    ) -> None:
        self.config, self.mode = config, config.nan_guard
        self.output_dir = output_dir
        self.model, self.optimizer = model, optimizer
        self.data, self.shuffle = train_data, shuffle
        self.stop = False  # the loop ends after this step
        self.bad_batches = 0
        self.suspect_counts: Counter[int] = Counter()
        self.bundle: Path | None = None
        self.trace = ContactTrace(output_dir, config.batch_size)
        self.rule_status_dir = rule_status_dir(output_dir)
        self._rng = torch.get_rng_state()
        self._buffers: list[torch.Tensor] = []
        self._first_details: dict[str, Any] = {}  # of the bundled step: the report's end

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
        """True when the update may be applied; on False it was not, and the guard acted."""
        if self.mode == "off" or (math.isfinite(loss) and math.isfinite(grad_norm)):
            return True
        with torch.no_grad():
            for buffer, before in zip(self.model.buffers(), self._buffers, strict=True):
                buffer.copy_(before)
        self.bad_batches += 1
        images, labels = self.data.images[batch], self.data.labels[batch]
        assert self.data.ids is not None
        ids = self.data.ids[batch]
        if self.bundle is None or self.mode == "stop":
            details = self._capture(step, epoch, loss, grad_norm, images, labels, ids)
            self._first_details = details
        else:
            rng = torch.get_rng_state()
            positions = find_bad_records(self.model, images, labels, self._rng)
            torch.set_rng_state(rng)  # the check replays with the step's RNG: training goes on
            details = {"suspect_samples": ids[positions].tolist()}
        self.optimizer.zero_grad(set_to_none=True)
        self.suspect_counts.update(details["suspect_samples"])
        if self.mode == "stop" or self.bad_batches >= MAX_SKIPPED_BATCHES:
            self.stop = True
            self._report(RuleStatus.ISSUES_FOUND, step, details)
            self._request_stop()
        else:  # a final word at once: a job that dies later must not leave a rule pending
            self._report(RuleStatus.NO_ISSUES_FOUND, step, details, going_on=True)
        return False

    def close(self, step: int) -> None:
        """At the end of a "skip" run that met bad batches: a final, non-stopping status."""
        if self.bad_batches and not self.stop:
            self._report(RuleStatus.NO_ISSUES_FOUND, step, self._first_details)

    # -- helpers --------------------------------------------------------------------------

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

    def _report(
        self, status: RuleStatus, step: int, details: dict[str, Any], going_on: bool = False
    ) -> None:
        repeated = sorted(i for i, n in self.suspect_counts.items() if n >= 2)
        data_problem = None
        if repeated:
            data_problem = {
                "samples": repeated,
                "shards": [self.data.shard_of(i) for i in repeated],
                "failures": max(self.suspect_counts[i] for i in repeated),
            }
        suspects = details.get("suspect_samples", [])
        if status is RuleStatus.ISSUES_FOUND:
            what = "update skipped, weights kept finite, job stopped"
        elif going_on:
            what = "update skipped, training goes on (nan_guard skip)"
        else:
            what = "run finished, those updates skipped (nan_guard skip)"
        text = f"{self.bad_batches} non-finite step(s), latest at step {step}: {what}"
        if self.bundle is not None:
            text += f"; repro bundle {self.bundle} (remedy repro)"
        if details.get("localisation"):
            text += f"; first non-finite: {details['localisation']}"
        if data_problem:
            text += f"; samples {repeated} failed repeatedly: bad records"
        elif suspects:
            text += f"; the step is finite without samples {suspects}"
        write_rule_status(
            self.rule_status_dir,
            status,
            step,
            text,
            bundle=None if self.bundle is None else str(self.bundle.resolve()),
            localisation=details.get("localisation"),
            suspect_samples=suspects,
            suspect_shards=[self.data.shard_of(i) for i in suspects],
            bad_batches=self.bad_batches,
            data_problem=data_problem,
        )

    def _request_stop(self) -> None:
        request_stop()


def write_rule_status(
    folder: Path,
    status: RuleStatus,
    step: int,
    details: str,
    *,
    bundle: str | None = None,
    localisation: Any = None,
    suspect_samples: list[int] | None = None,
    suspect_shards: list[Any] | None = None,
    bad_batches: int = 1,
    data_problem: dict[str, Any] | None = None,
) -> Path:
    """The guard's finding as rule status NonFiniteGradient.json in `folder`: the rule
    evaluator's shape (debugger.status) plus the guard's own keys. Returns its path."""
    record = RuleStatusRecord(
        name=RULE_NAME,
        rule=RULE_NAME,
        status=status,
        details=details,
        step=step,
        mode=ModeKeys.TRAIN,
        steps_evaluated=step,
        last_modified=store.utc_now_iso(),
    )
    path = status_path(folder, RULE_NAME)  # the evaluator's shape
    extra = {
        "bundle": bundle,
        "localisation": localisation,
        "suspect_samples": suspect_samples or [],
        "suspect_shards": suspect_shards or [],
        "bad_batches": bad_batches,
        "data_problem": data_problem,
    }
    store.write_json(path, record.to_json() | extra)
    return path


def request_stop(requested_by: str = "nan_guard") -> None:
    """Create $REMEDY_STOP_FILE (when set) as a StopTraining action does: the backend and
    the rule evaluator, which watch it, stop with the job."""
    stop_file = os.environ.get(STOP_FILE_ENV)
    if stop_file and not Path(stop_file).exists():
        request = {"requested_by": requested_by, "time": datetime.now(UTC).isoformat()}
        store.write_json(stop_file, request)
