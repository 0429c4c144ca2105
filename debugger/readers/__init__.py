"""Store readers: where the trial gets files from. Add a backend = add a module + a branch."""

from __future__ import annotations

import os

from debugger.readers.base import StoreReader
from debugger.readers.local import LocalStoreReader


def open_reader(path: str | os.PathLike[str]) -> StoreReader:
    location = os.fspath(path)
    if location.startswith("s3://"):
        # Later: readers/s3.py (ListObjectsV2 StartAfter for new steps, ranged GETs per tensor).
        raise NotImplementedError("s3:// stores are not supported yet; use a local path")
    return LocalStoreReader(location)


__all__ = ["LocalStoreReader", "StoreReader", "open_reader"]
