"""On-disk layout of a store folder, and atomic writes.

    meta.json          format name + version, created time, framework
    collections.json   {collection: {"tensor_names": [...], "save_config": {...}}}
    steps/<MODE>/<mode_step:012d>.safetensors
                       every tensor saved at one step, keyed by tensor name
    steps/<MODE>/<first:012d>-<last:012d>.safetensors
                       a pack: several small steps of one mode, first to last, in one file
    end.json           end-of-training marker: last step per mode, wall time

A pack holds steps the writer was handed in one batch (debugger/writer.py): one file for
many loss-only steps instead of one each, because creating a file costs more than writing
a small step. Its tensors are keyed "<mode_step:012d>/<name>"; its metadata's "steps" lists
[mode_step, global_step, wall_time] of each step it holds, ascending, the first and last
those of its name (a step with no tensor is listed too). Packs and step files never share
a step. Stores that may hold packs are version 3 (PACKS_FORMAT_VERSION): a reader that
predates packs refuses them (StoreFormatError) instead of reading their steps as absent.

A store written by several processes (torchrun: one per rank) holds one such store per
worker, as the legacy library's worker_N files did, so no process ever writes another's
file:

    meta.json          as above, version 2, plus "workers": the number of processes
    workers/worker_<rank>/   meta.json, collections.json, steps/..., end.json of that rank

A step file's safetensors header is its index (a reader fetches one tensor without reading
the others); its metadata holds mode, mode_step, global_step and wall_time as strings, the
crc32 of each tensor's bytes ("crc32", a JSON object) and the crc32 of the header itself
("header_crc32"). meta.json and end.json carry a "crc32" of their own content, each entry of
collections.json one of its own (name included). end.json names the steps saved per mode
("saved_steps", as ranges), so a reader reports a missing step file instead of skipping
it. Stores written before the checksums read as before, unchecked, their saved steps
inferred from end.json's last steps and collections.json's save_configs (Trial).

Readers open regular files only (never a symlink, FIFO or device: those could point out of
the store, block or never end), and check every size against the header and the file size
before allocating anything.
Every file is written under a dot-prefixed temp name in the same folder and then
os.replace'd, so readers never see half a file and skip anything dot-prefixed.
No fsync: atomicity is for concurrent readers, not for surviving a power cut.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from remedy.debugger.exceptions import CorruptStepFile, CorruptStoreFile

try:  # the same crc32 as zlib's, 3-4x faster (SIMD): writer and readers spend most time here
    from isal.isal_zlib import crc32 as _fast_crc32
except ImportError:  # pragma: no cover - isal is a dependency; a stripped install still works
    _fast_crc32 = zlib.crc32
from remedy.debugger.modes import ModeKeys

FORMAT_NAME = "remedy-debugger"
# A store of one process, and each worker's part of a store of several; 1: before packs.
FORMAT_VERSION = 3
# The top of a store of several workers: a reader that knows only version 1 refuses it
# (StoreFormatError) instead of reading it as an empty store.
WORKERS_FORMAT_VERSION = 2
PACKS_FORMAT_VERSION = 3  # steps may lie in packs; step files name their worker
NEWEST_FORMAT_VERSION = 3  # what a reader of this version reads

META_FILE = "meta.json"
COLLECTIONS_FILE = "collections.json"
END_FILE = "end.json"
STEPS_DIR = "steps"
STEP_SUFFIX = ".safetensors"
STEP_FILE_RE = re.compile(r"^(\d{12})\.safetensors$")
PACK_FILE_RE = re.compile(r"^(\d{12})-(\d{12})\.safetensors$")
PACK_STEPS_KEY = "steps"  # in a pack's metadata
WORKER_KEY = "worker"  # in a step file's or pack's metadata, in a store of several workers
WORKERS_DIR = "workers"

CRC_KEY = "crc32"  # in meta.json, end.json, each collections.json entry, step metadata
# Step metadata: the crc32 of the header's bytes as written, its own 8 digits read as "0"s
# (checked on the raw bytes: no second JSON encoding per header read).
HEADER_CRC_KEY = "header_bytes_crc32"
# Files written before 2026-11-26: the crc32 of the header's canonical JSON, its own left out.
CANONICAL_HEADER_CRC_KEY = "header_crc32"
# The capture side computes the step files' checksums; False only to measure their cost.
WRITE_CHECKSUMS = True
MAX_JSON_BYTES = 64 * 1024 * 1024  # meta/collections/end: far above any real store's
MAX_DIMS = 64  # numpy's own limit on a tensor's dimensions
MAX_WORKERS = 65_536


@dataclass(frozen=True)
class StepHeader:
    """What a step file's header says: where the step sits and which tensors it holds."""

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    tensor_names: tuple[str, ...]
    # The process that wrote it, in a store of several (a file moved to another worker's
    # part is caught); None in a store of one process and in files written before packs.
    worker: str | None = None
    # the same names as a set: "does this step hold x" is asked at every tensor read
    _names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_names", frozenset(self.tensor_names))

    def holds(self, name: str) -> bool:
        return name in self._names

    def metadata(self) -> dict[str, str]:
        # safetensors metadata is str -> str only.
        metadata = {
            "format": FORMAT_NAME,
            "version": str(FORMAT_VERSION),
            "mode": self.mode.value,
            "mode_step": str(self.mode_step),
            "global_step": str(self.global_step),
            "wall_time": repr(self.wall_time),
        }
        if self.worker is not None:
            metadata[WORKER_KEY] = self.worker
        return metadata

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str], names: list[str]) -> StepHeader:
        """Raise KeyError/ValueError when the metadata is not ours."""
        return cls(
            mode=ModeKeys(metadata["mode"]),
            mode_step=int(metadata["mode_step"]),
            global_step=int(metadata["global_step"]),
            wall_time=float(metadata["wall_time"]),
            tensor_names=tuple(sorted(names)),
            worker=metadata.get(WORKER_KEY),
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


class StepFile(NamedTuple):
    """A file in a mode's steps folder: one step's (first == last, not packed) or a pack's."""

    first: int
    last: int
    name: str
    packed: bool


def parse_steps_folder_name(name: str) -> StepFile | None:
    """What a name in a steps folder holds; None for anything else (temp files, strays)."""
    step = parse_step_file_name(name)
    if step is not None:
        return StepFile(step, step, name, packed=False)
    match = PACK_FILE_RE.match(name)
    if match is None:
        return None
    first, last = int(match.group(1)), int(match.group(2))
    return StepFile(first, last, name, packed=True) if first <= last else None


def pack_file_name(first: int, last: int) -> str:
    return f"{first:012d}-{last:012d}{STEP_SUFFIX}"


def atomic_write(path: str | os.PathLike[str], write: Callable[[str], object]) -> None:
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


def open_regular(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(descriptor, size) of a regular file, opened without following a symlink and
    without blocking (a FIFO would wait for a writer for ever, /dev/zero never ends).
    FileNotFoundError when it is absent; CorruptStoreFile for anything else that is wrong."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptStoreFile(f"{path}: a symbolic link, not a store file") from None
        raise CorruptStoreFile(f"{path}: cannot be opened ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO, socket or device"
        raise CorruptStoreFile(f"{path}: {kind}, not a regular file")
    return fd, info.st_size


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """A whole regular file of at most `limit` bytes (see open_regular)."""
    fd, size = open_regular(path)
    try:
        if size > limit:
            raise CorruptStoreFile(f"{path}: {size} bytes, more than the {limit} allowed")
        data = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    if len(data) != size:
        raise CorruptStoreFile(f"{path}: changed while being read")
    return data


def parse_json(data: bytes, where: str) -> Any:
    """JSON from bytes; CorruptStoreFile naming `where` when it is not (UTF-8) JSON."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptStoreFile(f"{where}: not valid JSON ({_short(exc)})") from None


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """Parsed JSON, or None when the file does not exist (yet). CorruptStoreFile when it
    is not a regular file, too large or not JSON."""
    try:
        data = read_regular(path, MAX_JSON_BYTES)
    except FileNotFoundError:
        return None
    return parse_json(data, os.fspath(path))


def json_crc32(data: Mapping[str, Any], **extra: Any) -> str:
    """crc32 of a JSON object's canonical form, its own "crc32" left out (`extra` keys
    added: a collection's name, which is its key in collections.json)."""
    content = {k: v for k, v in data.items() if k != CRC_KEY} | extra
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return f"{zlib.crc32(text.encode()):08x}"


def with_crc(data: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    return {**data, CRC_KEY: json_crc32(data, **extra)}


def check_crc(data: Mapping[str, Any], where: str, **extra: Any) -> None:
    """Raise CorruptStoreFile when the object's "crc32" does not match its content (an
    object without one was written before checksums: nothing to check)."""
    if CRC_KEY not in data:
        return
    try:
        expected = json_crc32(data, **extra)
    except (TypeError, ValueError) as exc:  # NaN and the like: we never write them
        raise CorruptStoreFile(f"{where}: not canonical JSON ({exc})") from None
    if data[CRC_KEY] != expected:
        raise CorruptStoreFile(f"{where}: checksum mismatch (modified or damaged)")


def _short(exc: BaseException) -> str:
    return str(exc)[:200] or type(exc).__name__


def write_meta(root: str | os.PathLike[str], framework: str, framework_version: str) -> None:
    write_json(
        Path(root) / META_FILE,
        with_crc(
            {
                "format": FORMAT_NAME,
                "version": FORMAT_VERSION,
                "created": utc_now_iso(),
                "framework": framework,
                "framework_version": framework_version,
            }
        ),
    )


def write_collections(
    root: str | os.PathLike[str], collections: Mapping[str, Mapping[str, Any]]
) -> None:
    """`collections` maps name -> {"tensor_names": [...], "save_config": {...}}; each entry
    gets the crc32 of its content and name."""
    write_json(Path(root) / COLLECTIONS_FILE, sealed_collections(collections))


def sealed_collections(collections: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """collections.json's content: each entry with the crc32 of its content and name."""
    return {name: with_crc(entry, name=name) for name, entry in collections.items()}


def collections_crc32(data: Mapping[str, Any]) -> str:
    """crc32 of a whole collections.json, as end.json records it (the file is final then)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return f"{zlib.crc32(text.encode()):08x}"


def write_step(
    root: str | os.PathLike[str], header: StepHeader, tensors: Mapping[str, np.ndarray]
) -> Path:
    """Write one step file holding all `tensors` (safetensors format); returns its path."""
    # A string path: pathlib's parsing is a tenth of a small step's write.
    path = os.path.join(
        os.fspath(root), STEPS_DIR, header.mode.value, step_file_name(header.mode_step)
    )
    chunks = encode_safetensors(tensors, header.metadata(), checksums=WRITE_CHECKSUMS)
    _atomic_write_chunks(path, chunks)
    return Path(path)


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDERS_MADE: set[str] = set()  # step folders this process has created (or found)


def _atomic_write_chunks(path: str, chunks: list[bytes | memoryview]) -> None:
    """atomic_write for a step file, with the fewest system calls: the temp file is
    written through the descriptor that created it (one file per step adds up)."""
    folder, name = os.path.split(path)
    if folder not in _FOLDERS_MADE:
        os.makedirs(folder, exist_ok=True)
        _FOLDERS_MADE.add(folder)
    # One writer per store and process: the process id makes the temp name unique without
    # tempfile's random names (a third of a small step's write); mkstemp when it is taken.
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o600)
    except FileExistsError:  # left by a crashed process of the same id
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except FileNotFoundError:  # the folder was removed since: make it again
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    try:
        try:
            _write_all(fd, chunks)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def encode_safetensors(
    tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str], checksums: bool = True
) -> list[bytes | memoryview]:
    """A safetensors file as buffers to write in order: the header, then each array's own
    memory (no serialised copy of the data; that halves the writer's CPU per step).
    checksums: the crc32 of each tensor's bytes and of the header go in the metadata."""
    entries: dict[str, Any] = {}
    crcs: dict[str, str] = {}
    buffers: list[memoryview] = []
    offset = 0
    for name in sorted(tensors):
        array = tensors[name]
        if type(array) is not np.ndarray or not array.flags.c_contiguous:
            array = np.require(array, requirements="C")  # not ascontiguousarray: 0-d stays 0-d
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
        data = array.reshape(-1).view(np.uint8).data if size else memoryview(b"")
        if size:
            buffers.append(data)
        if checksums:
            crcs[name] = f"{crc32(data):08x}"
        offset += size
    meta = dict(metadata)
    if checksums:
        meta[CRC_KEY] = _dumps(crcs).decode()
    text = encode_header(meta, entries, checksum=checksums)
    return [len(text).to_bytes(8, "little"), text, *buffers]


def encode_header(
    metadata: Mapping[str, str], entries: Mapping[str, Any], checksum: bool = True
) -> bytes:
    """A step file's header bytes, padded to 8 as the format asks; with `checksum`, sealed:
    its HEADER_CRC_KEY holds the crc32 of these bytes with those 8 digits as zeros."""
    meta = dict(metadata)
    if checksum:  # sealed anew: an older seal would no longer match
        meta.pop(CANONICAL_HEADER_CRC_KEY, None)
        meta[HEADER_CRC_KEY] = _UNSEALED
    text = _dumps({"__metadata__": meta, **entries})
    text += b" " * (-len(text) % 8)
    return seal_header(text) if checksum else text


def seal_header(raw: bytes) -> bytes:
    """Header bytes holding a HEADER_CRC_KEY, with its 8 digits set to their checksum."""
    at = _header_crc_at(raw)
    unsealed = raw[:at] + _UNSEALED.encode() + raw[at + 8 :]
    return raw[:at] + f"{crc32(unsealed):08x}".encode() + raw[at + 8 :]


_UNSEALED = "0" * 8
_HEADER_CRC_FIELD = f'"{HEADER_CRC_KEY}":"'.encode()


def _header_crc_at(raw: bytes) -> int:
    """Where the header checksum's 8 digits lie in the header's bytes. The field's text
    cannot occur unescaped inside a string, so it occurs once (else: ValueError)."""
    if raw.count(_HEADER_CRC_FIELD) != 1:
        raise ValueError("its header checksum is not found exactly once")
    return raw.index(_HEADER_CRC_FIELD) + len(_HEADER_CRC_FIELD)


def check_header_crc(raw: bytes, metadata: Mapping[str, str], entries: Mapping[str, Any]) -> None:
    """ValueError when a header's checksum does not match its bytes (a header written
    before the checksums has none: nothing to check)."""
    if HEADER_CRC_KEY in metadata:
        at = _header_crc_at(raw)
        # The digits the JSON holds are those at `at` (the field is there once), and
        # sealing the bytes again must leave them as they are.
        if raw[at : at + 8] != metadata[HEADER_CRC_KEY].encode() or seal_header(raw) != raw:
            raise ValueError("header checksum mismatch (modified or damaged)")
    elif CANONICAL_HEADER_CRC_KEY in metadata:
        if metadata[CANONICAL_HEADER_CRC_KEY] != canonical_header_crc32(metadata, entries):
            raise ValueError("header checksum mismatch (modified or damaged)")


def _write_all(fd: int, chunks: list[bytes | memoryview]) -> None:
    """All buffers with as few system calls as the kernel allows (writev, IOV_MAX each)."""
    pending = [memoryview(c).cast("B") for c in chunks if len(c)]
    pending.reverse()  # popped from the end: the first buffer last
    while pending:
        written = os.writev(fd, pending[: -_IOV_MAX - 1 : -1])
        while written:  # drop what went out; a short write leaves part of a buffer
            if written >= len(pending[-1]):
                written -= len(pending.pop())
            else:
                pending[-1] = pending[-1][written:]
                written = 0


_IOV_MAX = 1024  # Linux's; writev takes no more buffers per call


def write_pack(
    root: str | os.PathLike[str],
    mode: ModeKeys,
    steps: Sequence[tuple[int, int, float]],
    tensors: Sequence[Mapping[str, np.ndarray]],
    worker: str | None = None,
) -> Path:
    """Write several steps of `mode`, each (mode_step, global_step, wall_time) ascending,
    with its tensors, as one pack (see the module docstring); returns its path."""
    if any(a[0] >= b[0] for a, b in zip(steps, steps[1:], strict=False)):
        raise ValueError("a pack holds ascending steps")
    packed = {
        f"{step[0]:012d}/{name}": array
        for step, arrays in zip(steps, tensors, strict=True)
        for name, array in arrays.items()
    }
    metadata = {
        "format": FORMAT_NAME,
        "version": str(FORMAT_VERSION),
        "mode": mode.value,
        PACK_STEPS_KEY: _dumps([list(step) for step in steps]).decode(),
    }
    if worker is not None:
        metadata[WORKER_KEY] = worker
    name = pack_file_name(steps[0][0], steps[-1][0])
    path = os.path.join(os.fspath(root), STEPS_DIR, mode.value, name)
    _atomic_write_chunks(path, encode_safetensors(packed, metadata, checksums=WRITE_CHECKSUMS))
    return Path(path)


def split_pack(
    metadata: Mapping[str, str], entries: Mapping[str, TensorEntry], mode: ModeKeys, file: StepFile
) -> dict[int, tuple[StepHeader, dict[str, TensorEntry]]]:
    """Each step of a pack, with its own tensors' entries (names without the step prefix,
    offsets those of the pack's file); ValueError when the pack is not one of `mode`'s
    holding steps `file.first` to `file.last`."""
    if metadata.get("format") != FORMAT_NAME or metadata.get("mode") != mode.value:
        raise ValueError(f"not a pack of {mode.value} steps")
    try:
        listed = _loads(metadata[PACK_STEPS_KEY])
        steps = [(int(s), int(g), float(w)) for s, g, w in listed]
    except (KeyError, TypeError, ValueError, RecursionError):
        raise ValueError("its list of steps is missing or malformed") from None
    numbers = [s for s, _, _ in steps]
    if (
        not numbers
        or numbers[0] != file.first
        or numbers[-1] != file.last
        or any(a >= b for a, b in zip(numbers, numbers[1:], strict=False))
    ):
        raise ValueError(f"its steps {numbers[:3]}... are not {file.first} to {file.last}")
    worker = metadata.get(WORKER_KEY)
    own: dict[int, dict[str, TensorEntry]] = {s: {} for s in numbers}
    for key, entry in entries.items():
        prefix, _, name = key.partition("/")
        held = own.get(int(prefix)) if len(prefix) == 12 and prefix.isdigit() else None
        if held is None or not name:
            raise ValueError(f"tensor {key[:100]!r} belongs to none of its steps")
        held[name] = entry
    return {
        step: (StepHeader(mode, step, global_step, wall, tuple(sorted(held)), worker), held)
        for (step, global_step, wall), held in zip(steps, own.values(), strict=True)
    }


def write_end(
    root: str | os.PathLike[str],
    last_steps: Mapping[ModeKeys, int],
    global_step: int,
    saved_steps: Mapping[ModeKeys, list[int]] | None = None,
    collections: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """The end marker; `saved_steps`: the mode steps that have a step file, per mode (a
    reader then reports a missing one); `collections`: as last written to collections.json
    (its checksum then covers the whole file, a collection dropped included)."""
    end: dict[str, Any] = {
        "last_step": {mode.value: step for mode, step in last_steps.items()},
        "global_step": global_step,
        "wall_time": datetime.now(UTC).timestamp(),
        "time": utc_now_iso(),
    }
    if saved_steps is not None:
        end["saved_steps"] = {mode.value: step_ranges(s) for mode, s in saved_steps.items()}
    if collections is not None:
        end["collections_crc32"] = collections_crc32(sealed_collections(collections))
    write_json(Path(root) / END_FILE, with_crc(end))


def step_ranges(steps: list[int]) -> list[list[int]]:
    """Ascending steps as [start, stop, stride] ranges: a run saved every N steps is one
    range, so end.json stays small however long the run."""
    ranges: list[list[int]] = []
    for step in sorted(set(steps)):
        if ranges:
            start, stop, stride = ranges[-1]
            count = len(range(start, stop, stride))
            if count == 1:  # a second step fixes the stride
                ranges[-1] = [start, step + 1, step - start]
                continue
            if step == stop - 1 + stride:
                ranges[-1][1] = step + 1
                continue
        ranges.append([step, step + 1, 1])
    return ranges


def saved_step_ranges(end: Mapping[str, Any], where: str) -> dict[ModeKeys, list[range]] | None:
    """end.json's saved steps per mode as ranges (not expanded: a damaged one could claim
    10**18 steps); None for an end marker written before it recorded them."""
    saved = end.get("saved_steps")
    if saved is None:
        return None
    if not isinstance(saved, dict):
        raise CorruptStoreFile(f"{where}: saved_steps is not an object")
    out: dict[ModeKeys, list[range]] = {}
    for mode_name, ranges in saved.items():
        try:
            mode = ModeKeys(mode_name)
        except ValueError:
            raise CorruptStoreFile(f"{where}: saved_steps names no mode {mode_name!r}") from None
        if not isinstance(ranges, list) or not all(
            isinstance(r, list) and len(r) == 3 and all(_is_count(v) for v in r) and r[2] > 0
            for r in ranges
        ):
            raise CorruptStoreFile(f"{where}: saved_steps[{mode_name!r}] is not a list of ranges")
        out[mode] = [range(*r) for r in ranges]
    return out


def _is_count(value: Any) -> bool:
    """A non-negative int that fits a file offset or a step number (JSON true is no count)."""
    return type(value) is int and 0 <= value < _COUNT_LIMIT


_COUNT_LIMIT = 2**63


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
    return with_crc(
        {
            "format": FORMAT_NAME,
            "version": WORKERS_FORMAT_VERSION,
            "workers": workers,
            "created": utc_now_iso(),
            "framework": framework,
            "framework_version": framework_version,
        }
    )


def meta_workers(meta: Any, where: str = META_FILE) -> int | None:
    """The number of workers a meta.json announces; None for a store of one process.
    CorruptStoreFile when it is not a count from 1 to MAX_WORKERS."""
    if not isinstance(meta, dict) or "workers" not in meta:
        return None
    workers = meta["workers"]
    if not _is_count(workers) or not 1 <= workers <= MAX_WORKERS:
        raise CorruptStoreFile(f"{where}: workers {workers!r} is not from 1 to {MAX_WORKERS}")
    return workers


def has_ended(root: str | os.PathLike[str]) -> bool:
    """True once a local store's writers have all written their end marker (False for a
    store whose meta.json is damaged: it did not end cleanly)."""
    try:
        workers = meta_workers(read_json(Path(root) / META_FILE))
    except CorruptStoreFile:
        return False
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
_LITTLE_ENDIAN = {n: np.dtype(kind).newbyteorder("<") for n, kind in SAFETENSORS_DTYPES.items()}
_BIG_ENDIAN = sys.byteorder == "big"


class TensorEntry(NamedTuple):  # a NamedTuple: built for every tensor of every header read
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int
    crc32: int | None = None  # of the tensor's bytes; None in files written before checksums


def header_size(first8: bytes, file_size: int | None = None) -> int:
    """Size of the JSON header from a step file's first 8 bytes; ValueError if implausible
    (larger than the format allows, or than the file)."""
    if len(first8) < 8:
        raise ValueError("shorter than a safetensors header")
    size = int.from_bytes(first8[:8], "little")
    if size > MAX_HEADER_BYTES:
        raise ValueError(f"header size {size} is not plausible")
    if file_size is not None and 8 + size > file_size:
        raise ValueError(f"header size {size} runs past the end of the file ({file_size} bytes)")
    return size


def crc32(data: bytes | memoryview) -> int:
    """crc32 (zlib's polynomial and value) of a buffer: every checksum of the format."""
    return _fast_crc32(data)


_loads: Callable[[bytes | str], Any] = json.loads
try:  # the same values as json.loads, 3x faster on a step file's header
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson comes with prefect; a job may lack it
    pass

# json.dumps with options builds an encoder per call.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"))
_orjson_dumps: Callable[[Any], bytes] | None = None
try:  # compact JSON, 5-10x faster than json's: a step's header is encoded per step
    from orjson import dumps as _orjson_dumps
except ImportError:  # pragma: no cover - orjson comes with prefect; a job may lack it
    pass


def _dumps(value: Any) -> bytes:
    """Compact JSON bytes; json's where orjson refuses (an int beyond 64 bits)."""
    if _orjson_dumps is not None:
        try:
            return _orjson_dumps(value)
        except TypeError:
            pass
    return _COMPACT_JSON.encode(value).encode()


_CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical_header_crc32(metadata: Mapping[str, str], entries: Mapping[str, Any]) -> str:
    """crc32 of a step file's header in canonical form, its own checksum left out: the
    header checksum of files written before 2026-11-26."""
    meta = {k: v for k, v in metadata.items() if k != CANONICAL_HEADER_CRC_KEY}
    text = _CANONICAL_JSON.encode([meta, dict(entries)])
    return f"{zlib.crc32(text.encode()):08x}"


def parse_header(
    raw: bytes, file_size: int | None = None
) -> tuple[dict[str, str], dict[str, TensorEntry]]:
    """(metadata, {name: entry}) from the JSON header bytes; ValueError if malformed.

    Every entry is checked before anything is allocated from it: a known dtype, a shape of
    at most MAX_DIMS non-negative ints whose size is exactly its byte range, a range inside
    the file (`file_size`, when known). The header's checksum is checked when it has one.
    """
    try:
        data = _loads(raw)  # no object hook: a hook per object costs 40 % more
    except RecursionError:
        raise ValueError("header nested too deeply") from None
    if not isinstance(data, dict):
        raise ValueError("header is not a JSON object")
    base = 8 + len(raw)
    data_size = None if file_size is None else file_size - base
    metadata = data.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError("__metadata__ is not an object of strings")
    check_header_crc(raw, metadata, data)
    # A tensor named twice would parse as its last entry: every entry holds one
    # "data_offsets" key (a name or metadata string holding that text is escaped: \").
    if raw.count(b'"data_offsets"') != len(data):
        raise ValueError("a key appears twice in the header, or an entry has no data_offsets")
    crcs = _tensor_crcs(metadata, data)
    entries = {}
    limit = _COUNT_LIMIT if data_size is None else min(_COUNT_LIMIT, data_size + 1)
    for name, entry in data.items():
        if type(entry) is not dict:
            raise ValueError(f"entry {name!r} is not an object")
        dtype = _LITTLE_ENDIAN.get(entry.get("dtype"))  # type: ignore[arg-type]
        if dtype is None:
            raise ValueError(f"unsupported dtype {entry.get('dtype')!r} for {name}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if type(shape) is not list or len(shape) > MAX_DIMS:
            raise ValueError(f"{name}: shape {str(shape)[:100]} is not a list of sizes")
        if type(offsets) is not list or len(offsets) != 2:
            raise ValueError(f"{name}: data_offsets {str(offsets)[:100]} are not two offsets")
        start, end = offsets
        if type(start) is not int or type(end) is not int or start < 0 or end < 0:
            raise ValueError(f"{name}: data_offsets {str(offsets)[:100]} are not two offsets")
        count = 1
        for size in shape:  # inline, not _is_count: this loop runs for every dimension read
            if type(size) is not int or not 0 <= size < _COUNT_LIMIT:
                raise ValueError(f"{name}: shape {str(shape)[:100]} is not a list of sizes")
            count *= size  # Python ints: an absurd shape cannot overflow into a small one
        if end >= _COUNT_LIMIT:
            raise ValueError(f"{name}: data_offsets {str(offsets)[:100]} are not two offsets")
        if start > end or count * dtype.itemsize != end - start:
            raise ValueError(f"{name}: shape {shape} does not fill bytes {start}..{end}")
        if end >= limit:
            raise ValueError(f"{name}: bytes {start}..{end} run past the end of the file")
        entries[name] = TensorEntry(dtype, tuple(shape), base + start, base + end, crcs.get(name))
    return metadata, entries


def _tensor_crcs(metadata: Mapping[str, str], entries: Mapping[str, Any]) -> dict[str, int]:
    """The per-tensor checksums a header lists, as ints ({} when written before checksums)."""
    if CRC_KEY not in metadata:
        return {}
    try:
        crcs = _loads(metadata[CRC_KEY])
    except (ValueError, RecursionError):
        raise ValueError("its tensor checksums are not JSON") from None
    if not isinstance(crcs, dict) or set(crcs) != set(entries):
        raise ValueError("its tensor checksums do not match its tensors")
    try:
        out = {name: int(text, 16) for name, text in crcs.items()}
    except (TypeError, ValueError):
        raise ValueError("its tensor checksums are not hexadecimal numbers") from None
    if not all(0 <= crc < 2**32 for crc in out.values()):
        raise ValueError("its tensor checksums are not 32-bit numbers")
    return out


def check_tensor(entry: TensorEntry, data: memoryview | bytes, where: str, name: str) -> None:
    """Raise CorruptStepFile when a tensor's bytes do not match their checksum."""
    if entry.crc32 is not None and crc32(data) != entry.crc32:
        raise CorruptStepFile(f"{where}: tensor {name!r} fails its checksum (damaged bytes)")


def check_step_data(
    entries: Mapping[str, TensorEntry], data: memoryview, start: int, where: str
) -> None:
    """Check every tensor of a step file at once: `data` holds the file's bytes from
    offset `start` to its end (readers verify a file once, at its first tensor read)."""
    for name, entry in entries.items():
        if entry.crc32 is not None:
            check_tensor(entry, data[entry.start - start : entry.end - start], where, name)
