"""How a script receives run_spec.hyperparameters: as command-line arguments in the style
the script parses (run_spec.hyperparameter_style), after run_spec.arguments, and as SM_HPS /
SM_HP_<NAME> in its environment, as the cloud service's training toolkit sets them.

    {"lr": 20, "clip": 0.25, "tied": true, "dry-run": false, "save": null, "sizes": [2, 3]}
    "--name value" (default, argparse; the toolkit's own form):
        --lr 20 --clip 0.25 --tied True --dry-run False --sizes 2 3
    "--name=value" (a configurator that takes --key=value overrides, e.g. after a config file):
        --lr=20 --clip=0.25 --tied=True --dry-run=False --sizes=[2, 3]
    "name=value" (Hydra / OmegaConf overrides; dotted names such as trainer.max_epochs):
        lr=20 clip=0.25 tied=true dry-run=false sizes=[2, 3]

- in "--name value", a name of one character is a short option (-x), any other a long one
  (--name), as the toolkit does; "--name=value" always writes two dashes (--x=1); names are
  written without dashes; in name=value a name may start with + or ++ (Hydra's "add" and
  "add or override");
- true / false: explicit, True / False (Python's, which literal_eval and the toolkit use) in
  the dashed styles, true / false (YAML's) in name=value. A store_true switch is named in
  run_spec.bare_flags: then true is the bare flag (--tied) and false no flag at all;
- null: no argument at all, so the script's own default applies;
- a list: "--name value": the flag, then each item (argparse nargs="+" or "*"), an empty
  list no flag; the other styles: one value [2, 3] (a Python / YAML list);
- an int or a float: repr(), which reads back as the same number (20, 0.25, 1e-05);
- a string: as it is; in name=value, quoted ('a b', 'true', '10') where Hydra's grammar would
  read it as more than text or as another type.
The order is the dictionary's. A name FILE:dotted.key is no flag but a key of a config
file (config_keys.py): the job gets a copy of the file with its value instead.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Literal, Union

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr

from remedy.state_schema.config_keys import is_config_key, split_config_key

# A value of run_spec.hyperparameters (the union is for the JSON Schema; check_value is the
# check, with one readable message instead of one per member of the union).
FlagItem = Union[StrictInt, StrictFloat, StrictStr]  # noqa: UP007 (pydantic reads this)
FlagValue = Union[StrictBool, StrictInt, StrictFloat, StrictStr, list[FlagItem], None]  # noqa: UP007

NAME = re.compile(r"(\+\+?)?[A-Za-z_][A-Za-z0-9_.\-]*")

HyperparameterStyle = Literal["--name value", "--name=value", "name=value"]
DEFAULT_STYLE: HyperparameterStyle = "--name value"
HYDRA_STYLE: HyperparameterStyle = "name=value"
# A string Hydra's override grammar reads as plain text; anything else is quoted.
HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_./:\-]*")


def check_name(name: str) -> None:
    if is_config_key(name):  # FILE:dotted.key, a key of a config file (config_keys.py)
        split_config_key(name)
        return
    if name.startswith("-"):
        raise ValueError(f"write the flag name without dashes: {name.lstrip('-')!r}, not {name!r}")
    if "=" in name:
        raise ValueError(
            f"write the flag name without '=' ({name.partition('=')[0]!r}): "
            'run_spec.hyperparameter_style "--name=value" or "name=value" writes name=value'
        )
    if not NAME.fullmatch(name):
        key = " (or a config file's key, FILE:dotted.key, FILE a .yaml, .yml or .json)"
        raise ValueError(
            "a flag name is a letter or _ then letters, digits, _ . or -"
            f"{key if ':' in name else ''}; got {name!r}"
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


def flag_label(name: str) -> str:
    """A hyperparameter as messages show it: its option, or a config file's key as named."""
    return name if is_config_key(name) else option(name)


def text(value: int | float | str) -> str:
    return value if isinstance(value, str) else repr(value)


def _style_text(value: object, style: HyperparameterStyle) -> str:
    """One value as the text of the style's name=value or --name value (not None)."""
    hydra = style == HYDRA_STYLE
    if isinstance(value, bool):
        return ("true" if value else "false") if hydra else str(value)
    if isinstance(value, list):  # a Python literal, or a Hydra list of its own values
        items = (_style_text(i, style) if hydra else repr(i) for i in value)
        return "[" + ", ".join(items) + "]"
    if hydra and isinstance(value, str) and not _hydra_plain(value):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return text(value)  # type: ignore[arg-type]


def _hydra_plain(value: str) -> bool:
    """True when Hydra reads this text back as the same string: not quoted, it must hold
    no grammar and not read as a boolean, null or number ("true", "1e-3" are quoted)."""
    if not HYDRA_PLAIN.fullmatch(value) or value.lower() in ("true", "false", "null"):
        return False
    try:
        float(value)
    except ValueError:
        return True
    return False


def flag_arguments(
    values: Mapping[str, object],
    style: HyperparameterStyle = DEFAULT_STYLE,
    bare_flags: Collection[str] = (),
) -> list[str]:
    """The command-line arguments for a script's hyperparameters (see the module's doc)."""
    arguments: list[str] = []
    for name, value in values.items():
        if value is None or (value == [] and style == DEFAULT_STYLE):
            continue
        if name in bare_flags:  # a store_true switch: there or not
            arguments += [option(name)] if value is True else []
        elif style == HYDRA_STYLE:
            arguments.append(f"{name}={_style_text(value, style)}")
        elif style == "--name=value":  # --x=1 too: a configurator strips two dashes
            arguments.append(f"--{name}={_style_text(value, style)}")
        elif isinstance(value, list):
            arguments += [option(name), *(text(item) for item in value)]
        else:
            arguments += [option(name), _style_text(value, style)]
    return arguments


def command_line(
    values: Mapping[str, object],
    style: HyperparameterStyle = DEFAULT_STYLE,
    arguments: Sequence[str] = (),
    bare_flags: Collection[str] = (),
) -> list[str]:
    """Everything after the entry point: the fixed arguments, then the flags."""
    return [*arguments, *flag_arguments(values, style, bare_flags)]


def environment_value(value: object) -> str:
    """A hyperparameter as the toolkit writes SM_HP_<NAME>: a string as it is, null as
    empty, anything else as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
