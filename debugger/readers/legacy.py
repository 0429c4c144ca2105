"""Reader for stores written by the legacy debugger library (read-only, local folders).

Its layout, one set of files per worker (worker_<rank>, rank 0 alone unless the job saved
all workers):

    index/<NNNNNNNNN>/<global step>_<worker>.json   mode, mode_step, event file, and the
                                                    byte range of each tensor's record
    events/<global step>/<global step>_<worker>.tfevents   TFRecord Event records
    collections/000000000/<worker>_collections.json  collections (names, include_regex)
                                                     and _meta.num_workers; written
                                                     after the first step's index
    training_job_end.ts                              the job has ended

This reader maps it onto our StoreReader interface, so create_trial(), the rules and the
CLI work on artifacts users already have, reading what the legacy library's trial reads:

- modes: TRAIN, EVAL and PREDICT steps as they are. Steps in mode GLOBAL (the legacy
  hook's default when the script never called set_mode) read as TRAIN steps numbered by
  their global step, so rules (which read TRAIN) see them; trial.steps("GLOBAL") lists the
  same numbers the legacy trial's steps() did.
- reductions: `smdebug/reductions/<abs_><reduction>/<tensor>` entries read as reductions of
  <tensor> (TensorView.reduction_value), not as tensors of their own, as the legacy trial
  shows them.
- collections: a collection's tensor names plus every saved tensor its include_regex
  matches anywhere in the name (re.search), as the legacy trial selects them.
- workers: a store of several workers reads as ours of several (trial.workers(),
  value(step, worker=...)); their number is the collections file's num_workers.

A tensor is one positioned read of its record, checked by its crc32c: a torn or
half-written record is never decoded. What this reader cannot interpret (an index file of
another naming, mode or content, a reduction it does not know, a tensor saved as a shape
only, a worker that is not worker_<rank>, an ended store without collections) raises
StoreFormatError or CorruptStoreFile naming the file: it never reads as empty.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from remedy.debugger import store, tfevents
from remedy.debugger.collections import NORMS, REDUCTIONS, reduction_key, split_key
from remedy.debugger.exceptions import CorruptStepFile, CorruptStoreFile, StoreFormatError
from remedy.debugger.modes import STEP_MODES, ModeKeys
from remedy.debugger.readers.base import StoreReader

INDEX_DIR = "index"
END_MARKER = "training_job_end.ts"
COLLECTIONS_DIR = "collections/000000000"
REDUCTIONS_PREFIX = "smdebug/reductions/"
_INDEX_RE = re.compile(r"^(\d{12})_(.+)\.json$")
_COLLECTIONS_RE = re.compile(r"^(.+)_collections\.json$")
_WORKER_RE = re.compile(r"^worker_(\d+)$")
# The writer writes a file as <name>.tmp and renames it when complete.
_TEMP_SUFFIX = ".tmp"

# One tensor of one step: (its tag in the event file, start, length).
_Entry = tuple[str, int, int]


def is_legacy_store(location: str | os.PathLike[str]) -> bool:
    root = Path(location)
    return (root / INDEX_DIR).is_dir() and not (root / store.META_FILE).exists()


class LegacyStoreReader(StoreReader):
    def __init__(self, location: str | os.PathLike[str], worker: str | None = None) -> None:
        """`worker`: read that worker's files (a part of a store of several workers);
        None: the store's only worker, worker_0."""
        self.location = os.fspath(location)
        self.worker = worker or store.worker_name(0)
        self._part = worker is not None
        self._seen: set[str] = set()  # index files parsed (or of another worker)
        self._global_mode: str | None = None  # the first index file in mode GLOBAL
        self._train_mode: str | None = None  # the first index file in mode TRAIN
        self._tensor_names: set[str] = set()  # saved tensors (a reduction's: its tensor)
        # mode -> mode_step -> (global step, event file, {our name: entry})
        self._steps: dict[ModeKeys, dict[int, tuple[int, str, dict[str, _Entry]]]] = {
            mode: {} for mode in STEP_MODES
        }

    def child(self, relative: str) -> LegacyStoreReader:
        worker = relative.rpartition("/")[2]
        return LegacyStoreReader(self.location, worker=worker)

    def read_json(self, name: str) -> Any | None:
        if name == store.META_FILE:
            return self._meta()
        if name == store.COLLECTIONS_FILE:
            return self._collections()
        if name == store.END_FILE:
            if not self._ended():
                return None
            self._scan()  # every step is there once the end marker is
            return {"last_step": {m.value: max(s) for m, s in self._steps.items() if s}}
        return None

    def list_steps(self, mode: ModeKeys, start_after: int | None = None) -> list[int]:
        self._scan()
        floor = -1 if start_after is None else start_after
        return sorted(s for s in self._steps[mode] if s > floor)

    def read_header(self, mode: ModeKeys, mode_step: int) -> store.StepHeader:
        entry = self._steps[mode].get(mode_step)
        if entry is None:
            raise CorruptStepFile(f"{self.location}: no index for {mode.value} step {mode_step}")
        global_step, event_file, tensors = entry
        path = Path(self.location) / event_file
        try:
            fd, size = store.open_regular(path)  # never a FIFO, device or symlink
            try:
                head = os.pread(fd, tfevents.HEAD_BYTES, 0)
            finally:
                os.close(fd)
        except CorruptStoreFile as exc:
            raise CorruptStepFile(str(exc)) from None
        except OSError as exc:
            raise CorruptStepFile(f"{path}: cannot open: {exc.strerror}") from None
        covered = max(start + length for _, start, length in tensors.values())
        if size != covered:  # the legacy hook writes its records back to back
            raise CorruptStepFile(
                f"{path}: {size} bytes, but its index names records up to byte {covered}"
            )
        # The step's time is its first record's, as the writer stamped it (a file's mtime
        # changes when the store is copied or touched).
        first = next(length for _, start, length in tensors.values() if start == 0)
        try:
            length, wall_time = tfevents.record_head(head)
            if length != first:
                raise tfevents.RecordError(f"its first record is {length} bytes, not {first}")
        except tfevents.RecordError as exc:
            raise CorruptStepFile(f"{path}: {exc}") from None
        return store.StepHeader(
            mode=mode,
            mode_step=mode_step,
            global_step=global_step,
            wall_time=wall_time,
            tensor_names=tuple(sorted(tensors)),
        )

    def read_tensor(self, mode: ModeKeys, mode_step: int, name: str) -> np.ndarray:
        global_step, event_file, tensors = self._steps[mode][mode_step]
        tag, start, length = tensors[name]
        path = Path(self.location) / event_file
        try:
            fd, size = store.open_regular(path)  # never a FIFO, device or symlink
            try:
                if start + length > size:
                    raise ValueError(f"truncated: {start}..{start + length} runs past its end")
                record = os.pread(fd, length, start)
            finally:
                os.close(fd)
            event = tfevents.decode_event(tfevents.unframe(record))
        except (OSError, ValueError, CorruptStoreFile) as exc:
            raise CorruptStepFile(f"{path}: cannot read {tag}: {exc}") from None
        if event.step != global_step:
            raise CorruptStepFile(
                f"{path}: the record at {start} is of step {event.step}, not {global_step}"
            )
        for value in event.values:
            if value.tag == tag and value.tensor is not None:
                return value.tensor
        raise CorruptStepFile(f"{path}: the record at {start} does not hold {tag}")

    # -- the store's files ----------------------------------------------------------------

    def _ended(self) -> bool:
        return (Path(self.location) / END_MARKER).exists()

    def _collection_files(self) -> dict[str, Path]:
        """{worker: its collections file}, for the files the writer has completed."""
        folder = Path(self.location) / COLLECTIONS_DIR
        if not folder.is_dir():
            return {}
        found = {}
        for path in sorted(folder.iterdir()):
            if path.name.endswith(_TEMP_SUFFIX):
                continue  # still being written
            match = _COLLECTIONS_RE.match(path.name)
            if match is None:
                raise StoreFormatError(
                    f"{path}: not a collections file (<worker>_collections.json)"
                )
            found[_worker(match.group(1), path)] = path
        return found

    def _meta(self) -> dict[str, Any] | None:
        """Our meta.json's view: None until the writer's first collections file is there
        (the legacy trial waits for it too), then the number of workers it announces."""
        meta: dict[str, Any] = {"format": store.FORMAT_NAME, "version": 1, "legacy": True}
        if self._part:
            return meta  # one worker's part: the trial asks the top how many there are
        files = self._collection_files()
        if not files:
            self._check_not_empty()
            return None
        first = next(iter(files.values()))
        announced = (_read_object(first).get("_meta") or {}).get("num_workers", 1)
        if not isinstance(announced, int) or isinstance(announced, bool) or announced < 1:
            raise StoreFormatError(f"{first}: num_workers {announced!r} is not a count")
        ranks = [int(_WORKER_RE.match(w).group(1)) for w in files]  # type: ignore[union-attr]
        workers = max(announced, max(ranks) + 1)
        if workers > 1:
            meta.update(version=store.WORKERS_FORMAT_VERSION, workers=workers)
        return meta

    def _check_not_empty(self) -> None:
        """An ended store with index files but no collections file would list no steps."""
        folder = Path(self.location) / COLLECTIONS_DIR
        index = Path(self.location) / INDEX_DIR
        if self._ended() and index.is_dir() and any(index.rglob("*.json")):
            raise CorruptStoreFile(
                f"{folder}: no collections file, although the store has ended and "
                f"{index} holds index files"
            )

    def _collections(self) -> dict[str, Any] | None:
        path = Path(self.location) / COLLECTIONS_DIR / f"{self.worker}_collections.json"
        data = store.read_json(path)
        if data is None:
            if self._steps_seen() or self._ended():
                why = f"{self.worker} wrote steps" if self._steps_seen() else "the job has ended"
                raise CorruptStoreFile(f"{path}: missing, although {why}")
            return None
        entries = data.get("collections") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            raise StoreFormatError(f'{path}: no "collections" object')
        out: dict[str, dict[str, Any]] = {}
        for cname, entry in entries.items():
            names = entry.get("tensor_names", []) if isinstance(entry, dict) else None
            regexes = entry.get("include_regex", []) if isinstance(entry, dict) else None
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise StoreFormatError(f"{path}: collection {cname!r} is not a collection")
            if not isinstance(regexes, list):
                raise StoreFormatError(f"{path}: collection {cname!r} is not a collection")
            try:
                patterns = [re.compile(r) for r in regexes]
            except (re.error, TypeError) as exc:
                raise StoreFormatError(f"{path}: collection {cname!r}: {exc}") from None
            matched = {n for n in self._tensor_names if any(p.search(n) for p in patterns)}
            out[cname] = {"tensor_names": sorted(set(names) | matched)}
            saving = self._save_config(entry.get("save_config"))
            if saving is not None:
                out[cname]["save_config"] = saving
        return out

    def _save_config(self, config: Any) -> dict[str, Any] | None:
        """A legacy collection's save_config as ours, when it has one per mode, so the trial
        reports a missing step (as in a store of ours written before end.json named its
        steps). GLOBAL steps read as TRAIN: their TRAIN config is the GLOBAL one."""
        fields = ("save_interval", "start_step", "end_step", "save_steps")
        train = ModeKeys.GLOBAL if self._global_mode else ModeKeys.TRAIN
        source = {m: train if m is ModeKeys.TRAIN else m for m in STEP_MODES}
        if not isinstance(config, dict) or not all(
            isinstance(config.get(m.value), dict) for m in source.values()
        ):
            return None
        modes = {m.value: {k: config[s.value].get(k) for k in fields} for m, s in source.items()}
        return modes[ModeKeys.TRAIN.value] | {"modes": modes}

    def _steps_seen(self) -> bool:
        return any(self._steps.values())

    def _scan(self) -> None:
        """Parse index files not seen yet, once this worker's collections file is there
        (it comes after the first step's index; the legacy trial waits for it too). One
        that does not parse is being written: it and every later one wait for the next
        scan (listings stay gap-free), unless the job has ended."""
        root = Path(self.location) / INDEX_DIR
        collections = Path(self.location) / COLLECTIONS_DIR / f"{self.worker}_collections.json"
        if not root.is_dir() or not collections.exists():
            return
        names = sorted(
            (folder.name, entry.name)
            for folder in root.iterdir()
            if folder.is_dir()
            for entry in folder.iterdir()
            if not entry.name.endswith(_TEMP_SUFFIX)
        )
        ended = self._ended()
        for folder, name in names:
            key = f"{folder}/{name}"
            if key in self._seen:
                continue
            path = root / folder / name
            match = _INDEX_RE.match(name)
            if match is None:
                raise StoreFormatError(f"{path}: not an index file (<step>_<worker>.json)")
            if _worker(match.group(2), path) != self.worker:
                self._seen.add(key)
                continue
            try:
                index = json.loads(store.read_regular(path, store.MAX_JSON_BYTES))
            except (OSError, ValueError, RecursionError) as exc:
                if ended:
                    raise CorruptStoreFile(f"{path}: not an index file ({exc})") from None
                return
            self._add(path, int(match.group(1)), index)
            self._seen.add(key)

    def _add(self, path: Path, global_step: int, index: Any) -> None:
        try:
            meta = index["meta"]
            mode = ModeKeys(str(meta["mode"]).strip())
            mode_step = meta["mode_step"]
            if not store._is_count(mode_step):
                raise ValueError(f"mode_step {mode_step!r} is not a step")
            event_file = str(meta["event_file_name"])
            raw = _payload(index["tensor_payload"])  # the hook writes it, empty or not
            shapes = index.get("shape_payload") or []
            shape_names = [_text(s["tensorname"]) for s in shapes]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            known = f"{path}: not an index file the reader knows ({exc!r})"
            raise StoreFormatError(known) from None
        expected = f"events/{path.name[:12]}/{path.name[:12]}_{self.worker}.tfevents"
        if event_file != expected:
            raise CorruptStoreFile(f"{path}: names event file {event_file!r}, not {expected!r}")
        tensors = {_our_name(tag, path): (tag, start, length) for tag, start, length in raw}
        if len(tensors) != len(raw):  # two entries of one tensor (or of one reduction)
            raise StoreFormatError(f"{path}: names a tensor twice in tensor_payload")
        saved = {split_key(name)[0] for name in tensors}
        only_shapes = sorted(set(shape_names) - saved)
        if only_shapes:
            raise StoreFormatError(
                f"{path}: holds only the shape of {', '.join(only_shapes[:5])} "
                "(ReductionConfig(save_shape=True)); remedy reads tensor values and reductions"
            )
        if mode is ModeKeys.GLOBAL:
            # The legacy hook's default without set_mode(): read as TRAIN, numbered by the
            # global step (its mode_step), which is how the legacy trial lists them.
            self._global_mode = self._global_mode or str(path)
            mode = ModeKeys.TRAIN
        elif mode is ModeKeys.TRAIN:
            self._train_mode = self._train_mode or str(path)
        if self._global_mode and self._train_mode:
            raise StoreFormatError(
                f"{path}: {self.worker} wrote steps in mode GLOBAL ({self._global_mode}) and "
                f"TRAIN ({self._train_mode}); remedy reads GLOBAL steps as TRAIN steps and "
                "cannot tell them apart"
            )
        if not tensors:
            return  # a step that saved nothing: the legacy trial lists none either
        self._steps[mode][mode_step] = (global_step, event_file, tensors)
        self._tensor_names.update(saved)


