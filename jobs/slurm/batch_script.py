"""The batch script of one Slurm job, written into its folder and submitted with sbatch.

It asks for the allocation (run_spec.slurm, as #SBATCH lines) and runs the local backend's
supervisor inside it, on the first node: the supervisor starts the training process and the
rule evaluator beside it and escalates a stop request, exactly as on a local machine, so
zero-code capture, the NaN guard, progress and stop requests work unchanged.

With several nodes (run_spec.distribution and slurm.nodes > 1) the training command is
`srun` starting torchrun once per node, all meeting at a rendezvous on the first node.
"""

from __future__ import annotations

import shlex
import sys

from remedy.jobs.local.backend import supervisor_command
from remedy.jobs.local.environment import TORCHRUN_MODULE, job_command, torchrun_log_dir
from remedy.jobs.local.gpus import GPU_LOCK_DIR_ENV
from remedy.jobs.local.layout import JobPaths
from remedy.state_schema import RunSpec, flag_arguments
from remedy.state_schema import job_env as names
from remedy.state_schema.slurm_spec import SlurmSpec

RENDEZVOUS_HOST_ENV = "REMEDY_RDZV_HOST"  # the first node of the allocation
RENDEZVOUS_PORT = 29400  # torchrun's c10d default
REQUEUE_MODULE = "remedy.jobs.slurm.requeue"  # prepares a requeued job's next run
OUTPUT_FILE = "slurm-%j.out"  # in the job's logs folder; %j: the Slurm job id


def slurm_of(spec: RunSpec) -> SlurmSpec:
    return spec.slurm or SlurmSpec()


def sbatch_options(job_name: str, spec: RunSpec, paths: JobPaths) -> list[str]:
    return [
        f"--job-name={job_name}",
        f"--output={paths.logs / OUTPUT_FILE}",
        f"--chdir={paths.root}",
        # Slurm may requeue the job (preemption, a failed node, scontrol requeue): it runs
        # again in its folder, from its last checkpoint (requeue.py), its output appended.
        "--requeue",
        "--open-mode=append",
        *allocation_options(slurm_of(spec)),
    ]


def allocation_options(slurm: SlurmSpec) -> list[str]:
    """What the job asks of the cluster (run_spec.slurm), as sbatch options."""
    options = [f"--nodes={slurm.nodes}", "--ntasks-per-node=1"]  # supervisor or torchrun
    for option, value in (
        ("--partition", slurm.partition),
        ("--account", slurm.account),
        ("--qos", slurm.qos),
        ("--time", slurm.time_limit),
        ("--cpus-per-task", slurm.cpus_per_task),
        ("--mem", slurm.mem_per_task),
    ):
        if value is not None:
            options.append(f"{option}={value}")
    if slurm.gpus_per_node:
        if slurm.gpu_request == "gres":
            options.append(f"--gres=gpu:{slurm.gpus_per_node}")
        else:
            options.append(f"--gpus-per-node={slurm.gpus_per_node}")
    return options + slurm.extra_sbatch_args


def processes_per_node(spec: RunSpec) -> int | None:
    """torchrun's processes on each node; None for a job of one process (no torchrun)."""
    if spec.distribution is None or not spec.distribution.enabled:
        return None
    wanted = spec.distribution.torch_distributed.processes_per_host
    return wanted if wanted is not None else max(1, slurm_of(spec).gpus_per_node or 0)


def allocation_command(spec: RunSpec, paths: JobPaths, command: list[str]) -> list[str]:
    """The training command inside the allocation: torchrun on each node (srun across
    nodes); `command`, the local one, for a job of one process."""
    processes = processes_per_node(spec)
    if processes is not None and slurm_of(spec).nodes > 1:
        return multi_node_command(spec, paths, processes)
    if processes is not None:
        return job_command(spec, paths, processes)
    return command


def multi_node_command(spec: RunSpec, paths: JobPaths, processes: int) -> list[str]:
    """srun starts torchrun once on each node; every torchrun meets at the rendezvous on the
    first node (its host name is exported by the batch script, so bash expands it there)."""
    nodes = slurm_of(spec).nodes
    target = [spec.entry_point] if spec.is_script else ["-m", spec.entry_point]
    launcher = ["-m", names.LAUNCHER_MODULE, *target, *flag_arguments(spec.script_hyperparameters)]
    torchrun = (
        f'exec "$0" -m {TORCHRUN_MODULE} --nnodes={nodes} --nproc-per-node={processes} '
        f'--rdzv-backend=c10d --rdzv-id="$SLURM_JOB_ID" '
        f'--rdzv-endpoint="${RENDEZVOUS_HOST_ENV}:{RENDEZVOUS_PORT}" '
        f'{shlex.quote(torchrun_log_dir(paths))} "$@"'
    )
    srun = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    return [*srun, "bash", "-c", torchrun, sys.executable, *launcher]


def batch_script(job_name: str, spec: RunSpec, paths: JobPaths) -> str:
    lines = [
        "#!/bin/bash",
        f"# remedy job {job_name}: written by the slurm backend, submitted with sbatch.",
        *(f"#SBATCH {option}" for option in sbatch_options(job_name, spec, paths)),
        "set -eu",
        "# torchrun on every node meets at a rendezvous on the first node of the allocation.",
        f'export {RENDEZVOUS_HOST_ENV}="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | '
        'head -n 1)"',
        "# The allocation's GPUs are the job's own: no lease shared with other jobs.",
        f"export {GPU_LOCK_DIR_ENV}={shlex.quote(str(paths.root / 'gpu-locks'))}",
        "# A requeued job (Slurm sets SLURM_RESTART_COUNT) goes on from its last checkpoint.",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
        f"  {shlex.join([sys.executable, '-m', REQUEUE_MODULE, str(paths.root)])} "
        '"$SLURM_RESTART_COUNT"',
        "fi",
        f"exec {shlex.join(supervisor_command(paths))}",
    ]
    return "\n".join(lines) + "\n"
