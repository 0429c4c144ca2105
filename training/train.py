"""The training job: python -m remedy.training.train --hyperparameters FILE --output-dir DIR

FILE is a JSON object of the training contract (remedy.state_schema.Hyperparameters, what
RunSpec.hyperparameters() writes); values may be text, as the cloud service passes them. An
unknown key or a bad value ends the job with exit status 2 and an error naming FILE and the
field, before anything is written; so does a bad value of a variable below, naming it.

Trains the configurable ResNet with SGD + momentum on CIFAR-10 or synthetic images and
writes into DIR the files every job writes (training/progress.py, as the launcher does for a
script; JSON written to a temporary file, then renamed into place):
  progress.json   after every step (steps closer than 50 ms share one write): step,
                  epoch, loss, accuracy, grad_norm (total L2 norm of the gradients),
                  learning_rate, wall_time, grad_agreement_1 / grad_agreement_5 and
                  update_ratio every few steps (training/gradient_agreement.py,
                  training/update_ratio.py), steps_per_epoch,
                  total_steps, start_step,
                  first_loss (the loss of this launch's first step; null when it was not
                  finite), first_losses /
                  last_losses (the first and latest finite losses of this launch, whose
                  windows "the model trained" is judged by: state_schema/loss_windows.py)
  metrics.jsonl   one line per step ("type": "step") and per epoch ("type": "epoch"),
                  flushed with progress.json
  checkpoints/    every checkpoint_every_epochs epochs (epoch-NNNN) and, with
                  checkpoint_every_steps, mid-epoch too (step-NNNNNNNNN, the
                  keep_checkpoints most recent kept); safetensors + JSON
                  (--checkpoint-dir DIR puts them in DIR instead)
  result.json     at the end: status Completed or Stopped, steps, epochs_completed,
                  final_loss / final_accuracy (last test evaluation), final_train_loss,
                  skipped_steps (batches passed over by skip_steps)
Non-finite numbers (NaN, +-inf) are written as null so every file stays valid JSON.
wall_time is seconds since the Unix epoch. Accuracies are fractions in [0, 1].

With nan_guard "stop" (the default) or "skip", the NaN guard (training/guard.py, the policy
of training/nan_guard.py that the launcher's guard follows too) checks the loss and
gradients before each update: a non-finite update is never applied; it leaves a repro
bundle in repro/ and the rule status NonFiniteGradient.json, then stops the job ("stop") or
skips the update ("skip"); trace/ names every step's samples. With nan_guard "off" a
diverging run keeps training until it is stopped from outside. Spotting slower trouble is
the tensor debugger's job.

The environment says where the backend wants things and how it will ask the job to stop:
  REMEDY_DEBUGGER_CONFIG   a debugger config file: the tensor debugger's hook is active
  REMEDY_STOP_FILE         a stop request is this file appearing, or SIGTERM: the current
                           step finishes, the hook is closed, result.json says "Stopped" and
                           the process exits 0 (training/stopping.py, as for a script: a
                           SIGTERM not honoured within its grace, mid-evaluation, stops there)
  REMEDY_MAX_UPDATES       a probe's bound: stop so after this many updates of this launch
  REMEDY_RULE_STATUS_DIR   where the NaN guard writes its rule status (default
                           DIR/rule_status), the folder the backend reads rule statuses from
  REMEDY_TORCH_THREADS     torch's threads
  CUDA_VISIBLE_DEVICES     the GPUs the job may use (the local backend gives each job its
                           own): with device "auto" it trains on the first one, if any
"""

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from remedy.debugger import Hook, ModeKeys
from remedy.state_schema import Hyperparameters, PayloadError, load_hyperparameters
from remedy.training.build import build_model_and_optimizer, total_grad_norm
from remedy.training.checkpoint import (
    prune_step_checkpoints,
    save_checkpoint,
    step_checkpoint_name,
)
from remedy.training.data import DataSplit, load_cifar10, make_synthetic
from remedy.training.environment import JobEnvironment, JobEnvironmentError
from remedy.training.gradient_agreement import GradientAgreement
from remedy.training.guard import NanGuard
from remedy.training.progress import ProgressFiles, finite_or_none
from remedy.training.rule_tensors import save_accuracy, save_classification
from remedy.training.schedule import learning_rate_for_epoch
from remedy.training.stopping import StopRequest, StopTraining, UpdateBound
from remedy.training.update_ratio import UpdateRatio
from remedy.training.warm_start import restore

