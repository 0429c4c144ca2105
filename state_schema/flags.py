"""How a script receives run_spec.hyperparameters: as command-line flags, the way the cloud
service's training toolkit passes them, and as SM_HPS / SM_HP_<NAME> in its environment.

    {"lr": 20, "clip": 0.25, "tied": true, "dry-run": false, "save": null, "sizes": [2, 3]}
    -> --lr 20 --clip 0.25 --tied --sizes 2 3

- a name of one character is a short option (-x), any other a long one (--name), as the
  toolkit does; names are written without dashes;
- true: the bare flag (argparse action="store_true");
- false and null: no flag at all, so the script's own default applies;
- a list: the flag, then each item (argparse nargs="+" or "*"); an empty list: no flag;
- an int or a float: repr(), which reads back as the same number (20, 0.25, 1e-05);
- a string: as it is ("True" passes `--flag True` to a script that parses the text).
The order is the dictionary's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Union

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr

# A value of run_spec.hyperparameters (the union is for the JSON Schema; check_value is the
# check, with one readable message instead of one per member of the union).
FlagItem = Union[StrictInt, StrictFloat, StrictStr]  # noqa: UP007 (pydantic reads this)
FlagValue = Union[StrictBool, StrictInt, StrictFloat, StrictStr, list[FlagItem], None]  # noqa: UP007

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def check_name(name: str) -> None:
    if name.startswith("-"):
        raise ValueError(f"write the flag name without dashes: {name.lstrip('-')!r}, not {name!r}")
    if not NAME.fullmatch(name):
        raise ValueError(
            f"a flag name is a letter or _ then letters, digits, _ . or -; got {name!r}"
        )


def _is_item(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return "\0" not in value
    return isinstance(value, int)


def check_value(name: str, value: object) -> None:
    if value is None or isinstance(value, bool) or _is_item(value):
        return
    if isinstance(value, list) and all(_is_item(item) for item in value):
        return
    raise ValueError(
        f"{name}: a flag's value is a string, a finite number, true/false, null or a list "
        f"of strings and numbers; got {json.dumps(value, default=repr)}"
    )


def check_hyperparameters(values: Mapping[str, object]) -> None:
    """ValueError naming every bad flag name or value."""
    problems = []
    for name, value in values.items():
        try:
            check_name(name)
            check_value(name, value)
        except ValueError as error:
            problems.append(str(error))
    if problems:
        raise ValueError("; ".join(problems))


def option(name: str) -> str:
    return f"-{name}" if len(name) == 1 else f"--{name}"


def text(value: int | float | str) -> str:
    return value if isinstance(value, str) else repr(value)


def flag_arguments(values: Mapping[str, object]) -> list[str]:
    """The command-line arguments for a script's hyperparameters (see the module's doc)."""
    arguments: list[str] = []
    for name, value in values.items():
        if value is None or value is False or value == []:
            continue
        arguments.append(option(name))
        if value is True:
            continue
        items = value if isinstance(value, list) else [value]
        arguments.extend(text(item) for item in items)  # type: ignore[arg-type]
    return arguments


def environment_value(value: object) -> str:
    """A hyperparameter as the toolkit writes SM_HP_<NAME>: a string as it is, null as
    empty, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
