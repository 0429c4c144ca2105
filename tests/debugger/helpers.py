"""Shared pieces for debugger tests: a tiny real model and a real training loop."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from remedy.debugger import Hook, ModeKeys, RuleStatusRecord, SaveConfig, create_trial, store
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig
from remedy.debugger.store import StepHeader

REPO = Path(__file__).resolve().parents[2]


def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (benchmarks is no package): tests reuse its runs."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def evaluate(store_dir: Path, rule: str, **params: Any) -> RuleStatusRecord:
    """Run the evaluator over a finished store with one rule; its final status."""
    with tempfile.TemporaryDirectory(prefix="status-") as folder:  # statuses: only while judging
        status_dir = Path(folder)
        config = RuleConfig(name=rule, rule=rule, parameters=params)
        trial = create_trial(store_dir)
        evaluator = RuleEvaluator(trial, [config], status_dir, log=lambda line: None)
        evaluator.start()
        assert evaluator.poll()  # the store has ended: every rule is final after one poll
        return evaluator.statuses[rule]


EXPLODING_LR = 1e4  # makes the tiny MLP's gradients non-finite within a few steps
HEALTHY_LR = 0.01


@dataclass
class TrainLog:
    """What the test itself saw, to compare with what the hook wrote."""

    losses: list[float] = field(default_factory=list)
    grads: list[dict[str, np.ndarray]] = field(default_factory=list)  # per TRAIN step
    weights_before: list[dict[str, np.ndarray]] = field(default_factory=list)
    eval_losses: list[float] = field(default_factory=list)
    stopped_by_file: bool = False


def train(
    hook: Hook,
    steps: int,
    lr: float = HEALTHY_LR,
    eval_steps: int = 0,
    seed: int = 0,
    stop_file: Path | None = None,
    max_seconds: float | None = None,
) -> TrainLog:
    """Train a 4-8-1 MLP with SGD on a fixed batch, recording grads/weights as it goes.

    With stop_file: runs until that file appears (or max_seconds), like a job that obeys
    the evaluator's StopTraining action.
    """
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    criterion = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(optimizer)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    log = TrainLog()
    started = time.monotonic()
    step = 0
    while True:
        if stop_file is not None:
            if stop_file.exists():
                log.stopped_by_file = True
                break
            if max_seconds is not None and time.monotonic() - started > max_seconds:
                break
        elif step >= steps:
            break
        model.train()
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        log.losses.append(loss.item())
        log.grads.append({n: p.grad.clone().numpy() for n, p in model.named_parameters()})
        log.weights_before.append(
            {n: p.detach().clone().numpy() for n, p in model.named_parameters()}
        )
        optimizer.step()
        step += 1
    model.eval()
    with torch.no_grad():
        for _ in range(eval_steps):
            log.eval_losses.append(criterion(model(x), y).item())
    return log


def every_step_hook(out_dir: Path, interval: int = 1, **kwargs: Any) -> Hook:
    """Losses every step; gradients, weights and biases every `interval` steps."""
    every = SaveConfig(save_interval=interval)
    return Hook(
        out_dir,
        collections={
            "losses": SaveConfig(1),
            "gradients": every,
            "weights": every,
            "biases": every,
        },
        **kwargs,
    )


def one_file_per_step(monkeypatch: Any) -> None:
    """The hook's writer writes each small step to a file of its own, not in packs (as it
    did before packs): for tests of what damage to one step's file does."""
    from remedy.debugger import writer

    monkeypatch.setattr(writer, "SMALL_BATCH", 1)


def batched_from_the_first_step(monkeypatch: Any) -> None:
    """The hook's writer batches small steps from a job's first step (not after its first
    EAGER_STEPS, which it hands over one by one): for tests of the batching itself."""
    from remedy.debugger import writer

    monkeypatch.setattr(writer, "EAGER_STEPS", 0)


def write_step(
    root: Path,
    mode_step: int,
    tensors: Mapping[str, np.ndarray],
    mode: ModeKeys = ModeKeys.TRAIN,
    global_step: int | None = None,
) -> None:
    """A step file written directly through the store (no torch)."""
    header = StepHeader(
        mode=mode,
        mode_step=mode_step,
        global_step=mode_step if global_step is None else global_step,
        wall_time=time.time(),
        tensor_names=tuple(sorted(tensors)),
    )
    store.write_step(root, header, tensors)


def write_pack(
    root: Path, steps: Mapping[int, Mapping[str, np.ndarray]], mode: ModeKeys = ModeKeys.TRAIN
) -> Path:
    """A pack of several steps written directly through the store (no torch)."""
    numbers = [(step, step, time.time()) for step in steps]
    return store.write_pack(root, mode, numbers, list(steps.values()))


def new_store(root: Path, collections: Mapping[str, list[str]] | None = None) -> Path:
    store.write_meta(root, "numpy", np.__version__)
    store.write_collections(
        root,
        {
            name: {"tensor_names": names, "save_config": SaveConfig().to_dict()}
            for name, names in (collections or {}).items()
        },
    )
    return root


def start_evaluator(
    store_dir: Path,
    rules: list[dict[str, Any]],
    tmp_path: Path,
    stop_file: Path | None = None,
    poll_interval: float = 0.05,
) -> tuple[subprocess.Popen[str], Path]:
    rules_file = tmp_path / "rules.json"
    rules_file.write_text(json.dumps(rules))
    status_dir = tmp_path / "status"
    cmd = [
        sys.executable,
        "-m",
        "remedy.debugger.evaluator",
        "--trial",
        str(store_dir),
        "--rules",
        str(rules_file),
        "--status-dir",
        str(status_dir),
        "--poll-interval",
        str(poll_interval),
    ]
    if stop_file is not None:
        cmd += ["--stop-file", str(stop_file)]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return proc, status_dir


def read_status(status_dir: Path, name: str) -> dict[str, Any] | None:
    return store.read_json(status_dir / f"{name}.json")


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll until predicate() holds; fail the test after `timeout` (a liveness bound)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


def first_nonfinite(log: TrainLog, only_nan: bool = False) -> tuple[int, str]:
    """First TRAIN step with a non-finite gradient and the first such name (sorted, as
    the rule checks them), from the test's own record of param.grad."""
    for step, grads in enumerate(log.grads):
        for name in sorted(grads):
            value = grads[name]
            bad = np.isnan(value).any() if only_nan else not np.isfinite(value).all()
            if bad:
                return step, f"gradient/{name}"
    raise AssertionError("training never produced a non-finite gradient")