LOG_EVERY = 10  # steps between progress lines on stdout
EVAL_BATCH_SIZE = 500


def training_device(choice: str) -> torch.device:
    """auto: the job's first visible CUDA GPU (the backend picks which through
    CUDA_VISIBLE_DEVICES; under torchrun each process takes its LOCAL_RANK's), else the CPU."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "not set")
        raise DeviceError(
            f"device is 'cuda' but torch sees no CUDA GPU (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'none'}, CUDA_VISIBLE_DEVICES={visible})"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device("cuda", local_rank % torch.cuda.device_count())


class DeviceError(Exception):
    """The device the hyperparameters ask for is not there."""


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def load_data(config: Hyperparameters) -> tuple[DataSplit, DataSplit]:
    train_samples, test_samples = config.num_train_samples, config.num_test_samples
    if config.dataset == "cifar10":
        assert config.data_path is not None  # the contract requires it for cifar10
        return load_cifar10(config.data_path, train_samples, test_samples)
    assert train_samples is not None and test_samples is not None  # synthetic defaults
    return make_synthetic(train_samples, test_samples, seed=config.seed)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    criterion: nn.Module,
    data: DataSplit,
    device: torch.device,
    hook: Hook | None = None,
) -> tuple[float, float]:
    """Mean loss and accuracy over the test split (each batch an EVAL step of the hook)."""
    total_loss, correct = 0.0, 0
    for images, labels in zip(
        data.images.split(EVAL_BATCH_SIZE), data.labels.split(EVAL_BATCH_SIZE), strict=True
    ):
        images, labels = images.to(device), labels.to(device)
        logits = model(images)
        save_classification(hook, logits, labels)
        total_loss += criterion(logits, labels).item() * len(labels)
        correct += (logits.argmax(dim=1) == labels).sum().item()
    return total_loss / len(data), correct / len(data)


@dataclass
class Job:
    """One launch's parts, made once by setup() and used by every step and epoch end."""

    config: Hyperparameters
    model: nn.Module
    optimizer: torch.optim.Optimizer
    criterion: nn.Module
    train_data: DataSplit
    test_data: DataSplit
    device: torch.device
    hook: Hook | None  # the tensor debugger's, when the backend asked for it
    start_epoch: int  # where this launch goes on from (a warm start's, else 0)
    start_step: int

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train_data) / self.config.batch_size)

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.config.num_epochs


def setup(config: Hyperparameters, device: torch.device) -> Job:
    """Data, model, optimizer (restored from a warm start's checkpoint) and the hook."""
    torch.manual_seed(config.seed)
    train_data, test_data = load_data(config)
    if config.exclude_samples:  # bad records named by the NaN guard (drop_bad_samples)
        train_data = train_data.without(config.exclude_samples)
    model, optimizer = build_model_and_optimizer(config)
    model.to(device)  # in place: the optimizer keeps its parameters; a warm start follows
    criterion = nn.CrossEntropyLoss()
    start_epoch, start_step = warm_start(config, model, optimizer)
    hook = Hook.from_env()
    if hook is not None:
        hook.register_module(model)
        hook.register_loss(criterion)
        hook.register_optimizer(optimizer)
    job = Job(config, model, optimizer, criterion, train_data, test_data, device, hook,
              start_epoch, start_step)  # fmt: skip
    print(
        f"training {config.base_job_name}: ResNet-{config.depth} width {config.width} "
        f"{config.activation} batch_norm={bool(config.add_batch_norm)} on {describe(device)} | "
        f"{len(train_data)} train / {len(test_data)} test images | "
        f"{config.num_epochs} epochs x {job.steps_per_epoch} steps | "
        f"debugger {'on' if hook is not None else 'off'}",
        flush=True,
    )
    return job


def warm_start(
    config: Hyperparameters, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, int]:
    """The (epoch, step) this launch goes on from: its init_checkpoint's, restored into the
    model and optimizer, else (start_epoch, 0)."""
    if not config.init_checkpoint:
        return config.start_epoch, 0
    hyper = {"weight_decay": config.weight_decay}
    if config.optimizer == "momentum":
        hyper["momentum"] = config.momentum
    warm = restore(config.init_checkpoint, model, optimizer, hyper)
    print(
        f"warm start from {config.init_checkpoint}: epoch {warm.epoch}, step {warm.step}, "
        f"optimizer state {'restored' if warm.optimizer_restored else 'fresh'}",
        flush=True,
    )
    return warm.epoch, warm.step


