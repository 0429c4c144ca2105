"""False alarms of the built-in rules on healthy runs of the built-in job.

    .venv/bin/python benchmarks/rule_false_alarms.py [--only NAME ...] [--keep DIR]

Trains a few tiny but healthy configurations of the built-in ResNet (ELU and ReLU, with and
without batch norm; synthetic images; `python -m remedy.training.train`, one process each,
1 torch thread) with every collection the rules read saved (the capture a job gets when it
runs all of them: losses every step, gradients, weights, biases, activations and inputs
every SAVE_INTERVAL steps and at the first 10, labels, predictions and the test accuracy),
then evaluates every registered rule that has no required parameter with its defaults
(the evaluator over the finished store, as `remedy check` does). Prints one row per rule:
IssuesFound on how many healthy runs, and the first finding. A healthy run is one that
reaches MIN_ACCURACY test accuracy; every rule should stay quiet on all of them.

tests/debugger/test_rule_false_alarms.py runs the same zoo and asserts no rule fires.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remedy.debugger import RULES, RuleStatus, create_trial  # noqa: E402
from remedy.debugger.capture import capture_config  # noqa: E402
from remedy.debugger.evaluator import RuleEvaluator  # noqa: E402
from remedy.debugger.rule_config import RuleConfig  # noqa: E402
from remedy.debugger.rules.registry import rules_with_defaults  # noqa: E402

SAVE_INTERVAL = 5
# A healthy run of these tiny configurations: ReLU+BN reached 0.980 when the table below
# was measured, 0.966 on 2026-11-27, 0.950 on another machine's CPU on 2026-11-28 (its
# floats differ: the same seed, another run), the others 0.976-0.990. These tiny runs are
# chaotic from seed to seed (that day ReLU+BN 0.118 with seed 2, ELU+BN 0.90-0.99 over 0-2):
# a healthy run is one that learned its ten classes well, not one of a given figure.
MIN_ACCURACY = 0.94

# Tiny but healthy: ResNet-8 of width 8, 5,000 synthetic images, batch 64 (79 steps an
# epoch), 5 epochs, the seed's schedule (a warmup epoch, then the learning rate; the loss
# jumps when warmup ends) and He init. With batch norm the seed's SGD + momentum; without
# it Adam (SGD at these sizes takes many more epochs to leave the initial plateau). Each
# reaches >= 97 % test accuracy in about half a minute on one core.
_BASE: dict[str, Any] = {
    "depth": 8,
    "width": 8,
    "batch_size": 64,
    "train_samples": 5000,
    "test_samples": 500,
    "num_epochs": 5,
    "checkpoint_every_epochs": 0,
    "device": "cpu",
}
_SGD = {"warmup_learning_rate": 0.01, "learning_rate": 0.1}
_ADAM = {"optimizer": "adam", "warmup_learning_rate": 0.001, "learning_rate": 0.004}

HEALTHY: dict[str, dict[str, Any]] = {
    "elu_bn": _BASE | _SGD | {"activation": "elu", "add_batch_norm": 1},
    "relu_bn": _BASE | _SGD | {"activation": "relu", "add_batch_norm": 1, "seed": 1},
    "elu": _BASE | _ADAM | {"activation": "elu", "add_batch_norm": 0},
    "relu": _BASE | _ADAM | {"activation": "relu", "add_batch_norm": 0, "num_epochs": 7},
}
# Not yet tuned to 97 %: ReLU without batch norm reaches 0.94 in 7 epochs (Adam); it is
# trained and shown (no rule fires on it either), and the test leaves it out until a
# config of it is healthy.
UNTUNED = {"relu"}

# Activations are the big tensors (a 64 x 8 x 32 x 32 block is 2 MB): saved at the first
# 10 steps (PoorWeightInitialization) and every ACTIVATION_INTERVAL TRAIN steps, not in the
# evaluation's batches of 500.
ACTIVATION_INTERVAL = 50


@dataclass
class Trained:
    name: str
    store: Path
    test_accuracy: float | None
    steps: int


@dataclass
class Verdict:
    rule: str
    fired: dict[str, str] = field(default_factory=dict)  # run -> finding
    errors: dict[str, str] = field(default_factory=dict)  # run -> Error details


def train(name: str, hyperparameters: dict[str, Any], folder: Path) -> Trained:
    """One healthy run of the built-in job, capturing what every default rule reads."""
    folder.mkdir(parents=True, exist_ok=True)
    rules = [RULES[rule].check_parameters({}) for rule in rules_with_defaults()]
    config = capture_config(rules, str(folder / "tensors"), SAVE_INTERVAL)
    never = {"save_interval": 10**9, "start_step": 10**9, "save_steps": []}
    config["collections"]["activations"] |= {
        "save_interval": ACTIVATION_INTERVAL,
        "modes": {"EVAL": never},
    }
    (folder / "debugger.json").write_text(json.dumps(config))
    (folder / "hyperparameters.json").write_text(json.dumps(hyperparameters))
    env = os.environ | {
        "REMEDY_DEBUGGER_CONFIG": str(folder / "debugger.json"),
        "REMEDY_TORCH_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    command = [sys.executable, "-m", "remedy.training.train"]
    command += ["--hyperparameters", str(folder / "hyperparameters.json")]
    command += ["--output-dir", str(folder / "output")]
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    result = json.loads((folder / "output" / "result.json").read_text())
    return Trained(name, folder / "tensors", result["final_accuracy"], result["steps"])


def evaluate(store: Path, rules: list[str]) -> dict[str, tuple[RuleStatus, str]]:
    """Every rule with its defaults over a finished store: {rule: (status, details)}."""
    configs = [RuleConfig(name=rule, rule=rule) for rule in rules]
    with tempfile.TemporaryDirectory(prefix="status-") as folder:  # statuses: only while judging
        status_dir = Path(folder)
        evaluator = RuleEvaluator(create_trial(store), configs, status_dir, log=lambda line: None)
        evaluator.start()
        evaluator.poll()
        return {
            rule: (record.status, record.details) for rule, record in evaluator.statuses.items()
        }


def run_zoo(
    folder: Path, only: list[str] | None = None, trained_already: bool = False
) -> tuple[list[Trained], dict[str, Verdict]]:
    """Train each configuration into folder/NAME (or, with trained_already, read the runs
    a --keep left there) and evaluate every default rule over it."""
    rules = rules_with_defaults()
    verdicts = {rule: Verdict(rule) for rule in rules}
    runs = []
    for name, hyperparameters in HEALTHY.items():
        if only and name not in only:
            continue
        if trained_already:
            result = json.loads((folder / name / "output" / "result.json").read_text())
            store = folder / name / "tensors"
            trained = Trained(name, store, result["final_accuracy"], result["steps"])
        else:
            trained = train(name, hyperparameters, folder / name)
        runs.append(trained)
        for rule, (status, details) in evaluate(trained.store, rules).items():
            if status is RuleStatus.ISSUES_FOUND:
                verdicts[rule].fired[name] = details
            elif status is RuleStatus.ERROR:
                verdicts[rule].errors[name] = details
    return runs, verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="train only this configuration")
    parser.add_argument("--keep", type=Path, help="train into this folder (kept)")
    parser.add_argument("--reuse", type=Path, help="evaluate the runs a --keep left here")
    args = parser.parse_args()
    folder = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix="rule-false-alarms-"))
    runs, verdicts = run_zoo(folder, args.only, trained_already=args.reuse is not None)
    for run in runs:
        accuracy = "-" if run.test_accuracy is None else f"{run.test_accuracy:.3f}"
        healthy = run.test_accuracy is not None and run.test_accuracy >= MIN_ACCURACY
        print(f"{run.name:8s} {run.steps} steps, test accuracy {accuracy}", end="")
        print("" if healthy else f"  (below {MIN_ACCURACY}: not a healthy run)")
    print()
    print(f"| rule | IssuesFound on {len(runs)} healthy runs | first finding |")
    print("|---|---|---|")
    fired = 0
    for verdict in verdicts.values():
        count = len(verdict.fired)
        fired += bool(count)
        first = next(iter(verdict.fired.items()), None)
        note = f"{first[0]}: {first[1]}" if first else ""
        if verdict.errors:
            note += f" (Error on {', '.join(verdict.errors)})"
        print(f"| {verdict.rule} | {count} | {note} |")
    print(f"\n{fired} of {len(verdicts)} rules report IssuesFound on some healthy run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
