"""On-disk layout of a store folder, and atomic writes.

    meta.json          format name + version, created time, framework
    collections.json   {collection: {"tensor_names": [...], "save_config": {...}}}
    steps/<MODE>/<mode_step:012d>.safetensors
                       every tensor saved at one step, keyed by tensor name
    end.json           end-of-training marker: last step per mode, wall time

A store written by several processes (torchrun: one per rank) holds one such store per
worker, as the legacy library's worker_N files did, so no process ever writes another's
file:

    meta.json          as above, version 2, plus "workers": the number of processes
    workers/worker_<rank>/   meta.json, collections.json, steps/..., end.json of that rank

A step file's safetensors header is its index (a reader fetches one tensor without reading
the others); its metadata holds mode, mode_step, global_step and wall_time as strings.
Every file is written under a dot-prefixed temp name in the same folder and then
os.replace'd, so readers never see half a file and skip anything dot-prefixed.
No fsync: atomicity is for concurrent readers, not for surviving a power cut.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from remedy.debugger.modes import ModeKeys

FORMAT_NAME = "remedy-debugger"
FORMAT_VERSION = 1  # a store of one process, and each worker's part of a store of several
# The top of a store of several workers: a reader that knows only version 1 refuses it
# (StoreFormatError) instead of reading it as an empty store.
WORKERS_FORMAT_VERSION = 2

META_FILE = "meta.json"
COLLECTIONS_FILE = "collections.json"
END_FILE = "end.json"
STEPS_DIR = "steps"
STEP_SUFFIX = ".safetensors"
STEP_FILE_RE = re.compile(r"^(\d{12})\.safetensors$")
WORKERS_DIR = "workers"


@dataclass(frozen=True)
class StepHeader:
    """What a step file's header says: where the step sits and which tensors it holds."""

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    tensor_names: tuple[str, ...]

    def metadata(self) -> dict[str, str]:
        # safetensors metadata is str -> str only.
        return {
            "format": FORMAT_NAME,
            "version": str(FORMAT_VERSION),
            "mode": self.mode.value,
            "mode_step": str(self.mode_step),
            "global_step": str(self.global_step),
            "wall_time": repr(self.wall_time),
        }

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str], names: list[str]) -> StepHeader:
        """Raise KeyError/ValueError when the metadata is not ours."""
        return cls(
            mode=ModeKeys(metadata["mode"]),
            mode_step=int(metadata["mode_step"]),
            global_step=int(metadata["global_step"]),
            wall_time=float(metadata["wall_time"]),
            tensor_names=tuple(sorted(names)),
        )


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def step_dir(root: str | os.PathLike[str], mode: ModeKeys) -> Path:
    return Path(root) / STEPS_DIR / mode.value


def step_file_name(mode_step: int) -> str:
    return f"{mode_step:012d}{STEP_SUFFIX}"


def step_path(root: str | os.PathLike[str], mode: ModeKeys, mode_step: int) -> Path:
    return step_dir(root, mode) / step_file_name(mode_step)


def parse_step_file_name(name: str) -> int | None:
    """Mode step of a step file name, None for anything else (temp files, strays)."""
    match = STEP_FILE_RE.match(name)
    return int(match.group(1)) if match else None


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], None]) -> None:
    """Call `write(temp_path)` on a dot-prefixed temp file beside `path`, then rename it over."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        # Leave no temp litter behind on failure (readers ignore it, but disks fill).
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """Parsed JSON, or None when the file does not exist (yet)."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None


def write_meta(root: str | os.PathLike[str], framework: str, framework_version: str) -> None:
    write_json(
        Path(root) / META_FILE,
        {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "created": utc_now_iso(),
            "framework": framework,
            "framework_version": framework_version,
        },
    )


def write_collections(
    root: str | os.PathLike[str], collections: Mapping[str, Mapping[str, Any]]
) -> None:
    """`collections` maps name -> {"tensor_names": [...], "save_config": {...}}."""
    write_json(Path(root) / COLLECTIONS_FILE, dict(collections))


def write_step(
    root: str | os.PathLike[str], header: StepHeader, tensors: Mapping[str, np.ndarray]
) -> Path:
    """Write one step file holding all `tensors` (safetensors format); returns its path."""
    path = step_path(root, header.mode, header.mode_step)
    chunks = encode_safetensors(tensors, header.metadata())
    atomic_write(path, lambda tmp: _write_chunks(tmp, chunks))
    return path