def train_step(
    job: Job, batch: torch.Tensor, step: int, epoch: int, guard: NanGuard
) -> tuple[float, float, float]:
    """One update on the samples `batch` (step `step` + 1): (loss, gradient norm before
    clipping, batch accuracy). A non-finite loss or gradient is never applied: the guard
    keeps the weights clean, writes a repro bundle, and stops the job or skips the batch."""
    images = job.train_data.images[batch].to(job.device, non_blocking=True)
    labels = job.train_data.labels[batch].to(job.device, non_blocking=True)
    guard.before_step()
    logits = job.model(images)
    loss = job.criterion(logits, labels)
    save_classification(job.hook, logits.detach(), labels)  # before the update
    job.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = total_grad_norm(job.model)
    train_loss = loss.item()
    if guard.passes(step + 1, epoch, train_loss, grad_norm, batch):
        if job.config.grad_clip_norm is not None:
            nn.utils.clip_grad_norm_(job.model.parameters(), job.config.grad_clip_norm)
        job.optimizer.step()
    accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return train_loss, grad_norm, accuracy


def end_epoch(job: Job, epoch: int) -> tuple[float | None, float]:
    """The test evaluation at an epoch's end: (test loss, None if not finite; accuracy)."""
    job.model.eval()
    if job.hook is not None:
        job.hook.set_mode(ModeKeys.EVAL)
    loss_value, test_accuracy = evaluate(
        job.model, job.criterion, job.test_data, job.device, job.hook
    )
    save_accuracy(job.hook, test_accuracy)
    return finite_or_none(loss_value), test_accuracy


