"""Tiny real entry points for backend tests: same command line as remedy.training.train."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def parse() -> tuple[dict, Path]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hyperparameters", required=True)
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args()
    out = Path(args.output_dir)
    with (out / "launches.txt").open("a") as handle:  # counts real process starts
        handle.write(f"{os.getpid()}\n")
    return json.loads(Path(args.hyperparameters).read_text()), out


def stop_requested() -> bool:
    path = os.environ.get("REMEDY_STOP_FILE")
    return bool(path) and Path(path).exists()