def encode_safetensors(
    tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]
) -> list[bytes | memoryview]:
    """A safetensors file as buffers to write in order: the header, then each array's own
    memory (no serialised copy of the data; that halves the writer's CPU per step)."""
    entries: dict[str, Any] = {"__metadata__": dict(metadata)}
    buffers: list[memoryview] = []
    offset = 0
    for name in sorted(tensors):
        # Not np.ascontiguousarray: it turns a 0-d loss into shape (1,).
        array = np.require(tensors[name], requirements="C")
        if array.dtype.byteorder == ">" or (array.dtype.byteorder == "=" and _BIG_ENDIAN):
            array = array.astype(array.dtype.newbyteorder("<"))
        kind = _SAFETENSORS_NAMES.get(array.dtype.type)
        if kind is None:
            raise TypeError(f"cannot store {name!r} of dtype {array.dtype}")
        size = array.nbytes
        entries[name] = {
            "dtype": kind,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + size],
        }
        if size:
            buffers.append(memoryview(array.reshape(-1).view(np.uint8)))
        offset += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
    return [len(text).to_bytes(8, "little"), text, *buffers]


def _write_chunks(path: str, chunks: list[bytes | memoryview]) -> None:
    with open(path, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)


def write_end(
    root: str | os.PathLike[str], last_steps: Mapping[ModeKeys, int], global_step: int
) -> None:
    write_json(
        Path(root) / END_FILE,
        {
            "last_step": {mode.value: step for mode, step in last_steps.items()},
            "global_step": global_step,
            "wall_time": datetime.now(UTC).timestamp(),
            "time": utc_now_iso(),
        },
    )


def worker_name(rank: int) -> str:
    """The legacy library's name of a process: worker_<rank>."""
    return f"worker_{rank}"


def worker_location(root: str | os.PathLike[str], worker: str) -> str:
    """Where one worker's part of a store of several lives (a folder or an s3:// URI)."""
    location = os.fspath(root)
    if location.startswith("s3://"):
        return f"{location.rstrip('/')}/{WORKERS_DIR}/{worker}"
    return os.path.join(location, WORKERS_DIR, worker)


def workers_meta(workers: int, framework: str, framework_version: str) -> dict[str, Any]:
    """meta.json at the top of a store of several workers (each of them writes it)."""
    return {
        "format": FORMAT_NAME,
        "version": WORKERS_FORMAT_VERSION,
        "workers": workers,
        "created": utc_now_iso(),
        "framework": framework,
        "framework_version": framework_version,
    }


def meta_workers(meta: Mapping[str, Any] | None) -> int | None:
    """The number of workers a meta.json announces; None for a store of one process."""
    if not meta or "workers" not in meta:
        return None
    return int(meta["workers"])


def has_ended(root: str | os.PathLike[str]) -> bool:
    """True once a local store's writers have all written their end marker."""
    workers = meta_workers(read_json(Path(root) / META_FILE))
    if workers is None:
        return (Path(root) / END_FILE).exists()
    return all(
        (Path(worker_location(root, worker_name(rank))) / END_FILE).exists()
        for rank in range(workers)
    )


def is_store(root: str | os.PathLike[str]) -> bool:
    """True when the folder already holds (part of) a store."""
    root = Path(root)
    return (root / META_FILE).exists() or (root / STEPS_DIR).exists()


# -- reading step files without the safetensors library ------------------------------------
# Readers parse the header (the index) themselves: they cache each step's offsets and then
# fetch one tensor with one positioned read (local) or one ranged GET (S3).

SAFETENSORS_DTYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U64": np.uint64,
    "U32": np.uint32,
    "U16": np.uint16,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own bound
_SAFETENSORS_NAMES = {np.dtype(kind).type: name for name, kind in SAFETENSORS_DTYPES.items()}
_BIG_ENDIAN = sys.byteorder == "big"


@dataclass(frozen=True)
class TensorEntry:
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


def header_size(first8: bytes) -> int:
    """Size of the JSON header from a step file's first 8 bytes; ValueError if implausible."""
    if len(first8) < 8:
        raise ValueError("shorter than a safetensors header")
    size = int.from_bytes(first8[:8], "little")
    if size > MAX_HEADER_BYTES:
        raise ValueError(f"header size {size} is not plausible")
    return size


def parse_header(raw: bytes) -> tuple[dict[str, str], dict[str, TensorEntry]]:
    """(metadata, {name: entry}) from the JSON header bytes; ValueError if malformed."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("header is not a JSON object")
    base = 8 + len(raw)
    metadata = data.pop("__metadata__", None) or {}
    entries = {}
    for name, entry in data.items():
        kind = SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if kind is None:
            raise ValueError(f"unsupported dtype {entry.get('dtype')!r} for {name}")
        start, end = entry["data_offsets"]
        entries[name] = TensorEntry(
            np.dtype(kind).newbyteorder("<"), tuple(entry["shape"]), base + start, base + end
        )
    return metadata, entries
