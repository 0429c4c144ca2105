"""Trial: the analysis API over one store, usable while the job is still writing it.

    trial = create_trial("/tmp/store")
    trial.steps()                                   # TRAIN steps written so far
    trial.tensor_names(collection="gradients")
    trial.tensor("loss").value(10)                  # np.ndarray
    trial.tensor("gradient/fc.weight").reduction_value(10, "mean", abs=True)
    trial.wait_for_steps([20, 30])                  # block until written (or never will be)
    trial.refresh()                                 # pick up steps written since

A store written by several processes (torchrun) holds one part per worker; the trial reads
them all, as the legacy library's did:

    trial.workers()                                 # ["worker_0", "worker_1"]
    trial.steps()                                   # steps no worker may still write
    trial.tensor("loss").value(10)                  # the first worker that saved it
    trial.tensor("loss").value(10, worker="worker_1")
    trial.tensor("loss").workers(10)                # who saved it at step 10
    trial.worker("worker_1")                        # a Trial of that worker's part alone

A store of one process has the one worker "worker_0" and reads exactly as before.

Reads are incremental: refresh() lists only step files newer than the last one seen and
reads only their headers; tensor values are read on demand, one tensor at a time.
A step lookup that misses refreshes once before raising, so a follower need not call
refresh() itself. Not thread-safe.

A damaged store is never read silently: refresh() raises a CorruptStoreFile naming the file
and what is wrong (a step file that is not one, a symlink, FIFO or device, JSON that is not
an object or fails its checksum, collections.json missing although steps are there) after
adding the steps before it, and IncompleteStore when end.json names steps whose files
are missing. It raises again at every refresh until the store is repaired.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.collections import NORMS, REDUCTIONS, reduction_key, split_key
from remedy.debugger.config import SaveConfig
from remedy.debugger.exceptions import (
    ConfigError,
    CorruptStepFile,
    CorruptStoreFile,
    IncompleteStore,
    InvalidWorker,
    StepNotYetAvailable,
    StepUnavailable,
    StoreFormatError,
    TensorUnavailable,
    TensorUnavailableForStep,
)
from remedy.debugger.modes import STEP_MODES, ModeKeys
from remedy.debugger.readers import StoreReader, open_reader


def create_trial(path: str | os.PathLike[str], name: str | None = None) -> Trial:
    """A trial over the store at `path` (a local folder; it may not exist yet)."""
    return Trial(open_reader(path), name=name)


class Trial:
    def __init__(
        self, reader: StoreReader, name: str | None = None, *, worker: str | None = None
    ) -> None:
        """`worker`: this trial reads that worker's part of a store of several workers."""
        self.reader = reader
        self.name = name or reader.location
        self._worker = worker
        self.tensor_reads = 0  # tensor() calls that found their tensor
        # A store of several workers: one trial per worker, in rank order (set by the top
        # meta.json, which every worker writes before its first step).
        self._parts: list[Trial] | None = None
        self._headers: dict[ModeKeys, dict[int, store.StepHeader]] = {m: {} for m in STEP_MODES}
        self._steps: dict[ModeKeys, list[int]] = {m: [] for m in STEP_MODES}
        self._last_listed: dict[ModeKeys, int | None] = dict.fromkeys(STEP_MODES)
        self._global: dict[int, store.StepHeader] = {}
        self._global_steps: list[int] = []
        self._tensor_steps: dict[str, dict[ModeKeys, list[int]]] = {}
        self._collections: dict[str, set[str]] = {}
        self._collection_order: dict[str, list[str]] = {}
        self._meta_checked = False
        self._format_version = 0  # meta.json's, once read
        self._files_worker: str | None = None  # the worker the step files name (_check_worker)
        self._files_worker_known = False
        self._collections_crc32 = ""  # of collections.json as last read
        self._save_configs: dict[str, dict[str, Any]] = {}  # collection -> its save_config
        self._end: dict[str, Any] | None = None
        self._complete = False  # end.json seen before a full listing: nothing more can come
        self.refresh()

    def __repr__(self) -> str:
        counts = ", ".join(f"{m.value}={len(self.steps(m))}" for m in STEP_MODES)
        workers = f"workers: {self.num_workers}, " if self._parts is not None else ""
        return f"Trial({self.name!r}, {workers}steps: {counts}, ended={self.has_ended})"

    # -- workers --------------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        return 1 if self._parts is None else len(self._parts)

    def workers(self) -> list[str]:
        """The processes that write the store, in rank order: ["worker_0"] for one."""
        if self._parts is None:
            return [self._worker or store.worker_name(0)]
        return [part.workers()[0] for part in self._parts]

    def worker(self, name: str) -> Trial:
        """The trial of one worker's part of the store (this trial for a store of one)."""
        if self._parts is None:
            if name != self.workers()[0]:
                raise InvalidWorker(name, self.workers())
            return self
        for part in self._parts:
            if part.workers()[0] == name:
                return part
        raise InvalidWorker(name, self.workers())

    # -- following the store --------------------------------------------------------------

    def refresh(self) -> int:
        """Pick up step files written since the last refresh; returns how many were added."""
        if self._complete:
            return 0
        self._check_meta()
        if self._parts is not None:
            added = sum(part.refresh() for part in self._parts)
            self._complete = all(part._complete for part in self._parts)
            return added
        # end.json before listing: if it exists now, every step file is already there,
        # because the hook writes end.json last.
        end = self._end if self._end is not None else self._read_object(store.END_FILE)
        added = 0
        problem: CorruptStoreFile | None = None
        for mode in STEP_MODES:
            listed = self.reader.list_steps(mode, start_after=self._last_listed[mode])
            for mode_step in listed:
                try:
                    header = self.reader.read_header(mode, mode_step)
                    self._check_worker(header)
                except CorruptStepFile as exc:
                    problem = exc  # the steps before it stay readable; it is reported
                    break
                self._add(header)
                self._last_listed[mode] = mode_step
                added += 1
            if problem is not None:
                break
        if added or not self._collections:
            self._load_collections()
        if not self._meta_checked and (added or end is not None or self._collections):
            self._check_meta()  # the writer may have begun since: it writes meta.json first
            if not self._meta_checked:
                where = os.path.join(self.reader.location, store.META_FILE)
                raise CorruptStoreFile(f"{where}: missing, although the store holds steps")
        if problem is not None:
            raise problem
        if end is not None:
            self._check_complete(end)
        self._end = end
        self._complete = self._end is not None
        return added

    @property
    def has_ended(self) -> bool:
        """True once end.json was seen (as of the last refresh): no more steps will come;
        for several workers, once every worker's was."""
        if self._parts is not None:
            return all(part.has_ended for part in self._parts)
        return self._end is not None

    # -- steps ----------------------------------------------------------------------------

    def steps(
        self, mode: ModeKeys | str = ModeKeys.TRAIN, show_incomplete_steps: bool = False
    ) -> list[int]:
        """Steps written for `mode` (GLOBAL: global step numbers), ascending.

        While the job runs, a GLOBAL list may later gain a step below its current last
        one (modes are listed one after the other); per-mode lists only grow at the end.
        Several workers: the steps some worker wrote and no worker may still write (each
        wrote it, passed it or ended), as the legacy library listed complete steps;
        show_incomplete_steps=True lists every step some worker wrote.
        """
        mode = ModeKeys.parse(mode)
        if self._parts is not None:
            written = sorted(set().union(*(part.steps(mode) for part in self._parts)))
            if show_incomplete_steps:
                return written
            return [s for s in written if all(p._settled(s, mode) for p in self._parts)]
        if mode is ModeKeys.GLOBAL:
            return list(self._global_steps)
        return list(self._steps[mode])

    def last_step(self, mode: ModeKeys | str = ModeKeys.TRAIN) -> int | None:
        """Highest step written for `mode`, None when there is none."""
        steps = self.steps(mode)
        return steps[-1] if steps else None

    def step_header(self, step: int, mode: ModeKeys | str = ModeKeys.TRAIN) -> store.StepHeader:
        """Where a step sits (mode, mode_step, global_step, wall_time) and what it holds.

        Raises StepNotYetAvailable while the job may still write it, StepUnavailable when
        it never will (the job ended, or later steps of the mode exist).
        """
        mode = ModeKeys.parse(mode)
        if self._parts is not None:
            return self._headers_at(step, mode)[0][1]
        header = self._lookup(step, mode)
        if header is None:
            self.refresh()
            header = self._lookup(step, mode)
        if header is not None:
            return header
        if self.has_ended:
            raise StepUnavailable(step, mode)
        # Within a mode, steps are written and listed in order, so a gap below the last
        # one is final. Across modes (GLOBAL) a lower step of another mode may still be
        # listed late, so only the end of the job settles it.
        last = self.last_step(mode)
        if mode is not ModeKeys.GLOBAL and last is not None and step <= last:
            raise StepUnavailable(step, mode)
        raise StepNotYetAvailable(step, mode)

    # -- tensors --------------------------------------------------------------------------

    def tensor_names(
        self,
        collection: str | None = None,
        regex: str | Iterable[str] | None = None,
        mode: ModeKeys | str | None = None,
        step: int | None = None,
    ) -> list[str]:
        """Sorted tensor names, filtered by collection, regex (re.match; any of a list),
        mode (saved at some step of it) and step (saved at that step; mode defaults TRAIN)."""
        if self._parts is not None:
            if step is not None:  # the workers that wrote it; raises when none did
                at = self._headers_at(step, ModeKeys.TRAIN if mode is None else mode)
                parts = [part for part, _ in at]
            else:
                parts = self._parts
            found = (part.tensor_names(collection, regex, mode, step) for part in parts)
            return sorted(set().union(*found))
        names: Iterable[str]
        if step is not None:
            step_mode = ModeKeys.TRAIN if mode is None else mode
            names = {split_key(k)[0] for k in self.step_header(step, step_mode).tensor_names}
        elif mode is not None:
            parsed = ModeKeys.parse(mode)
            names = [n for n in self._tensor_steps if self._steps_of(n, parsed)]
        else:
            names = self._tensor_steps
        selected = set(names)
        if collection is not None:
            selected &= self._collections.get(collection, set())
        if regex is not None:
            patterns = [re.compile(r) for r in ([regex] if isinstance(regex, str) else regex)]
            selected = {n for n in selected if any(p.match(n) for p in patterns)}
        return sorted(selected)

    def collection_names(self) -> list[str]:
        if self._parts is not None:
            return sorted(set().union(*(part.collection_names() for part in self._parts)))
        return sorted(self._collections)

    def collection_order(self, collection: str) -> list[str]:
        """A collection's tensor names in the order the job first saved them (for parameters:
        the model's order, first layer first)."""
        if self._parts is not None:  # the first worker's order, then what others add
            merged = [name for part in self._parts for name in part.collection_order(collection)]
            return list(dict.fromkeys(merged))
        return list(self._collection_order.get(collection, []))

    def wait_for_steps(
        self,
        steps: Iterable[int],
        mode: ModeKeys | str = ModeKeys.TRAIN,
        timeout: float | None = None,
        poll_interval: float = 0.2,
    ) -> None:
        """Block until every step is written. Raises StepUnavailable for a step that will
        never come, TimeoutError when `timeout` seconds pass first."""
        mode = ModeKeys.parse(mode)
        deadline = None if timeout is None else time.monotonic() + timeout
        wanted = sorted(set(steps))
        while True:
            missing = []
            for step in wanted:
                try:
                    self.step_header(step, mode)
                except StepNotYetAvailable:
                    missing.append(step)
                    continue
                if self._parts is not None and not all(
                    part._settled(step, mode) for part in self._parts
                ):
                    missing.append(step)  # written by one worker, still to come from another
            if not missing:
                return
            wanted = missing
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{mode.value} steps {missing} not written within {timeout} s")
            time.sleep(poll_interval)

    def tensor(self, name: str) -> TensorView:
        if not self._has_tensor(name):
            self.refresh()
            if not self._has_tensor(name):
                raise TensorUnavailable(name)
        # Counted so the evaluator can tell a rule that read nothing from one that found
        # nothing wrong (every rule, custom ones too, reads through here).
        self.tensor_reads += 1
        return TensorView(self, name)

    # -- internals ------------------------------------------------------------------------

    def _check_meta(self) -> None:
        if self._meta_checked:
            return
        meta = self._read_object(store.META_FILE)
        if meta is None:
            if self._worker is None and self.reader.exists(store.WORKERS_DIR):
                where = os.path.join(self.reader.location, store.META_FILE)
                raise CorruptStoreFile(f"{where}: missing, although workers have written")
            return  # the job has not started writing yet
        newest = store.NEWEST_FORMAT_VERSION
        version = meta.get("version", 0)
        if (
            meta.get("format") != store.FORMAT_NAME
            or not isinstance(version, int)
            or isinstance(version, bool)
            or not 0 < version <= newest
        ):
            raise StoreFormatError(
                f"{self.reader.location}: store format {meta.get('format')!r} version "
                f"{version!r} is not {store.FORMAT_NAME!r} <= {newest}"
            )
        self._format_version = version
        where = os.path.join(self.reader.location, store.META_FILE)
        workers = store.meta_workers(meta, where)
        if workers is not None and self._worker is None:
            self._parts = [
                Trial(
                    self.reader.child(f"{store.WORKERS_DIR}/{store.worker_name(rank)}"),
                    name=f"{self.name} {store.worker_name(rank)}",
                    worker=store.worker_name(rank),
                )
                for rank in range(workers)
            ]
        self._meta_checked = True

    def _check_worker(self, header: store.StepHeader) -> None:
        """A step file names the worker that wrote it since packs came (format 3): one
        moved into another worker's part, or into a store of one process, is not read. A
        trial opened on one worker's folder (not through the store's top) reads it as a
        store: the worker its first step names is the one every other step must name."""
        if self._format_version < store.PACKS_FORMAT_VERSION and header.worker is None:
            return
        if self._worker is None and not self._files_worker_known:
            self._files_worker, self._files_worker_known = header.worker, True
        expected = self._worker if self._worker is not None else self._files_worker
        if header.worker != expected:
            where = f"{self.reader.location}: {header.mode.value} step {header.mode_step}"
            raise CorruptStepFile(
                f"{where} was written by {header.worker or 'a store of one process'}, "
                f"not {expected or 'a store of one process'}"
            )

    def _settled(self, step: int, mode: ModeKeys) -> bool:
        """This worker will write `step` no more: it wrote it, passed it or ended."""
        if self.has_ended or self._lookup(step, mode) is not None:
            return True
        last = self.last_step(mode)
        return last is not None and step <= last

    def _headers_at(
        self, step: int, mode: ModeKeys | str, worker: str | None = None
    ) -> list[tuple[Trial, store.StepHeader]]:
        """(worker's trial, its header) for each worker that wrote `step`, in rank order
        (only `worker`'s when given). Raises InvalidWorker, or as step_header does when no
        worker wrote the step."""
        mode = ModeKeys.parse(mode)
        if worker is not None:
            part = self.worker(worker)
            return [(part, part.step_header(step, mode))]
        if self._parts is None:
            return [(self, self.step_header(step, mode))]
        found, missing = [], []
        for part in self._parts:
            try:
                found.append((part, part.step_header(step, mode)))
            except (StepNotYetAvailable, StepUnavailable) as exc:
                missing.append(exc)
        if found:
            return found
        if all(isinstance(exc, StepUnavailable) for exc in missing):
            raise StepUnavailable(step, mode)
        raise StepNotYetAvailable(step, mode)

    def _has_tensor(self, name: str) -> bool:
        if self._parts is not None:
            return any(part._has_tensor(name) for part in self._parts)
        return name in self._tensor_steps

    def _read_object(self, name: str) -> dict[str, Any] | None:
        """A store JSON file that must be an object, its checksum checked; None if absent."""
        data = self.reader.read_json(name)
        if data is None:
            return None
        where = os.path.join(self.reader.location, name)
        if not isinstance(data, dict):
            raise CorruptStoreFile(f"{where}: not a JSON object ({type(data).__name__})")
        store.check_crc(data, where)
        return data

    def _load_collections(self) -> None:
        where = os.path.join(self.reader.location, store.COLLECTIONS_FILE)
        data = self._read_object(store.COLLECTIONS_FILE)
        if data is None:
            if self._tensor_steps:  # the writer writes it before any step
                raise CorruptStoreFile(f"{where}: missing, although the store holds steps")
            data = {}
        order: dict[str, list[str]] = {}
        for name, entry in data.items():
            names = entry.get("tensor_names") if isinstance(entry, dict) else None
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise CorruptStoreFile(f"{where}: collection {name!r} is not a list of names")
            store.check_crc(entry, f"{where} collection {name!r}", name=name)
            order[name] = list(names)
        self._collection_order = order
        self._collections = {name: set(names) for name, names in order.items()}
        self._collections_crc32 = store.collections_crc32(data)
        self._save_configs = {
            name: entry["save_config"]
            for name, entry in data.items()
            if isinstance(entry.get("save_config"), dict)
        }

    def _check_complete(self, end: dict[str, Any]) -> None:
        """Raise IncompleteStore when end.json names steps with no step file, or the store
        holds step files end.json does not name (all steps were listed: it came first)."""
        where = os.path.join(self.reader.location, store.END_FILE)
        if "collections_crc32" in end:  # collections.json is final once the end is written
            self._load_collections()
            if end["collections_crc32"] != self._collections_crc32:
                file = os.path.join(self.reader.location, store.COLLECTIONS_FILE)
                raise CorruptStoreFile(f"{file}: not the collections {where} names (modified)")
        saved = store.saved_step_ranges(end, where)
        claim = "names"
        if saved is None:  # written before end markers named their steps
            saved = self._inferred_saved_steps(end, where)
            claim = "and the save_config of collections.json call for"
        for mode in STEP_MODES:
            ranges = saved.get(mode, [])
            listed = self._steps[mode]
            expected = sum(len(r) for r in ranges)
            if expected > len(listed) + 1_000_000:  # never expand an absurd claim
                raise IncompleteStore(
                    f"{where}: {claim} {expected} {mode.value} steps; the store holds {len(listed)}"
                )
            named = {step for r in ranges for step in r}
            missing = sorted(named.difference(listed))
            extra = sorted(set(listed) - named)
            if missing:
                folder = os.path.join(self.reader.location, store.STEPS_DIR, mode.value)
                raise IncompleteStore(
                    f"{where}: {claim} {len(missing)} {mode.value} step(s) with no step file in "
                    f"{folder}: {', '.join(map(str, missing[:10]))}"
                    + (" ..." if len(missing) > 10 else "")
                )
            if extra:
                folder = os.path.join(self.reader.location, store.STEPS_DIR, mode.value)
                raise IncompleteStore(
                    f"{folder}: holds {mode.value} step(s) {', '.join(map(str, extra[:10]))} "
                    f"that {where} does not name"
                )

    def _inferred_saved_steps(self, end: dict[str, Any], where: str) -> dict[ModeKeys, list[range]]:
        """For a store written before end.json named its steps: the steps it must hold.
        Each collection collections.json lists saves its tensors at the steps its
        save_config makes due, up to end.json's last step of the mode; a collection counts
        for a mode once one of its tensors is in a step file of that mode (a collection
        never captured in EVAL is not expected there). A tensor collections.json names but
        no step file holds means its step files are gone."""
        unheld = sorted(
            name for names in self._collections.values() for name in names
            if name not in self._tensor_steps
        )  # fmt: skip
        if unheld:
            shown = ", ".join(unheld[:5]) + (" ..." if len(unheld) > 5 else "")
            raise IncompleteStore(
                f"{os.path.join(self.reader.location, store.COLLECTIONS_FILE)}: names "
                f"tensors no step file holds ({shown}): step files are missing"
            )
        last_steps = end.get("last_step", {})
        if not isinstance(last_steps, dict):
            raise CorruptStoreFile(f"{where}: last_step is not an object")
        out: dict[ModeKeys, list[range]] = {}
        for mode in STEP_MODES:
            last = last_steps.get(mode.value)
            if last is not None and not store._is_count(last):
                raise CorruptStoreFile(f"{where}: last_step[{mode.value!r}] is not a step")
            due = [] if last is None else self._due_ranges(mode, last)
            out[mode] = due + [range(step, step + 1) for step in self._steps[mode]]
        return out

    def _due_ranges(self, mode: ModeKeys, last: int) -> list[range]:
        """The steps up to `last` where a collection captured in `mode` is due."""
        ranges: list[range] = []
        for name, raw in self._save_configs.items():
            captured = any(
                self._tensor_steps.get(tensor, {}).get(mode)
                for tensor in self._collections.get(name, ())
            )
            if not captured:
                continue
            try:
                config = SaveConfig.from_dict(raw).for_mode(mode.value)
            except ConfigError as exc:
                file = os.path.join(self.reader.location, store.COLLECTIONS_FILE)
                raise CorruptStoreFile(f"{file}: collection {name!r}: {exc}") from None
            stop = last + 1 if config.end_step is None else min(last + 1, config.end_step)
            first = -(-config.start_step // config.save_interval) * config.save_interval
            ranges.append(range(first, max(first, stop), config.save_interval))
            ranges += [range(step, step + 1) for step in config.save_steps if step <= last]
        return ranges

    def _add(self, header: store.StepHeader) -> None:
        self._headers[header.mode][header.mode_step] = header
        bisect.insort(self._steps[header.mode], header.mode_step)
        self._global[header.global_step] = header
        bisect.insort(self._global_steps, header.global_step)
        for name in {split_key(key)[0] for key in header.tensor_names}:
            steps = self._tensor_steps.setdefault(name, {}).setdefault(header.mode, [])
            bisect.insort(steps, header.mode_step)

    def _lookup(self, step: int, mode: ModeKeys) -> store.StepHeader | None:
        if mode is ModeKeys.GLOBAL:
            return self._global.get(step)
        return self._headers[mode].get(step)

    def _steps_of(self, name: str, mode: ModeKeys) -> list[int]:
        if self._parts is not None:
            listed = set(self.steps(mode))
            return sorted({s for part in self._parts for s in part._steps_of(name, mode)} & listed)
        per_mode = self._tensor_steps.get(name, {})
        if mode is ModeKeys.GLOBAL:
            return sorted(
                self._headers[m][s].global_step for m, steps in per_mode.items() for s in steps
            )
        return list(per_mode.get(mode, []))


_NO_HEADERS: dict[int, store.StepHeader] = {}


class TensorView:
    """One tensor name across steps; values are read from disk on each call."""

    def __init__(self, trial: Trial, name: str) -> None:
        self.trial = trial
        self.name = name

    def __repr__(self) -> str:
        return f"TensorView({self.name!r})"

    def steps(self, mode: ModeKeys | str = ModeKeys.TRAIN) -> list[int]:
        """Steps of `mode` at which this tensor was saved (GLOBAL: global step numbers)."""
        return self.trial._steps_of(self.name, ModeKeys.parse(mode))

    def workers(self, step: int, mode: ModeKeys | str = ModeKeys.TRAIN) -> list[str]:
        """The workers that saved this tensor (or a reduction of it) at `step`."""
        return [
            part.workers()[0]
            for part, header in self.trial._headers_at(step, mode)
            if any(split_key(key)[0] == self.name for key in header.tensor_names)
        ]

    def value(
        self, step: int, mode: ModeKeys | str = ModeKeys.TRAIN, worker: str | None = None
    ) -> np.ndarray:
        """The tensor as saved at `step` by `worker` (default: the first worker, in rank
        order, that saved it). Raises TensorUnavailableForStep when only its reductions
        were saved there, InvalidWorker for a worker the store does not have."""
        trial = self.trial
        if worker is None and trial._parts is None:  # the common case, looked up directly
            header = trial._headers.get(mode, _NO_HEADERS).get(step)  # type: ignore[arg-type]
            if header is not None and header.holds(self.name):
                return trial.reader.read_tensor(header.mode, header.mode_step, self.name)
        for part, header in trial._headers_at(step, mode, worker):
            if header.holds(self.name):
                return part.reader.read_tensor(header.mode, header.mode_step, self.name)
        raise TensorUnavailableForStep(self.name, step, ModeKeys.parse(mode))

    def values(
        self, mode: ModeKeys | str = ModeKeys.TRAIN, worker: str | None = None
    ) -> dict[int, np.ndarray]:
        """{step: value} for every step of `mode` holding the raw tensor (of `worker`)."""
        out = {}
        for step in self.steps(mode):
            try:
                out[step] = self.value(step, mode, worker)
            except (TensorUnavailableForStep, StepUnavailable):
                continue  # reductions only there, or a step `worker` did not write
        return out

    def reduction_value(
        self,
        step: int,
        reduction_name: str,
        mode: ModeKeys | str = ModeKeys.TRAIN,
        abs: bool = False,
        worker: str | None = None,
    ) -> float:
        """A reduction (min, max, mean, std, variance, sum, prod, l1, l2; abs=True for the
        abs_ variant) saved by the hook, or computed from the raw tensor when only that
        was saved (by `worker`; default: the first worker that saved either)."""
        if reduction_name not in REDUCTIONS and reduction_name not in NORMS:
            known = [*REDUCTIONS, *NORMS]
            raise ValueError(f"unknown reduction {reduction_name!r}; expected one of {known}")
        key = reduction_key(self.name, reduction_name, abs)
        for part, header in self.trial._headers_at(step, mode, worker):
            if header.holds(key):
                return float(part.reader.read_tensor(header.mode, header.mode_step, key))
            if header.holds(self.name):
                value = part.reader.read_tensor(header.mode, header.mode_step, self.name)
                return reduce_array(value, reduction_name, abs)
        raise TensorUnavailableForStep(self.name, step, ModeKeys.parse(mode))


def reduce_array(value: np.ndarray, reduction: str, abs: bool = False) -> float:
    """The numpy twin of the hook's on-device reductions (population std/variance)."""
    data = np.asarray(value, dtype=np.float64)
    if abs:
        data = np.abs(data)
    if reduction == "l1":
        return float(np.abs(data).sum())
    if reduction == "l2":
        return float(np.sqrt((data * data).sum()))
    if data.size == 0 and reduction in ("min", "max", "mean", "std", "variance"):
        return float("nan")
    fn = {"variance": np.var}.get(reduction) or getattr(np, reduction)
    return float(fn(data))
