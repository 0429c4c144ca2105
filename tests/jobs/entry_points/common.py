"""Tiny real entry points for backend tests, written to the job contract (script mode):
flags on the command line, the job folder in REMEDY_OUTPUT_DIR, the stop request in
REMEDY_STOP_FILE. The local backend runs them as `python -m remedy.training.launch -m
tests.jobs.entry_points.NAME --flag value ...`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def flags(argv: list[str]) -> dict[str, str | bool]:
    """--name value pairs, and a bare --name as True (what flag_arguments renders)."""
    found: dict[str, str | bool] = {}
    name = None
    for arg in argv:
        if arg.startswith("-") and not arg[1:2].isdigit():
            name = arg.lstrip("-")
            found[name] = True
        elif name is not None:
            found[name] = arg if found[name] is True else f"{found[name]} {arg}"
    return found


def parse() -> tuple[dict[str, str | bool], Path]:
    """(the flags it was given, the job folder); records each real process start."""
    out = Path(os.environ["REMEDY_OUTPUT_DIR"])
    with (out / "launches.txt").open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    return flags(sys.argv[1:]), out


def stop_requested() -> bool:
    path = os.environ.get("REMEDY_STOP_FILE")
    return bool(path) and Path(path).exists()


def report_step(out: Path, step: int, loss: float = 0.5) -> None:
    """progress.json as the built-in job writes it: the loss fell from 2.0 (it trained)."""
    progress = {"step": step, "epoch": 0, "loss": loss, "first_loss": 2.0}
    (out / ".progress").write_text(json.dumps(progress))
    (out / ".progress").replace(out / "progress.json")
