"""What a local job is started with: its command, working directory and environment.

Every job, the built-in one or a user's, gets the same environment (the names are
remedy.state_schema.job_env's; docs/job-contract.md is the user's page). The built-in job
keeps its command line (--hyperparameters FILE --output-dir DIR); any other entry point is
run by the launcher, exactly as `python SCRIPT ARGS` or `python -m MODULE ARGS` would run it,
ARGS being run_spec.arguments then its hyperparameters as flags in its hyperparameter_style;
the flags of the output_dir and resume roles get the job's model folder and the copy of its
warm start's checkpoint. With run_spec.distribution, torchrun starts the launcher
once per rank (`python -m torch.distributed.run --standalone --nproc-per-node N -m
remedy.training.launch SCRIPT ARGS`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from remedy.jobs.local.gpus import gpus_wanted, visible_devices
from remedy.jobs.local.layout import JobPaths
from remedy.jobs.local.options import local_of
from remedy.state_schema import RunSpec
from remedy.state_schema import job_env as names
from remedy.state_schema.flags import environment_value, flag_arguments


@dataclass(frozen=True)
class Launch:
    """The training process of one job, as written into its launch record."""

    command: list[str]
    cwd: str
    env: dict[str, str]  # added to the supervisor's own environment, less its secrets


TORCHRUN_MODULE = "torch.distributed.run"  # the torchrun command, run by this interpreter


def job_command(spec: RunSpec, paths: JobPaths, processes: int | None = None) -> list[str]:
    """The training command; `processes`: torchrun starts the launcher that many times."""
    if spec.job.reads_fields:  # the contract's fields, in a file
        return [
            sys.executable,
            "-m",
            spec.entry_point,
            "--hyperparameters",
            str(paths.hyperparameters),
            "--output-dir",
            str(paths.root),
        ]
    target = [spec.entry_point] if spec.is_script else ["-m", spec.entry_point]
    flags = spec.job_arguments(**path_flags(spec, paths))
    launcher = ["-m", names.LAUNCHER_MODULE, *target, *flags]
    if processes is None:
        return [sys.executable, *launcher]
    # --standalone: a rendezvous on this host at a free port. Its workers run in sessions
    # of their own; the launcher ends a rank whose torchrun is killed (training/launch.py).
    torchrun = [sys.executable, "-m", TORCHRUN_MODULE, "--standalone", torchrun_log_dir(paths)]
    return [*torchrun, f"--nproc-per-node={processes}", *launcher]


def torchrun_log_dir(paths: JobPaths) -> str:
    """torchrun's own folder (its per-rank error files) in the job's logs: without one it
    makes a torchelastic_* folder in the temporary directory and leaves it there."""
    return f"--log-dir={paths.logs / 'torchrun'}"


def path_flags(spec: RunSpec, paths: JobPaths) -> dict[str, str | None]:
    """What the flags of the output_dir and resume roles get: the job's own model folder
    (SM_MODEL_DIR), and the copy of the warm start's checkpoint in its checkpoint folder."""
    warm = spec.init_checkpoint
    resume = None if warm is None else str(paths.checkpoints / Path(warm).name)
    return {"output_dir": str(paths.model), "resume": resume}


# Linux's limits on what execve takes: one argument at most 32 pages (MAX_ARG_STRLEN), the
# arguments and environment together ARG_MAX; past them the job fails to start with
# "Argument list too long", every time.
MAX_ARG_BYTES = 32 * 4096
ENV_ROOM_BYTES = 64 * 1024  # the job's environment and paths, besides its flags


def check_argv_limits(spec: RunSpec) -> None:
    """ValueError naming the field when the job's command line is past what the OS takes."""
    if spec.job.reads_fields:
        return  # its hyperparameters travel in a file
    for name, value in spec.script_hyperparameters.items():
        size = max((len(os.fsencode(a)) + 1 for a in flag_arguments({name: value})), default=0)
        if size > MAX_ARG_BYTES:
            raise ValueError(
                f"run_spec.script_hyperparameters[{name!r}]: {size} bytes, over the "
                f"{MAX_ARG_BYTES} bytes one command-line argument may have (the job could "
                "never start: Argument list too long); pass a file path instead"
            )
    arguments = spec.job_arguments()  # its style, fixed arguments and flags
    total = sum(len(os.fsencode(a)) + 1 for a in arguments)
    limit = os.sysconf("SC_ARG_MAX") - ENV_ROOM_BYTES
    if total > limit:
        raise ValueError(
            f"run_spec.script_hyperparameters: {total} bytes of command line, over the "
            f"{limit} bytes this machine's execve takes with the job's environment (the job "
            "could never start: Argument list too long)"
        )


