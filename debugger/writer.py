"""Background writer: turns queued steps into step files so training never waits on disk I/O.

Small steps are handed over in batches (after a job's first EAGER_STEPS, which are
handed over one by one, so a divergence at the start is seen at once). Waking the writer
thread costs the training thread about as much as the writer's work on a loss-only step
(a thread switch and the GIL's hand-over, 0.2-0.3 ms on the 2-core test machine), so a
step under SMALL_STEP_BYTES whose tensors hold no pooled host buffer waits in a batch,
which is handed over once it holds SMALL_BATCH steps or its first step is HAND_OVER_S old,
or by the writer itself when it finds its queue empty for HAND_OVER_S (a training loop
that pauses leaves no step unwritten). The steps of a batch are written as one pack per
mode (debugger/store.py): creating a file costs the writer more than writing a loss into
it, and that kernel work slows the training thread too. Larger steps, and any step
holding pinned buffers (an accelerator's copies, which the pool must get back soon), go
at once, after the batch before them: steps are written in order.

Back-pressure: the queue holds at most `max_pending_steps` hand-overs (a step, or a batch
of small ones). When it is full, `put` blocks the training thread until the writer catches
up; memory stays bounded at the cost of (rare) stalls. Steps are never dropped silently.

With an uploader (s3:// stores) `root` is a local staging folder: every file is written
there as for a local store, then uploaded by this same thread in the same order (meta,
collections before the steps naming them, steps in order, end marker last), so the bucket
fills while training runs; step files are deleted locally once uploaded.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.collections import split_key
from remedy.debugger.config import SaveConfig
from remedy.debugger.exceptions import StoreWriteError
from remedy.debugger.modes import ModeKeys

log = logging.getLogger(__name__)

DEFAULT_MAX_PENDING_STEPS = 4
SMALL_STEP_BYTES = 65_536  # smaller steps are handed to the writer in batches
SMALL_BATCH = 64  # steps in a batch at most (so at most 4 MiB)
HAND_OVER_S = 0.05  # a small step waits at most about this long to be handed over
# A job's first steps go to the writer one by one, small or not: a rate far too high
# diverges in its first updates, and a batch's HAND_OVER_S is 16 updates of a 3 ms step
# (a word LM at 1000x its rate ran 33 updates, its finding at update 9, before its stop).
# Once per job, about 10 ms of hand-overs and files.
EAGER_STEPS = 32


@dataclass
class Packed:
    """Several tensors of one step packed into one flat host copy (debugger/host_copy.py):
    `copy.result()` is the flat tensor, tensor i its [offsets[i], offsets[i+1]) slice."""

    copy: Any  # host_copy.HostCopy; Any keeps torch out of this module
    names: list[str]
    shapes: list[tuple[int, ...]]
    offsets: list[int]  # len(names) + 1

    def unpack(self, to_numpy: Callable[[Any], np.ndarray]) -> dict[str, np.ndarray]:
        """Runs on the writer thread: waits for the copy, then views (no copies)."""
        flat = to_numpy(self.copy.result())
        offsets = self.offsets
        return {
            name: flat[offsets[i] : offsets[i + 1]].reshape(shape)
            for i, (name, shape) in enumerate(zip(self.names, self.shapes, strict=True))
        }


@dataclass
class StepRecord:
    """One step's tensors, already private copies (the live ones may change) on their way
    to the host: single tensors in `tensors`, batched ones in `packed`."""

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    tensors: dict[str, Any] = field(default_factory=dict)  # name -> CPU tensor/array
    collection_of: dict[str, str] = field(default_factory=dict)  # name -> collection
    packed: list[Packed] = field(default_factory=list)

    def release(self) -> None:
        """The step is written (or failed): its host buffers may carry another step."""
        for pack in self.packed:
            pack.copy.release()

    def is_small(self) -> bool:
        """Under SMALL_STEP_BYTES and holding no pooled host buffer: may wait in a batch."""
        if any(pack.copy.pool is not None for pack in self.packed):
            return False
        size = sum(_nbytes(value) for value in self.tensors.values())
        size += sum(_nbytes(pack.copy.host) for pack in self.packed)
        return size < SMALL_STEP_BYTES


def _nbytes(value: Any) -> int:
    """Bytes of a numpy array or torch tensor (no torch import here)."""
    nbytes = getattr(value, "nbytes", None)
    return int(nbytes) if nbytes is not None else int(value.numel() * value.element_size())


@dataclass
class _End:
    last_steps: dict[ModeKeys, int]
    global_step: int


class StoreWriter:
    """Owns the store folder: meta.json and collections.json up front, then steps, then end.json."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        collection_configs: Mapping[str, SaveConfig],
        default_config: SaveConfig,
        to_numpy: Callable[[Any], np.ndarray],
        framework: str,
        framework_version: str,
        max_pending_steps: int = DEFAULT_MAX_PENDING_STEPS,
        uploader: Any = None,  # debugger.s3.S3Uploader; Any keeps boto3 out of this module
        exporter: Any = None,  # debugger.tensorboard.TensorBoardExporter
        worker: str | None = None,  # in a store of several processes: this one's name
    ) -> None:
        self.root = os.fspath(root)
        self._worker = worker
        self._uploader = uploader
        self._exporter = exporter
        self._to_numpy = to_numpy
        self._default_config = default_config
        self._collections: dict[str, dict[str, Any]] = {
            name: {"tensor_names": [], "save_config": cfg.to_dict()}
            for name, cfg in collection_configs.items()
        }
        # Written synchronously so a bad out_dir fails in the caller, not later in a thread.
        store.write_meta(self.root, framework, framework_version)
        self._upload(store.META_FILE)
        store.write_collections(self.root, self._collections)
        self._upload(store.COLLECTIONS_FILE)
        self._queue: queue.Queue[list[StepRecord] | _End] = queue.Queue(maxsize=max_pending_steps)
        self._batch: list[StepRecord] = []  # small steps not handed over yet
        self._batch_since = 0.0  # when its first step came
        self._steps_put = 0  # steps put so far (the first EAGER_STEPS are not batched)
        self._hand_over_lock = threading.Lock()  # steps reach the queue in order
        self._named: set[tuple[str, str]] = set()  # (collection, name) listed so far
        self._named_keys: set[tuple[str, str]] = set()  # (key, collection) seen so far
        # The steps written, per mode: end.json names them, so a reader reports a lost one.
        self._saved: dict[ModeKeys, list[int]] = {}
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="debugger-writer", daemon=True)
        self._thread.start()

    def put(self, record: StepRecord) -> None:
        """Queue a step; blocks while the queue is full (see module docstring). Once a
        write has failed (a full disk), raises StoreWriteError: the job ends now, naming
        the cause, instead of training on unwatched."""
        self._raise_if_failed()
        self._steps_put += 1
        if self._steps_put > EAGER_STEPS and record.is_small():
            with self._hand_over_lock:
                if not self._batch:
                    self._batch_since = time.monotonic()
                self._batch.append(record)
                if (
                    len(self._batch) >= SMALL_BATCH
                    or time.monotonic() - self._batch_since >= HAND_OVER_S
                ):
                    self._hand_over()
            return
        with self._hand_over_lock:
            self._hand_over()
            self._queue.put([record])

    def _hand_over(self) -> None:
        """Queue the batch of small steps (the caller holds _hand_over_lock)."""
        if self._batch:
            batch, self._batch = self._batch, []
            self._queue.put(batch)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise StoreWriteError(
                f"the debugger could not write its store {self.root}: {self.error}"
            ) from self.error

    def flush(self) -> None:
        """Block until every step put so far is on disk."""
        with self._hand_over_lock:
            self._hand_over()
        self._queue.join()

    def close(self, last_steps: dict[ModeKeys, int], global_step: int) -> None:
        """Write the remaining steps, then end.json; StoreWriteError after a write error.
        Never blocks for ever: the thread ends after the end marker, written or not."""
        with self._hand_over_lock:
            self._hand_over()
            self._queue.put(_End(dict(last_steps), global_step))
        self._thread.join()
        self._raise_if_failed()

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=HAND_OVER_S)
            except queue.Empty:  # the training thread is quiet: take its small steps
                self._take_batch()
                continue
            try:
                if isinstance(item, _End):
                    self._guarded(self._write_end, item)
                    return  # nothing follows the end: close() must not wait on a get()
                for records in _runs_by_mode(item):
                    self._guarded(self._write_steps, records)
            finally:
                self._queue.task_done()

    def _take_batch(self) -> None:
        """Queue the small steps of a quiet training thread. Never waits: should the
        training thread hold the lock (it may be waiting on a full queue, which only this
        thread empties) or have filled the queue since the look, it is not quiet."""
        if not self._hand_over_lock.acquire(blocking=False):
            return
        try:
            if not self._queue.full():
                self._hand_over()
        finally:
            self._hand_over_lock.release()

    def _guarded(self, write: Callable[[Any], None], item: list[StepRecord] | _End) -> None:
        """One write; a failure is kept (put() raises it) and the rest still drained, so
        put() never blocks for ever."""
        try:
            write(item)
        except Exception as exc:
            self._failed(exc)
        finally:
            if isinstance(item, list):
                for record in item:
                    record.release()

    def _failed(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
            log.exception("debugger writer failed; later steps may be missing")

    def _write_end(self, end: _End) -> None:
        store.write_end(self.root, end.last_steps, end.global_step, self._saved, self._collections)
        self._upload(store.END_FILE)
        if self._exporter is not None:
            self._exporter.close()

    def _write_steps(self, records: list[StepRecord]) -> None:
        """One step file, or one pack for several steps of a mode. A step whose tensors
        cannot be had is left out (its error kept); the others are still written."""
        kept, arrays = [], []
        for record in records:
            try:
                arrays.append(self._arrays(record))
            except Exception as exc:
                self._failed(exc)
            else:
                kept.append(record)
        records = kept
        if not records:
            return
        if len(records) == 1:
            record = records[0]
            header = store.StepHeader(
                mode=record.mode,
                mode_step=record.mode_step,
                global_step=record.global_step,
                wall_time=record.wall_time,
                tensor_names=tuple(sorted(arrays[0])),
                worker=self._worker,
            )
            path = store.write_step(self.root, header, arrays[0])
        else:
            steps = [(r.mode_step, r.global_step, r.wall_time) for r in records]
            path = store.write_pack(self.root, records[0].mode, steps, arrays, self._worker)
        saved = self._saved
        for record, tensors in zip(records, arrays, strict=True):
            saved.setdefault(record.mode, []).append(record.mode_step)
            if self._exporter is not None:
                self._exporter.write_step(record.mode, record.mode_step, record.wall_time, tensors)
        if self._uploader is not None:
            self._upload(os.path.relpath(path, self.root))
            os.unlink(path)  # staging only: keep local disk use to one file

    def _arrays(self, record: StepRecord) -> dict[str, np.ndarray]:
        """A step's tensors as arrays, its names' collections in collections.json first (a
        reader that sees the step also sees them)."""
        arrays = {name: self._to_numpy(value) for name, value in record.tensors.items()}
        for pack in record.packed:
            arrays.update(pack.unpack(self._to_numpy))
        changed = False
        for key, collection in record.collection_of.items():
            if (key, collection) in self._named_keys:  # this runs for every tensor saved
                continue
            self._named_keys.add((key, collection))
            name = split_key(key)[0]  # reductions are listed under their tensor's name
            if (collection, name) in self._named:
                continue
            self._named.add((collection, name))
            entry = self._collections.setdefault(
                collection,
                {"tensor_names": [], "save_config": self._default_config.to_dict()},
            )
            # First-seen order, not sorted: it is the model's parameter/layer order,
            # which rules comparing first and last layers rely on.
            entry["tensor_names"].append(name)
            changed = True
        if changed:
            store.write_collections(self.root, self._collections)
            self._upload(store.COLLECTIONS_FILE)
        return arrays

    def _upload(self, relative: str) -> None:
        if self._uploader is not None:
            relative = relative.replace(os.sep, "/")
            self._uploader.upload(os.path.join(self.root, relative), relative)


def _runs_by_mode(records: list[StepRecord]) -> list[list[StepRecord]]:
    """A batch's steps grouped by mode, each mode's in order: a pack holds ascending steps
    of one mode (a step number met again starts another run, as a file of its own)."""
    runs: list[list[StepRecord]] = []
    open_run: dict[ModeKeys, list[StepRecord]] = {}
    for record in records:
        run = open_run.get(record.mode)
        if run is None or run[-1].mode_step >= record.mode_step:
            run = open_run[record.mode] = []
            runs.append(run)
        run.append(record)
    return runs