def train(
    config: Hyperparameters,
    output_dir: Path,
    device: torch.device | None = None,
    checkpoint_dir: Path | None = None,
    env: JobEnvironment | None = None,
) -> dict[str, Any]:
    device = training_device(config.device) if device is None else device
    env = JobEnvironment.from_environ() if env is None else env
    stop = StopRequest(env.stop_file).install()  # first: an early SIGTERM is a clean stop too
    progress = ProgressFiles(output_dir)  # the files of every job (training/progress.py)
    say = partial(print, flush=True)
    bound = UpdateBound(env.max_updates, env.continue_file, stop, say, progress.flush)
    if env.torch_threads is not None:
        torch.set_num_threads(env.torch_threads)
    checkpoints = checkpoint_dir or output_dir / "checkpoints"
    job: Job | None = None
    guard: NanGuard | None = None
    step, epochs_completed, train_loss = 0, config.start_epoch, math.nan
    skipped = 0  # batches passed over by skip_steps
    test_loss: float | None = None
    test_accuracy: float | None = None
    stopped_by: str | None = None
    started = time.time()
    # A stop during the setup (a SIGTERM's grace ends while data loads) is a stop too.
    try:
        job = setup(config, device)
        model, optimizer, hook = job.model, job.optimizer, job.hook
        steps_per_epoch, total_steps = job.steps_per_epoch, job.total_steps
        progress.start_step = step = job.start_step
        epochs_completed = job.start_epoch
        progress.known = {"steps_per_epoch": steps_per_epoch, "total_steps": total_steps}
        shuffle = torch.Generator().manual_seed(config.seed)
        for _ in range(job.start_epoch):  # a warm start sees the data order a full run would
            torch.randperm(len(job.train_data), generator=shuffle)
        guard = NanGuard(config, output_dir, model, optimizer, job.train_data, shuffle)
        agreement, update_ratio = GradientAgreement(), UpdateRatio()
        # A warm start from a step checkpoint goes on mid-epoch: the batches of its epoch
        # that were trained already are drawn (the data order stays the full run's) and
        # passed over.
        done_in_epoch = job.start_step - job.start_epoch * steps_per_epoch
        done_in_epoch = min(max(done_in_epoch, 0), steps_per_epoch)
        for epoch in range(job.start_epoch, config.num_epochs):
            lr = learning_rate_for_epoch(
                epoch, config.warmup_learning_rate, config.learning_rate, config.warmup_epochs
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            model.train()
            if hook is not None:
                hook.set_mode(ModeKeys.TRAIN)
            order = torch.randperm(len(job.train_data), generator=shuffle)
            passed_over, done_in_epoch = done_in_epoch, 0
            guard.new_epoch(epoch, step + 1 - passed_over, order)  # which samples, which step
            for batch in order.split(config.batch_size)[passed_over:]:
                if window := next((w for w in config.skip_steps if step + 1 in w), None):
                    # Drawn but not trained on (a rollback past a spike): the steps after
                    # it see the very batches they would have seen.
                    if not skipped or step + 1 == window.first:
                        print(f"skip_steps: passing over steps {window.first}-{window.last}")
                    step += 1
                    skipped += 1
                    continue

                train_loss, grad_norm, accuracy = train_step(job, batch, step, epoch, guard)
                step += 1
                every = config.checkpoint_every_steps
                if every and step % every == 0 and not guard.stopped:
                    name = step_checkpoint_name(step)
                    save_checkpoint(
                        checkpoints, model, optimizer, epoch=epoch, step=step, name=name
                    )
                    prune_step_checkpoints(checkpoints, config.keep_checkpoints)

                # what the monitor reads
                now = time.time()
                progress.step(
                    step, train_loss, epoch=epoch, accuracy=accuracy, grad_norm=grad_norm,
                    learning_rate=lr, wall_time=now, **agreement.see(step, model.parameters),
                    **update_ratio.see(step, model.parameters),
                )  # fmt: skip
                if step == 1 or step % LOG_EVERY == 0 or step % steps_per_epoch == 0:
                    print(
                        f"step {step}/{total_steps} epoch {epoch} loss {train_loss:.4f} "
                        f"accuracy {accuracy:.3f} lr {lr:g} ({(now - started) / step:.3f} s/step)",
                        flush=True,
                    )

                # a stop asked for from outside, by the guard, or by a probe's bound
                if guard.stopped:
                    stop.request("the NaN guard")
                bound.reached(step - job.start_step)
                stop.check_file()
                stop.raise_if_requested()

            # end of epoch: test evaluation, then maybe a checkpoint
            test_loss, test_accuracy = end_epoch(job, epoch)
            epochs_completed = epoch + 1
            progress.add(
                {"type": "epoch", "epoch": epoch, "step": step, "test_loss": test_loss,
                 "test_accuracy": test_accuracy, "wall_time": time.time()}
            )  # fmt: skip
            shown = "nan" if test_loss is None else f"{test_loss:.4f}"
            print(
                f"epoch {epoch} done: step {step} test_loss {shown} "
                f"test_accuracy {test_accuracy:.3f} ({time.time() - started:.1f} s)",
                flush=True,
            )
            every = config.checkpoint_every_epochs
            if every and epochs_completed % every == 0:
                save_checkpoint(checkpoints, model, optimizer, epoch=epochs_completed, step=step)
    except StopTraining as request:
        stopped_by = request.reason
        print(f"stop requested ({stopped_by}): stopping after step {step}", flush=True)
    finally:
        stop.close()  # no StopTraining from here on: the results are being written

    if guard is not None:
        guard.close(step)
    if job is not None and job.hook is not None:
        job.hook.close()
    result = progress.result(
        "Stopped" if stopped_by else "Completed",
        step,
        epochs_completed=epochs_completed,
        final_loss=test_loss,
        final_accuracy=test_accuracy,
        final_train_loss=train_loss,
        skipped_steps=skipped,
    )
    progress.close()
    assert result is not None  # only a script writing its own files keeps result.json
    print(f"{result['status']}: {json.dumps(result)}", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hyperparameters", required=True, help="JSON file of hyperparameters (the contract)"
    )
    parser.add_argument("--output-dir", required=True, help="folder for progress and results")
    parser.add_argument(
        "--checkpoint-dir",
        help="folder for checkpoints (default: OUTPUT_DIR/checkpoints; a cloud job's is the "
        "one the service syncs to the bucket)",
    )
    args = parser.parse_args(argv)
    try:
        config = load_hyperparameters(args.hyperparameters)
    except PayloadError as exc:  # names the file and every bad field
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        device = training_device(config.device)
    except DeviceError as exc:  # before anything is written, as a bad field
        print(f"error: {args.hyperparameters}: device: {exc}", file=sys.stderr)
        return 2
    try:
        env = JobEnvironment.from_environ()
    except JobEnvironmentError as exc:  # a backend's variable: named, before anything is written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    checkpoints = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    train(config, Path(args.output_dir), device, checkpoints, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
