"""run_spec.slurm: how the slurm backend asks the cluster for each attempt's allocation.

The shapes are checked here (when the payload is read); the slurm backend's check
(jobs/slurm/checks.py) adds what needs the cluster or the rest of the spec.
"""

from __future__ import annotations

import re

from pydantic import ConfigDict, Field, field_validator

from remedy.state_schema.base import Strict

# Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
TIME_LIMIT = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2})$")
MEMORY = re.compile(r"^\d+[KMGT]?$")
SLURM_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.,-]*$"  # partition, account, qos (a list with ',')
# Options the backend sets itself: given again in extra_sbatch_args they would silently win.
OWN_OPTIONS = (
    "--job-name", "-J", "--output", "-o", "--error", "-e", "--chdir", "-D", "--parsable",
    "--wrap", "--requeue", "--no-requeue", "--export",
)  # fmt: skip


class SlurmSpec(Strict):
    """The allocation of one attempt: `sbatch` options, written into its batch script."""

    model_config = ConfigDict(title="Slurm")  # the name the run form's toggle shows

    partition: str | None = Field(
        None, pattern=SLURM_NAME, description="--partition. null: the cluster's default."
    )
    account: str | None = Field(
        None, pattern=SLURM_NAME, description="--account. null: the user's default."
    )
    qos: str | None = Field(None, pattern=SLURM_NAME, description="--qos. null: the default.")
    time_limit: str | None = Field(
        None,
        description="--time, in Slurm's formats (minutes, HH:MM:SS, D-HH:MM:SS). A job that "
        "reaches it fails with TIMEOUT. null: the partition's limit.",
    )
    nodes: int = Field(
        1,
        ge=1,
        le=1024,
        description="--nodes. More than one needs distribution: torchrun on each node, "
        "started by srun, with its rendezvous on the first node.",
    )
    gpus_per_node: int | None = Field(
        None,
        ge=0,
        le=64,
        description="GPUs on each node (--gpus-per-node, or --gres=gpu:N with gres). "
        "null or 0: none.",
    )
    gpu_request: str = Field(
        "gpus-per-node",
        pattern="^(gpus-per-node|gres)$",
        description="How GPUs are asked for: gpus-per-node (--gpus-per-node=N) or gres "
        "(--gres=gpu:N, for clusters that only configure GPUs as generic resources).",
    )
    cpus_per_task: int | None = Field(
        None, ge=1, le=4096, description="--cpus-per-task. null: the cluster's default (one)."
    )
    mem_per_task: str | None = Field(
        None,
        description="Memory of each task (the job runs one task per node: --mem), e.g. "
        "16G or 4000M. null: the cluster's default.",
    )
    extra_sbatch_args: list[str] = Field(
        default_factory=list,
        description='More sbatch options, each one argument: ["--constraint=a100", '
        '"--exclusive"]. Not the ones the backend sets (job name, output, chdir, requeue).',
    )
    shared_dir: str | None = Field(
        None,
        description="A folder every node sees (a shared filesystem), where each job's "
        "folder is kept: its batch script, output file, tensors, checkpoints and status. "
        "null: the run folder, which must then be on a shared filesystem.",
    )

    @field_validator("time_limit")
    @classmethod
    def _time_limit_shape(cls, value: str | None) -> str | None:
        if value is not None and not TIME_LIMIT.match(value):
            raise ValueError(f"not a Slurm time ({value!r}): minutes, HH:MM:SS or D-HH:MM:SS")
        return value

    @field_validator("mem_per_task")
    @classmethod
    def _memory_shape(cls, value: str | None) -> str | None:
        if value is not None and not MEMORY.match(value):
            raise ValueError(f"not a Slurm memory size ({value!r}): a number, then K, M, G or T")
        return value

    @field_validator("extra_sbatch_args")
    @classmethod
    def _extra_args_shape(cls, args: list[str]) -> list[str]:
        for arg in args:
            if not arg.startswith("-"):
                raise ValueError(f"{arg!r} is not an option: each entry is one --name=value")
            name = arg.split("=", 1)[0]
            if name in OWN_OPTIONS or (not arg.startswith("--") and arg[:2] in OWN_OPTIONS):
                raise ValueError(f"{name} is set by the slurm backend itself")
        return args
