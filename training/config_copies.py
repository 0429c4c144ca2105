"""Each attempt's own copies of the config files its run_spec's keys name (FILE:dotted.key,
remedy.state_schema.config_keys): the file read from the job's working directory, the
attempt's values set, written into the job's output folder, and the command line's mention
of the file pointed at the copy. The user's file is never written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from remedy.state_schema.config_keys import (
    ConfigKeyError,
    dump_config,
    get_key,
    load_config,
    names_file,
    set_key,
    with_copy,
)
from remedy.state_schema.job_env import CONFIG_COPIES_DIR


def write_copies(
    edits: Mapping[str, Mapping[str, object]],
    args: list[str],
    output_dir: Path | None,
    log: Callable[[str], None],
) -> list[str]:
    """The arguments with each edited file's copy in its place; ConfigKeyError naming the
    file and key when a file cannot be read or lacks a key, or no argument names it."""
    folder = (output_dir or Path(tempfile.mkdtemp(prefix="remedy-config-"))) / CONFIG_COPIES_DIR
    for index, (file, values) in enumerate(edits.items()):
        source = Path(file)
        tree = load_config(source)
        changed = []
        for key, value in values.items():
            try:
                before = get_key(tree, key)
                set_key(tree, key, value)
            except ConfigKeyError as error:
                raise ConfigKeyError(f"{file}:{key}: {error}") from None
            was = "" if before == value else f" (the file's {before!r})"
            changed.append(f"{key} {value!r}{was}")
        if not any(names_file(argument, file) for argument in args):
            raise ConfigKeyError(f"{file}: no argument names it, so no copy can reach the job")
        # Files of one name from two folders each get a folder of their own.
        copy = folder / (str(index) if index else "") / source.name
        write_atomically(copy, dump_config(tree, source.suffix))
        args = [with_copy(argument, file, str(copy)) for argument in args]
        log(f"{file}: {', '.join(changed)} (this attempt's copy: {copy})")
    return args


def write_atomically(path: Path, text: str) -> None:
    """Every rank of a torchrun job writes the same copy: whole, by rename, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as out:
        out.write(text)
    os.replace(temporary, path)
