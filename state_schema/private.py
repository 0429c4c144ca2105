"""The run_spec fields that name the account's resources: kept in state.json, never shown.

run_spec.sagemaker's sm_role (the role ARN) and bucket are hidden wherever a person or a log
sees a payload: the payloads remedy prints and the flow's parameters in the Prefect UI hold
HIDDEN instead.
A flow given HIDDEN takes the real value from its run folder (a resume, a Prefect retry) or,
for a new run, from its machine's environment (REMEDY_SM_ROLE, REMEDY_BUCKET), which is
also where a run of the cloud backend started from the UI form with the fields left empty
finds them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from remedy.state_schema.backends import backend_options
from remedy.state_schema.models import State

# field -> the environment variable of the machine running the flow that holds its value
PRIVATE_FIELDS: dict[str, str] = {"sm_role": "REMEDY_SM_ROLE", "bucket": "REMEDY_BUCKET"}
HIDDEN = "<hidden>"


def hide_private(data: Any) -> Any:
    """A JSON value with every private field set anywhere in it replaced by HIDDEN."""
    if isinstance(data, Mapping):
        return {
            key: HIDDEN if key in PRIVATE_FIELDS and value is not None else hide_private(value)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [hide_private(item) for item in data]
    return data


def hidden_state(state: State) -> State:
    """The state as a person may see it: every run_spec's private fields HIDDEN."""
    return State.model_validate(hide_private(state.model_dump(mode="json")))


def same_run(a: State, b: State) -> bool:
    """The two states are the same but for their private fields (one may hide them)."""
    return hide_private(a.model_dump(mode="json")) == hide_private(b.model_dump(mode="json"))


def reveal_private(state: State, environ: Mapping[str, str] | None = None) -> State:
    """The state of a new run with its private fields filled from the environment: those
    HIDDEN, and the empty ones of the run's own backend (run_spec.<backend>, when its model
    has them: the cloud backend's sm_role and bucket). ValueError naming the field and its
    variable when a HIDDEN one has no value there."""
    environ = os.environ if environ is None else environ
    data = state.model_dump(mode="json")
    specs = [data["run_spec"], *(attempt["spec"] for attempt in data["history"]["attempts"])]
    changed = False
    for spec in specs:
        own = spec.get("backend")
        for name in private_groups(spec):
            group = spec.get(name) or {}
            if revealed(f"run_spec.{name}", group, environ, fill_empty=name == own):
                spec[name] = group
                changed = True
    return State.model_validate(data) if changed else state


def private_groups(spec: Mapping[str, Any]) -> list[str]:
    """The backends' groups of a run_spec (JSON) that hold private fields: those given, and
    the run's own backend's."""
    names = [name for name, value in spec.items() if isinstance(value, Mapping)]
    if isinstance(spec.get("backend"), str):
        names.append(spec["backend"])
    found = []
    for name in dict.fromkeys(names):
        options = backend_options(name)
        if options is not None and PRIVATE_FIELDS.keys() & options.model_fields.keys():
            found.append(name)
    return found


def revealed(
    where: str, group: dict[str, Any], environ: Mapping[str, str], fill_empty: bool
) -> bool:
    """Fill the group's HIDDEN private fields (and its empty ones, with fill_empty) from
    the environment, in place; whether any was filled."""
    changed = False
    for field, variable in PRIVATE_FIELDS.items():
        value = group.get(field)
        if value == HIDDEN or (value is None and fill_empty):
            if environ.get(variable):
                group[field] = environ[variable]
                changed = True
            elif value == HIDDEN:
                raise ValueError(
                    f"{where}.{field} is {HIDDEN} and {variable} is not set on this "
                    "machine: set it, or give the value"
                )
    return changed
