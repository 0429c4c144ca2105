"""Store readers: where the trial gets files from. Add a backend = add a module + a branch."""

from __future__ import annotations

import os

from remedy.debugger.readers.base import StoreReader
from remedy.debugger.readers.legacy import LegacyStoreReader, is_legacy_store
from remedy.debugger.readers.local import LocalStoreReader


def open_reader(path: str | os.PathLike[str]) -> StoreReader:
    location = os.fspath(path)
    if location.startswith("s3://"):
        from remedy.debugger.readers.s3 import S3StoreReader  # boto3 only when needed

        return S3StoreReader(location)
    if is_legacy_store(location):  # artifacts of the legacy debugger, read as they are
        return LegacyStoreReader(location)
    return LocalStoreReader(location)


__all__ = ["LegacyStoreReader", "LocalStoreReader", "StoreReader", "open_reader"]
