"""A Slurm job's run_spec checked before anything is submitted: the fields that need the
rest of the spec, Slurm's commands on this machine, and the allocation itself, which the
controller judges without starting anything (`sbatch --test-only`: an unknown partition,
account or qos, or more than any node has, is refused here, naming the field)."""

from __future__ import annotations

import shutil
from pathlib import Path

from remedy.jobs.slurm import controller
from remedy.jobs.slurm.batch_script import allocation_options, slurm_of
from remedy.state_schema import RunSpec

COMMANDS = ("sbatch", "scontrol", "squeue", "scancel")


class SlurmSpecError(ValueError):
    """A run_spec the slurm backend cannot launch; the message names the field."""


def check_slurm_spec(spec: RunSpec) -> None:
    slurm = slurm_of(spec)
    if spec.local is not None and spec.local.gpus_per_job is not None:
        raise SlurmSpecError(
            "run_spec.local.gpus_per_job: the local backend's setting; the slurm backend asks for "
            "GPUs with run_spec.slurm.gpus_per_node"
        )
    if slurm.nodes > 1 and (spec.distribution is None or not spec.distribution.enabled):
        raise SlurmSpecError(
            f"run_spec.slurm.nodes: {slurm.nodes} nodes need run_spec.distribution "
            "(torchrun on every node); without it the job runs on one node"
        )
    # (the built-in job runs in one process: RunSpec refuses its distribution, so the
    # check above refuses it several nodes)
    for arg in slurm.extra_sbatch_args:
        if any(c.isspace() for c in arg):
            raise SlurmSpecError(
                f"run_spec.slurm.extra_sbatch_args: {arg!r} holds a space; a batch script's "
                "#SBATCH line cannot carry it"
            )
    if slurm.shared_dir is not None:
        folder = Path(slurm.shared_dir)
        if not folder.is_absolute():
            raise SlurmSpecError(
                f"run_spec.slurm.shared_dir: {slurm.shared_dir!r} is not an absolute path "
                "(every node must find the same folder)"
            )
        if not folder.is_dir():
            raise SlurmSpecError(f"run_spec.slurm.shared_dir: no folder {folder}")
    missing = [name for name in COMMANDS if shutil.which(name) is None]
    if missing:
        raise SlurmSpecError(
            f"run_spec.backend slurm: {', '.join(missing)} not found on the PATH; the flow "
            "must run where Slurm's commands reach the cluster (e.g. a login node)"
        )
    options = allocation_options(slurm)
    done = controller.run(["sbatch", "--test-only", *options, "--wrap=true"])
    if done.returncode != 0:
        said = " ".join(done.stderr.split()) or done.stdout.strip()
        raise SlurmSpecError(
            f"run_spec.slurm: the cluster refuses the allocation {' '.join(options)}: {said}"
        )