def job_processes(spec: RunSpec, environ: Mapping[str, str]) -> int | None:
    """How many processes torchrun starts, None for a job of one process (no torchrun):
    processes_per_host, else one per GPU the job gets (at least one), as the toolkit does."""
    if spec.distribution is None or not spec.distribution.enabled:
        return None
    wanted = spec.distribution.torch_distributed.processes_per_host
    return wanted if wanted is not None else max(1, job_gpus(spec, environ))


def thread_variables(environ: Mapping[str, str], processes: int = 1) -> dict[str, str]:
    """One core is left to the rule evaluator and the flow: torch threads that compete for
    every core slow a step down by up to 10x on a small machine. Several processes share
    the rest. A count set in the flow's environment wins (it is per process)."""
    default = str(max(1, ((os.cpu_count() or 2) - 1) // processes))
    threads = environ.get(names.TORCH_THREADS_ENV) or default
    variables = {names.TORCH_THREADS_ENV: threads}
    for name in names.THREAD_ENVS:
        variables[name] = environ.get(name) or threads
    return variables


def toolkit_variables(
    spec: RunSpec, job_name: str, paths: JobPaths, environ: Mapping[str, str]
) -> dict[str, str]:
    """The cloud training toolkit's names, so a script written for it runs unchanged."""
    hyperparameters = spec.job_hyperparameters(**path_flags(spec, paths))
    num_gpus, num_cpus = job_gpus(spec, environ), os.cpu_count() or 1
    training_env = {
        "channel_input_dirs": {},
        "current_host": names.CURRENT_HOST,
        "hosts": [names.CURRENT_HOST],
        "hyperparameters": hyperparameters,
        "job_name": job_name,
        "model_dir": str(paths.model),
        "module_dir": str(source_dir(spec)),
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "output_data_dir": str(paths.output_data),
        "user_entry_point": spec.entry_point,
    }
    if job_processes(spec, environ) is not None:  # how the toolkit knows to run torchrun
        training_env["additional_framework_parameters"] = {
            "sagemaker_torch_distributed_enabled": True
        }
    variables = {
        names.SM_MODEL_DIR_ENV: str(paths.model),
        names.SM_OUTPUT_DATA_DIR_ENV: str(paths.output_data),
        names.SM_HPS_ENV: json.dumps(hyperparameters),
        names.SM_NUM_GPUS_ENV: str(num_gpus),
        names.SM_NUM_CPUS_ENV: str(num_cpus),
        names.SM_CURRENT_HOST_ENV: names.CURRENT_HOST,
        names.SM_HOSTS_ENV: json.dumps([names.CURRENT_HOST]),
        names.SM_TRAINING_ENV_ENV: json.dumps(training_env),
    }
    for name, value in hyperparameters.items():
        variables[names.SM_HP_PREFIX + name.upper()] = environment_value(value)
    return variables


def job_gpus(spec: RunSpec, environ: Mapping[str, str]) -> int:
    """How many GPUs the job will get (its supervisor picks which: gpus.py)."""
    return gpus_wanted(local_of(spec).gpus_per_job, len(visible_devices(environ)))


def source_dir(spec: RunSpec) -> Path:
    """The job's working directory: source_dir, else the flow's current directory."""
    return Path(spec.source_dir or ".").resolve()


def job_launch(
    spec: RunSpec, job_name: str, paths: JobPaths, environ: Mapping[str, str] | None = None
) -> Launch:
    environ = os.environ if environ is None else environ
    cwd = source_dir(spec)
    env = {
        names.OUTPUT_DIR_ENV: str(paths.root),
        names.CHECKPOINT_DIR_ENV: str(paths.checkpoints),
        names.DEBUGGER_CONFIG_ENV: str(paths.debugger_config),
        names.STOP_FILE_ENV: str(paths.stop_request),
        names.CONTINUE_FILE_ENV: str(paths.continue_request),
        names.RULE_STATUS_DIR_ENV: str(paths.rule_status),
        names.NAN_GUARD_ENV: spec.nan_guard,
        "PYTHONUNBUFFERED": environ.get("PYTHONUNBUFFERED") or "1",
    }
    if edits := spec.config_edits(**path_flags(spec, paths)):
        env[names.CONFIG_EDITS_ENV] = json.dumps(edits)
    if spec.max_updates is not None:
        env[names.MAX_UPDATES_ENV] = str(spec.max_updates)
    if spec.hold_by_epochs is not None:
        env[names.HOLD_EPOCHS_ENV] = str(spec.hold_by_epochs)
    processes = job_processes(spec, environ)
    env |= thread_variables(environ, processes or 1)
    env |= toolkit_variables(spec, job_name, paths, environ)
    if spec.source_dir is not None:  # first on the import path, as the toolkit's code dir
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), environ.get("PYTHONPATH")]))
    return Launch(command=job_command(spec, paths, processes), cwd=str(cwd), env=env)
