"""Hyperparameter roles: what the remediation strategies change (or read), named by the
built-in training contract's fields.

For the built-in job a role is its run_spec field. A script says which of its own flags
plays each role in run_spec.hyperparameter_roles ({"learning_rate": "lr"}); a strategy
applies to it only when the roles it changes are mapped. A role's value is the contract's
value (a learning rate above 0, an optimizer named sgd / momentum / adam / adamw, ...): the
strategies write those, so a flag is mapped only when the script takes them.

ROLES is this list, kept equal to what the registered strategies declare by a test
(tests/strategies), since state_schema cannot import them.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from remedy.state_schema.hyperparameters import Hyperparameters, takes_none

ROLES: tuple[str, ...] = (
    "learning_rate",
    "warmup_learning_rate",
    "warmup_epochs",
    "num_epochs",
    "grad_clip_norm",
    "batch_size",
    "weight_decay",
    "optimizer",
    "dropout",
    "init",
    "activation",
    "add_batch_norm",
    "exclude_samples",
    "skip_steps",
)


# Roles remedy fills itself at each launch, never a strategy: the attempt's own output folder
# (output_dir) and the checkpoint folder a warm start resumes from (resume). Their flags are
# not in hyperparameters: the value is the attempt's, not the user's.
PATH_ROLES: tuple[str, ...] = ("output_dir", "resume")

# A role remedy reads and never changes: the flag that says how many updates the job runs
# in all (its --max-steps, max_iters, ...). Known, a run is asked at a quarter and at half of
# it whether its model has begun to learn (records/asked_early.py); the built-in job reports
# its own length.
LENGTH_ROLE = "max_steps"


def check_mapped_role_name(role: str) -> None:
    """A role hyperparameter_roles may map: a strategy's, a path role or the length's."""
    if role not in ROLES and role not in PATH_ROLES and role != LENGTH_ROLE:
        known = ", ".join((*ROLES, *PATH_ROLES, LENGTH_ROLE))
        raise ValueError(f"unknown role {role!r}; known roles: {known}")


def check_role_name(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; known roles: {', '.join(ROLES)}")


# Roles whose null (off) a script's flag commonly writes as 0: nanoGPT's grad_clip = 0.0,
# the transformers Trainer's max_grad_norm = 0 both mean "no clipping".
ZERO_IS_OFF: tuple[str, ...] = ("grad_clip_norm",)


def role_value(role: str, value: Any) -> Any:
    """A script's flag value as the role's contract value (text decoded, checked); a
    ValueError says why it cannot play the role."""
    annotation = Hyperparameters.model_fields[role].annotation
    if role in ZERO_IS_OFF and isinstance(value, int | float | str) and _is_zero(value):
        return None
    if value is None and not takes_none(annotation):
        raise ValueError(
            f"is null (flag omitted), but a strategy needs the script's {role} to change "
            "it: give the script's default"
        )
    try:
        checked = Hyperparameters.__pydantic_validator__.validate_assignment(
            Hyperparameters.model_construct(), role, value
        )
    except ValidationError as error:
        raise ValueError(f"is not a valid {role}: {error.errors()[0]['msg']}") from None
    return getattr(checked, role)


def script_value(new: Any, old: Any) -> Any:
    """A role's new contract value in the form the script's flag had: a store_true flag
    (true/false) stays a boolean, so add_batch_norm 1 is the bare flag."""
    if isinstance(old, bool):
        return bool(new)
    if isinstance(new, str):  # a str enum (Activation) is written as its text
        return str(new)
    return new


def _is_zero(value: int | float | str) -> bool:
    try:
        return float(value) == 0
    except ValueError:
        return False


def length_value(value: Any) -> int:
    """A length flag's value as a number of updates (a whole number above 0, or its text);
    a ValueError says why it is not one."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"is {value!r}, not a number of updates") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"is {value!r}, not a number of updates")
    if not math.isfinite(value) or value != int(value) or value < 1:
        raise ValueError(f"is {value!r}, not a whole number of updates above 0")
    return int(value)
