"""Reader for a store under an s3:// URI: incremental listings and ranged GETs.

New steps are listed with ListObjectsV2 StartAfter (keys sort like step numbers), and a
step file is read without downloading it (a pack of small steps too: its header, the list
of its steps, is read when it is listed): one ranged GET for its header (the index, usually
in one go, with the first tensors after it), then one per tensor not yet brought, reading a
little ahead. Rules read a step's tensors in name order, the order of the file, so a rule
reading every tensor costs a few GETs a step instead of one a tensor (each GET is a round
trip and a billed request), while a rule reading one tensor never brings the rest of a
large step. The writer uploads steps one after another, each with a single PUT, so a
listing is gap-free and never shows half an object.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.exceptions import CorruptStepFile, CorruptStoreFile
from remedy.debugger.modes import ModeKeys
from remedy.debugger.readers.base import FileKey, StepFileReader
from remedy.debugger.s3 import client, is_missing, parse_uri

_FIRST_GET = 65_536  # one ranged GET usually brings the whole header
_READ_AHEAD = 1_048_576  # a tensor's GET brings up to this many bytes of those after it
_STEPS_KEPT = 4  # objects whose fetched bytes are kept (the evaluator reads one step at a time)


class S3StoreReader(StepFileReader):
    def __init__(self, location: str) -> None:
        super().__init__()
        self.location = location
        self._where = parse_uri(location)
        self._client = client()
        # object key -> the bytes fetched last, from a file offset: the header's GET, then
        # each read-ahead window. Only the latest objects, so memory stays bounded.
        self._fetched: dict[str, tuple[int, bytes]] = {}

    def child(self, relative: str) -> S3StoreReader:
        return S3StoreReader(f"{self.location.rstrip('/')}/{relative}")

    def exists(self, relative: str) -> bool:
        prefix = self._where.key(relative)
        found = self._client.list_objects_v2(Bucket=self._where.bucket, Prefix=prefix, MaxKeys=1)
        return bool(found.get("Contents"))

    def read_json(self, name: str) -> Any | None:
        key = self._where.key(name)
        where = f"s3://{self._where.bucket}/{key}"
        try:
            response = self._client.get_object(Bucket=self._where.bucket, Key=key)
        except Exception as error:
            if is_missing(error):
                return None
            raise
        if response.get("ContentLength", 0) > store.MAX_JSON_BYTES:
            response["Body"].close()
            raise CorruptStoreFile(f"{where}: larger than {store.MAX_JSON_BYTES} bytes")
        return store.parse_json(response["Body"].read(), where)

    def list_steps(self, mode: ModeKeys, start_after: int | None = None) -> list[int]:
        prefix = self._where.key(f"{store.STEPS_DIR}/{mode.value}/")
        kwargs: dict[str, Any] = {"Bucket": self._where.bucket, "Prefix": prefix}
        if start_after is not None:  # a pack starting at start_after + 1 sorts after this
            kwargs["StartAfter"] = prefix + store.step_file_name(start_after)
        floor = -1 if start_after is None else start_after
        files = []
        for page in self._client.get_paginator("list_objects_v2").paginate(**kwargs):
            for item in page.get("Contents", []):
                file = store.parse_steps_folder_name(item["Key"][len(prefix) :])
                if file is not None and file.last > floor:
                    files.append(file)
        return self._steps_in(mode, files, floor)

    def _parse_header(self, file: FileKey) -> tuple[dict[str, str], dict[str, store.TensorEntry]]:
        """An object's parsed header, its first bytes kept for the tensors after it."""
        key = self._key(file)
        where = f"s3://{self._where.bucket}/{key}"
        try:
            response = self._get_object(key, 0, _FIRST_GET)
            head = response["Body"].read()
            file_size = _object_size(response)
            size = store.header_size(head, file_size)
            raw = head[8 : 8 + size]
            if len(raw) < size:
                raw = self._get(key, 8, 8 + size)
            if len(raw) != size:
                raise ValueError("truncated header")
            parsed = store.parse_header(raw, file_size)
        except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptStepFile(f"{where}: not a debugger step file ({exc})") from None
        except Exception as exc:
            if is_missing(exc):  # e.g. a range past the end of an empty object
                raise CorruptStepFile(f"{where}: unreadable step file ({exc})") from None
            raise
        self._keep(key, 0, head)
        return parsed

    def _file_location(self, file: FileKey) -> str:
        return f"s3://{self._where.bucket}/{self._key(file)}"

    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        entries = self._step_entries(mode, mode_step)
        entry = entries[name]
        key = self._key(self._file_of(mode, mode_step))
        size = entry.end - entry.start
        data = self._bytes(key, entry, entries) if size else b""
        where = f"s3://{self._where.bucket}/{key}"
        if len(data) != size:  # a truncated object: never hand out part of a tensor
            raise CorruptStepFile(f"{where}: truncated tensor {name}")
        store.check_tensor(entry, data, where, name)
        return np.frombuffer(data, dtype=entry.dtype).reshape(entry.shape).copy()

    def _bytes(
        self, key: str, entry: store.TensorEntry, entries: dict[str, store.TensorEntry]
    ) -> bytes:
        """A tensor's bytes: from what was fetched already, else one GET from its start to
        the end of the last tensor (of its step) that ends within the read-ahead (tensors
        lie back to back, so the GET is at most the tensor and the read-ahead)."""
        offset, fetched = self._fetched.get(key, (0, b""))
        if offset <= entry.start and entry.end <= offset + len(fetched):
            return fetched[entry.start - offset : entry.end - offset]
        ahead = entry.end + _READ_AHEAD
        end = max(e.end for e in entries.values() if entry.start <= e.start and e.end <= ahead)
        window = self._get(key, entry.start, end)
        self._keep(key, entry.start, window)
        return window[: entry.end - entry.start]

    def _keep(self, key: str, offset: int, fetched: bytes) -> None:
        self._fetched.pop(key, None)
        self._fetched[key] = (offset, fetched)  # the newest last
        while len(self._fetched) > _STEPS_KEPT:
            del self._fetched[next(iter(self._fetched))]

    def _key(self, file: FileKey) -> str:
        """The object key of a step file or pack."""
        return self._where.key(f"{store.STEPS_DIR}/{file[0].value}/{file[1]}")

    def _get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self._get_object(key, start, end)["Body"].read()

    def _get_object(self, key: str, start: int | None = None, end: int | None = None) -> Any:
        kwargs: dict[str, Any] = {"Bucket": self._where.bucket, "Key": key}
        if start is not None and end is not None:
            kwargs["Range"] = f"bytes={start}-{end - 1}"  # HTTP ranges are inclusive
        return self._client.get_object(**kwargs)


def _object_size(response: Any) -> int | None:
    """The whole object's size from a ranged GET's Content-Range ("bytes 0-9/1234")."""
    total = str(response.get("ContentRange", "")).rpartition("/")[2]
    if total.isdigit():
        return int(total)
    length = response.get("ContentLength")
    return length if isinstance(length, int) and "ContentRange" not in response else None
