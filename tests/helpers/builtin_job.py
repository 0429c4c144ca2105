"""The built-in job as the backend runs it: a real python -m remedy.training.train process."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "depth": 8, "width": 2, "batch_size": 16, "train_samples": 48, "test_samples": 20,
    "num_epochs": 2, "warmup_learning_rate": 0.01, "learning_rate": 0.05, "add_batch_norm": 1,
    "checkpoint_every_epochs": 1,
}  # fmt: skip
UNSTABLE = TINY | {"add_batch_norm": 0, "width": 4, "batch_size": 32, "train_samples": 128,
                   "warmup_learning_rate": 0.5, "learning_rate": 0.5, "num_epochs": 3}  # fmt: skip


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise ValueError(f"non-JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def job_env(output: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, REMEDY_TORCH_THREADS="1", REMEDY_STOP_FILE=str(output / "stop"))
    env.pop("REMEDY_DEBUGGER_CONFIG", None)
    return env | extra


def command(tmp_path: Path, hyperparameters: dict[str, Any]) -> list[str]:
    path = tmp_path / "hyperparameters.json"
    path.write_text(json.dumps(hyperparameters))
    return [sys.executable, "-m", "remedy.training.train", "--hyperparameters", str(path),
            "--output-dir", str(tmp_path / "out")]  # fmt: skip


def run_job(
    tmp_path: Path, hyperparameters: dict[str, Any], **env: str
) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(tmp_path, hyperparameters), cwd=REPO, env=job_env(tmp_path / "out", **env),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def read_metrics(out: Path) -> list[dict[str, Any]]:
    return [strict_json(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
