"""A user's script under python -m remedy.training.launch, with the job contract's folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.builtin_job import strict_json


@dataclass
class Job:
    """The folders a backend gives a job, and the environment naming them."""

    root: Path

    @property
    def out(self) -> Path:
        return self.root / "output"

    @property
    def store(self) -> Path:
        return self.root / "tensors"

    @property
    def rule_status(self) -> Path:
        return self.root / "rule_status"

    @property
    def stop_file(self) -> Path:
        return self.root / "stop-request"

    def env(self, gradients_every: int = 5, **extra: str) -> dict[str, str]:
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "debugger.json"
        config.write_text(
            json.dumps(
                {
                    "out_dir": str(self.store),
                    "collections": {
                        "losses": {"save_interval": 1},
                        "gradients": {"save_interval": gradients_every},
                    },
                }
            )
        )
        env = dict(os.environ)
        for name in list(env):
            if name.startswith(("REMEDY_", "SM_")):
                del env[name]
        contract = {
            "REMEDY_OUTPUT_DIR": str(self.out),
            "REMEDY_DEBUGGER_CONFIG": str(config),
            "REMEDY_STOP_FILE": str(self.stop_file),
            "REMEDY_RULE_STATUS_DIR": str(self.rule_status),
            "REMEDY_TORCH_THREADS": "1",
        }
        return env | contract | extra

    def progress(self) -> dict[str, Any]:
        return strict_json((self.out / "progress.json").read_text())

    def result(self) -> dict[str, Any]:
        return strict_json((self.out / "result.json").read_text())

    def metrics(self) -> list[dict[str, Any]]:
        return [strict_json(line) for line in (self.out / "metrics.jsonl").read_text().splitlines()]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def launch_command(*target: str) -> list[str]:
    return [sys.executable, "-m", "remedy.training.launch", *target]


def run(folder: Path, env: dict[str, str], *target: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        launch_command(*target), cwd=folder, env=env, capture_output=True, text=True, timeout=300
    )


def start(folder: Path, env: dict[str, str], *target: str) -> subprocess.Popen[str]:
    """The launcher started on the target, not waited for (its output piped)."""
    return subprocess.Popen(
        launch_command(*target),
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_step(job: Job, process: subprocess.Popen[str], step: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if job.progress()["step"] >= step:
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no step {step} in time")