def _our_name(tag: str, path: Path) -> str:
    """A tensor's name in our store: the legacy reduction entry of a tensor becomes our
    reduction key of that tensor."""
    if not tag.startswith(REDUCTIONS_PREFIX):
        return tag
    reduction, _, tensor = tag[len(REDUCTIONS_PREFIX) :].partition("/")
    absolute = reduction.startswith("abs_")
    reduction = reduction.removeprefix("abs_")
    if reduction not in REDUCTIONS and reduction not in NORMS or not tensor:
        raise StoreFormatError(f"{path}: {tag} is not a reduction the reader knows")
    return reduction_key(tensor, reduction, absolute)


def _payload(entries: Any) -> list[_Entry]:
    """An index file's tensor_payload: (tag, start, length) of each record, the records
    back to back from byte 0 (as the legacy hook writes them). TypeError or ValueError
    otherwise (a float name, a negative or absurd length, an entry dropped)."""
    if not isinstance(entries, list):
        raise TypeError("tensor_payload is not a list")
    out: list[_Entry] = []
    for entry in entries:
        tag, start, length = _text(entry["tensorname"]), entry["start_idx"], entry["length"]
        if not (store._is_count(start) and store._is_count(length) and length > 0):
            raise ValueError(f"{tag}: start_idx {start!r}, length {length!r} are not a range")
        out.append((tag, start, length))
    end = 0
    for _, start, length in sorted(out, key=lambda e: e[1]):
        if start != end:
            raise ValueError(f"tensor_payload leaves or overlaps bytes at {end}..{start}")
        end = start + length
    return out


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a name")
    return value


def _worker(name: str, path: Path) -> str:
    if _WORKER_RE.match(name) is None:
        raise StoreFormatError(
            f"{path}: worker {name!r} is not worker_<rank>; remedy reads the PyTorch hook's "
            "workers (torch.distributed, Horovod and SMDDP ranks)"
        )
    return name


def _read_object(path: Path) -> dict[str, Any]:
    data = store.read_json(path)
    if not isinstance(data, dict):
        raise StoreFormatError(f"{path}: not a JSON object")
    return data
