"""What the backend tells a script-mode job through its environment, as the launcher reads it.

The names are the job contract's, defined once in remedy.state_schema.job_env
(docs/job-contract.md, "The environment"); RANK, WORLD_SIZE and LOCAL_RANK are torchrun's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from remedy.state_schema.job_env import (
    CONFIG_EDITS_ENV,
    CONTINUE_FILE_ENV,
    DEBUGGER_CONFIG_ENV,
    HOLD_EPOCHS_ENV,
    MAX_UPDATES_ENV,
    NAN_GUARD_ENV,
    OUTPUT_DIR_ENV,
    RULE_STATUS_DIR,
    RULE_STATUS_DIR_ENV,
    STOP_FILE_ENV,
    TORCH_THREADS_ENV,
)

NanGuardMode = Literal["stop", "skip", "off"]
NAN_GUARD_MODES: tuple[NanGuardMode, ...] = ("stop", "skip", "off")


class JobEnvironmentError(ValueError):
    """A variable of the contract holds a value the launcher cannot use."""


@dataclass(frozen=True)
class JobEnvironment:
    output_dir: Path | None
    stop_file: Path | None
    rule_status_dir: Path | None  # None: output_dir/rule_status, or nowhere without one
    nan_guard: NanGuardMode
    torch_threads: int | None
    debugger_config: Path | None
    rank: int = 0  # torchrun's RANK: this process among the job's (0 without torchrun)
    world_size: int = 1  # torchrun's WORLD_SIZE
    under_torchrun: bool = False  # started by torchrun (LOCAL_RANK set)
    max_updates: int | None = None  # run_spec.max_updates: stop after this many updates
    continue_file: Path | None = None  # set: hold at max_updates until continued or stopped
    hold_epochs: int | None = None  # run_spec.hold_by_epochs: hold to be asked
    config_edits: Mapping[str, Mapping[str, object]] | None = None  # {FILE: {key: value}}

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> JobEnvironment:
        env = os.environ if environ is None else environ

        def path(name: str) -> Path | None:
            value = env.get(name)
            return Path(value) if value else None

        nan_guard = (env.get(NAN_GUARD_ENV) or "stop").strip().lower()
        if nan_guard not in NAN_GUARD_MODES:
            raise JobEnvironmentError(
                f"{NAN_GUARD_ENV}={env.get(NAN_GUARD_ENV)!r}: expected one of "
                f"{', '.join(NAN_GUARD_MODES)}"
            )
        threads = positive_int(env, TORCH_THREADS_ENV)
        try:
            rank, world_size = int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1"))
        except ValueError:
            raise JobEnvironmentError(
                f"RANK={env.get('RANK')!r}, WORLD_SIZE={env.get('WORLD_SIZE')!r}: expected integers"
            ) from None
        output_dir = path(OUTPUT_DIR_ENV)
        status_dir = path(RULE_STATUS_DIR_ENV)
        if status_dir is None and output_dir is not None:
            status_dir = output_dir / RULE_STATUS_DIR  # as training/guard.py does
        return cls(
            output_dir=output_dir,
            stop_file=path(STOP_FILE_ENV),
            rule_status_dir=status_dir,
            nan_guard=nan_guard,
            torch_threads=threads,
            debugger_config=path(DEBUGGER_CONFIG_ENV),
            rank=rank,
            world_size=world_size,
            under_torchrun=started_by_torchrun(env),
            max_updates=positive_int(env, MAX_UPDATES_ENV),
            continue_file=path(CONTINUE_FILE_ENV),
            hold_epochs=positive_int(env, HOLD_EPOCHS_ENV),
            config_edits=config_edits(env),
        )


def started_by_torchrun(env: Mapping[str, str]) -> bool:
    """torchrun gives each rank LOCAL_RANK (with RANK, WORLD_SIZE and the rest)."""
    return "LOCAL_RANK" in env


def config_edits(env: Mapping[str, str]) -> dict[str, dict[str, object]] | None:
    """The config keys' values (run_spec's FILE:key hyperparameters), {FILE: {key: value}}."""
    text = env.get(CONFIG_EDITS_ENV)
    if not text:
        return None
    try:
        edits = json.loads(text)
    except ValueError as error:
        raise JobEnvironmentError(f"{CONFIG_EDITS_ENV}: not JSON ({error})") from None
    if not isinstance(edits, dict) or not all(isinstance(v, dict) for v in edits.values()):
        raise JobEnvironmentError(f"{CONFIG_EDITS_ENV}: expected {{FILE: {{key: value}}}}")
    return edits


def positive_int(env: Mapping[str, str], name: str) -> int | None:
    """The variable's positive integer; None when it is unset or empty."""
    text = env.get(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise JobEnvironmentError(f"{name}={text!r}: expected a positive integer")
    return value
