"""Keys of a config file among a script's hyperparameters: `FILE:dotted.key`.

A script that reads its settings from a YAML or JSON file named on its command line
(`python train.py --config cfg.yaml`) has no flag for them. Its run_spec names a key of that
file as a hyperparameter, `"cfg.yaml:optimizer.lr": 30`, which roles map and strategies
change like any flag. It is never a flag: each attempt's launcher writes a copy of the file
with the attempt's values into the job's folder and passes the copy's path wherever the
command line names the file (docs/job-contract.md, "Keys of a config file").

- FILE is the path the command line names, relative to source_dir, ending in .yaml, .yml or
  .json; the key is its mapping keys joined by dots (`model.layers.0.width`: a whole-number
  part indexes a list);
- the copy keeps every other setting of the file; a YAML copy loses the file's comments.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

SUFFIXES = (".yaml", ".yml", ".json")
CONFIG_KEY = re.compile(r"(?P<file>[^:\0]+\.(?:yaml|yml|json)):(?P<key>[^:\0]+)")


class ConfigKeyError(ValueError):
    pass


def is_config_key(name: str) -> bool:
    return CONFIG_KEY.fullmatch(name) is not None


def split_config_key(name: str) -> tuple[str, str]:
    """(FILE, dotted key) of a config key; ConfigKeyError for any other name."""
    found = CONFIG_KEY.fullmatch(name)
    if found is None:
        raise ConfigKeyError(
            f"a config file's key is FILE:dotted.key, FILE ending in {', '.join(SUFFIXES)}; "
            f"got {name!r}"
        )
    file, key = found["file"], found["key"]
    if any(not part for part in key.split(".")):
        raise ConfigKeyError(f"{name}: the key {key!r} has an empty part between its dots")
    return file, key


def config_edits(values: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """{FILE: {key: value}} of the config keys among `values`, in their order."""
    edits: dict[str, dict[str, object]] = {}
    for name, value in values.items():
        if is_config_key(name):
            file, key = split_config_key(name)
            edits.setdefault(file, {})[key] = value
    return edits


def load_config(path: Path) -> Any:
    """The file's settings; ConfigKeyError naming it when it cannot be read or parsed."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigKeyError(f"{path}: {error.strerror or error}") from None
    try:
        tree = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as error:
        raise ConfigKeyError(f"{path}: not valid {path.suffix[1:].upper()}: {error}") from None
    if not isinstance(tree, dict):
        raise ConfigKeyError(f"{path}: holds no mapping of settings at its top")
    return tree


def dump_config(tree: Any, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(tree, indent=2) + "\n"
    return yaml.safe_dump(tree, sort_keys=False, default_flow_style=False)


def _step(node: Any, part: str, walked: str) -> tuple[Any, str | int]:
    """The container holding `part` under `node`, and its index there."""
    if isinstance(node, dict):
        if part not in node:
            keys = ", ".join(map(str, node)) or "none"
            raise ConfigKeyError(f"no key {part!r} at {walked or 'its top'} (keys there: {keys})")
        return node, part
    if isinstance(node, list):
        if not part.isdigit() or int(part) >= len(node):
            raise ConfigKeyError(
                f"{walked} is a list of {len(node)}: {part!r} is none of its indices"
            )
        return node, int(part)
    raise ConfigKeyError(f"{walked} is a value ({node!r}), not a mapping or list")


def get_key(tree: Any, key: str) -> Any:
    node = tree
    walked: list[str] = []
    for part in key.split("."):
        container, index = _step(node, part, ".".join(walked))
        node = container[index]
        walked.append(part)
    return node


def set_key(tree: Any, key: str, value: object) -> None:
    """Set an existing key: a key the file lacks is refused (a typo would be silent)."""
    *parents, last = key.split(".")
    node = get_key(tree, ".".join(parents)) if parents else tree
    container, index = _step(node, last, ".".join(parents))
    container[index] = value


def _same_path(text: str, file: str) -> bool:
    return bool(text) and os.path.normpath(text) == os.path.normpath(file)


def names_file(argument: str, file: str) -> bool:
    """True when a command-line argument names the file: `cfg.yaml`, `./cfg.yaml`,
    `--config=cfg.yaml` or Hydra's `config=cfg.yaml`."""
    return _same_path(argument, file) or _same_path(argument.partition("=")[2], file)


def with_copy(argument: str, file: str, copy: str) -> str:
    """The argument with the file's copy in its place (the argument itself otherwise)."""
    if _same_path(argument, file):
        return copy
    head, equals, tail = argument.partition("=")
    return f"{head}{equals}{copy}" if equals and _same_path(tail, file) else argument


def leaves(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every setting of the tree that is no mapping or list, as (dotted key, value)."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    found = []
    for part, value in items:
        key = f"{prefix}{part}"
        if isinstance(value, dict | list):
            found += leaves(value, f"{key}.")
        else:
            found.append((key, value))
    return found


def named_files(arguments: list[str]) -> list[str]:
    """The config files a command line names (`cfg.yaml`, `--config=cfg.yaml`)."""
    files = [argument.rpartition("=")[2] for argument in arguments]
    return [file for file in files if file.endswith(SUFFIXES)]
