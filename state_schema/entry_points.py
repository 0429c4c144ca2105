"""What a run_spec's entry_point and source_dir may say, checked without touching the disk.

An entry point is either
- a module, run as `python -m MODULE` (the built-in job, remedy.training.train, is one), or
- a script, a path ending in .py relative to source_dir (or absolute), run as
  `python SCRIPT` with source_dir as the working directory.
Whether it exists is preflight's question (remedy.tasks.preflight): a payload stays valid on a
machine that does not have the code.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

BUILTIN_ENTRY_POINT = "remedy.training.train"
# Releases before the remedy namespace named the built-in job "training.train".
LEGACY_ENTRY_POINTS = {"training.train": BUILTIN_ENTRY_POINT}
SCRIPT_SUFFIX = ".py"

MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def is_script(entry_point: str) -> bool:
    """True for a script path (ends in .py), False for a module."""
    return entry_point.endswith(SCRIPT_SUFFIX)


def check_entry_point(entry_point: str) -> str:
    """The entry point (legacy names mapped), or ValueError saying what is wrong with it."""
    entry_point = LEGACY_ENTRY_POINTS.get(entry_point, entry_point)
    if is_script(entry_point):
        check_script_path(entry_point)
    elif not MODULE.fullmatch(entry_point):
        raise ValueError(
            f"expected a module (package.module, run with python -m) or a script path "
            f"ending in {SCRIPT_SUFFIX} (relative to source_dir), got {entry_point!r}"
        )
    return entry_point


def check_script_path(path: str) -> None:
    if "\\" in path or "\0" in path:
        raise ValueError(f"a script path uses / between folders, got {path!r}")
    parts = PurePosixPath(path).parts
    if ".." in parts:
        raise ValueError(f"the script must lie inside source_dir: no '..' in {path!r}")
    if PurePosixPath(path).name == SCRIPT_SUFFIX:
        raise ValueError(f"a script path names a file, got {path!r}")


def check_source_dir(source_dir: str | None) -> str | None:
    if source_dir is not None and (not source_dir.strip() or "\0" in source_dir):
        raise ValueError(f"source_dir must be a folder path or null, got {source_dir!r}")
    return source_dir
