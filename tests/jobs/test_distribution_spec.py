"""run_spec.distribution: the cloud estimator's torch_distributed option, validated; the
command and environment the local backend builds from it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from remedy.jobs.local.environment import job_launch
from remedy.jobs.local.layout import JobPaths
from remedy.state_schema import RunSpec
from remedy.state_schema import job_env as names

TWO = {"torch_distributed": {"enabled": True, "processes_per_host": 2}}


def script(**fields: object) -> RunSpec:
    return RunSpec(entry_point="train.py", hyperparameters={"lr": 0.1}, **fields)


def test_a_script_gets_torchrun_with_its_processes(tmp_path: Path) -> None:
    launch = job_launch(script(distribution=TWO), "job", JobPaths(tmp_path), {})
    assert launch.command == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--log-dir={tmp_path / 'logs' / 'torchrun'}",  # not a torchelastic_* in /tmp
        "--nproc-per-node=2",
        "-m",
        names.LAUNCHER_MODULE,
        "train.py",
        "--lr",
        "0.1",
    ]
    training_env = json.loads(launch.env[names.SM_TRAINING_ENV_ENV])
    assert training_env["additional_framework_parameters"] == {
        "sagemaker_torch_distributed_enabled": True
    }
    assert json.loads(launch.env[names.SM_HOSTS_ENV]) == [names.CURRENT_HOST]


@pytest.mark.parametrize("distribution", [None, {"torch_distributed": {"enabled": False}}])
def test_one_process_without_distribution(tmp_path: Path, distribution: object) -> None:
    launch = job_launch(script(distribution=distribution), "job", JobPaths(tmp_path), {})
    assert launch.command[1:3] == ["-m", names.LAUNCHER_MODULE]
    assert "additional_framework_parameters" not in launch.env[names.SM_TRAINING_ENV_ENV]


def test_processes_default_to_one_per_gpu_else_one(tmp_path: Path) -> None:
    spec = script(distribution={"torch_distributed": {}})
    no_gpu = job_launch(spec, "job", JobPaths(tmp_path), {"CUDA_VISIBLE_DEVICES": ""})
    assert "--nproc-per-node=1" in no_gpu.command


def test_threads_are_shared_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 9)
    launch = job_launch(script(distribution=TWO), "job", JobPaths(tmp_path), {})
    assert launch.env[names.TORCH_THREADS_ENV] == "4"  # (9 - 1) // 2


def test_the_builtin_job_refuses_it() -> None:
    with pytest.raises(ValidationError, match="runs as one process") as error:
        RunSpec(distribution=TWO)
    assert error.value.errors()[0]["loc"] == ("distribution",)
    RunSpec(distribution={"torch_distributed": {"enabled": False}})  # nothing to refuse


@pytest.mark.parametrize(
    "distribution, where",
    [
        ({"torch_distributed": {"processes_per_host": 0}}, "processes_per_host"),
        ({"torch_distributed": {"nproc": 2}}, "nproc"),
        ({"pytorchddp": {"enabled": True}}, "pytorchddp"),
    ],
)
def test_bad_distributions_are_refused(distribution: object, where: str) -> None:
    with pytest.raises(ValidationError) as error:
        script(distribution=distribution)
    assert any(where in str(e["loc"]) for e in error.value.errors())
