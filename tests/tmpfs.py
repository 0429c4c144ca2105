"""A real size-limited filesystem (tmpfs) for the full-disk cases of the adversarial suite."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def full_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "256k") mounted on folder, unmounted after; the test is
    skipped, saying why, where this machine cannot mount one (not root, no tmpfs)."""
    folder.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mount.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> None:
    """Fill folder's filesystem to the last byte."""
    descriptor = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(descriptor, b"\0" * 4096)
    except OSError:
        pass  # full
    finally:
        os.close(descriptor)
