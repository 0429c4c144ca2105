"""Trial: the analysis API over one store, usable while the job is still writing it.

    trial = create_trial("/tmp/store")
    trial.steps()                                   # TRAIN steps written so far
    trial.tensor_names(collection="gradients")
    trial.tensor("loss").value(10)                  # np.ndarray
    trial.tensor("gradient/fc.weight").reduction_value(10, "mean", abs=True)
    trial.wait_for_steps([20, 30])                  # block until written (or never will be)
    trial.refresh()                                 # pick up steps written since

Reads are incremental: refresh() lists only step files newer than the last one seen and
reads only their headers; tensor values are read on demand, one tensor at a time.
A step lookup that misses refreshes once before raising, so a follower need not call
refresh() itself. Not thread-safe.
"""

from __future__ import annotations

import bisect
import os
import re
import time
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np
from remedy.debugger import store
from remedy.debugger.collections import NORMS, REDUCTIONS, reduction_key, split_key
from remedy.debugger.exceptions import (
    CorruptStepFile,
    DebuggerWarning,
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
    def __init__(self, reader: StoreReader, name: str | None = None) -> None:
        self.reader = reader
        self.name = name or reader.location
        self._headers: dict[ModeKeys, dict[int, store.StepHeader]] = {m: {} for m in STEP_MODES}
        self._steps: dict[ModeKeys, list[int]] = {m: [] for m in STEP_MODES}
        self._last_listed: dict[ModeKeys, int | None] = dict.fromkeys(STEP_MODES)
        self._global: dict[int, store.StepHeader] = {}
        self._global_steps: list[int] = []
        self._tensor_steps: dict[str, dict[ModeKeys, list[int]]] = {}
        self._collections: dict[str, set[str]] = {}
        self._collection_order: dict[str, list[str]] = {}
        self._meta_checked = False
        self._end: dict[str, Any] | None = None
        self._complete = False  # end.json seen before a full listing: nothing more can come
        self.refresh()

    def __repr__(self) -> str:
        counts = ", ".join(f"{m.value}={len(self._steps[m])}" for m in STEP_MODES)
        return f"Trial({self.name!r}, steps: {counts}, ended={self.has_ended})"

    # -- following the store --------------------------------------------------------------

    def refresh(self) -> int:
        """Pick up step files written since the last refresh; returns how many were added."""
        if self._complete:
            return 0
        self._check_meta()
        # end.json before listing: if it exists now, every step file is already there,
        # because the hook writes end.json last.
        if self._end is None:
            self._end = self.reader.read_json(store.END_FILE)
        added = 0
        for mode in STEP_MODES:
            listed = self.reader.list_steps(mode, start_after=self._last_listed[mode])
            for mode_step in listed:
                try:
                    header = self.reader.read_header(mode, mode_step)
                except CorruptStepFile as exc:
                    warnings.warn(f"skipping {exc}", DebuggerWarning, stacklevel=2)
                    continue
                self._add(header)
                added += 1
            if listed:
                self._last_listed[mode] = listed[-1]
        if added or not self._collections:
            self._load_collections()
        self._complete = self._end is not None
        return added

    @property
    def has_ended(self) -> bool:
        """True once end.json was seen (as of the last refresh): no more steps will come."""
        return self._end is not None

    # -- steps ----------------------------------------------------------------------------

    def steps(self, mode: ModeKeys | str = ModeKeys.TRAIN) -> list[int]:
        """Steps written for `mode` (GLOBAL: global step numbers), ascending.

        While the job runs, a GLOBAL list may later gain a step below its current last
        one (modes are listed one after the other); per-mode lists only grow at the end.
        """
        mode = ModeKeys.parse(mode)
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
        return sorted(self._collections)

    def collection_order(self, collection: str) -> list[str]:
        """A collection's tensor names in the order the job first saved them (for parameters:
        the model's order, first layer first)."""
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
            if not missing:
                return
            wanted = missing
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{mode.value} steps {missing} not written within {timeout} s")
            time.sleep(poll_interval)

    def tensor(self, name: str) -> TensorView:
        if name not in self._tensor_steps:
            self.refresh()
            if name not in self._tensor_steps:
                raise TensorUnavailable(name)
        return TensorView(self, name)

    # -- internals ------------------------------------------------------------------------

    def _check_meta(self) -> None:
        if self._meta_checked:
            return
        meta = self.reader.read_json(store.META_FILE)
        if meta is None:
            return  # the job has not started writing yet
        if meta.get("format") != store.FORMAT_NAME or meta.get("version", 0) > store.FORMAT_VERSION:
            raise StoreFormatError(
                f"{self.reader.location}: store format {meta.get('format')!r} version "
                f"{meta.get('version')!r} is not {store.FORMAT_NAME!r} <= {store.FORMAT_VERSION}"
            )
        self._meta_checked = True

    def _load_collections(self) -> None:
        data = self.reader.read_json(store.COLLECTIONS_FILE) or {}
        self._collection_order = {
            name: list(entry.get("tensor_names", [])) for name, entry in data.items()
        }
        self._collections = {name: set(names) for name, names in self._collection_order.items()}

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
        per_mode = self._tensor_steps.get(name, {})
        if mode is ModeKeys.GLOBAL:
            return sorted(
                self._headers[m][s].global_step for m, steps in per_mode.items() for s in steps
            )
        return list(per_mode.get(mode, []))


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

    def value(self, step: int, mode: ModeKeys | str = ModeKeys.TRAIN) -> np.ndarray:
        """The tensor as saved at `step` (raises TensorUnavailableForStep when only its
        reductions were saved there)."""
        header = self.trial.step_header(step, mode)
        if self.name not in header.tensor_names:
            raise TensorUnavailableForStep(self.name, step, ModeKeys.parse(mode))
        return self.trial.reader.read_tensor(header.mode, header.mode_step, self.name)

    def values(self, mode: ModeKeys | str = ModeKeys.TRAIN) -> dict[int, np.ndarray]:
        """{step: value} for every step of `mode` holding the raw tensor."""
        out = {}
        for step in self.steps(mode):
            header = self.trial.step_header(step, mode)
            if self.name in header.tensor_names:
                out[step] = self.trial.reader.read_tensor(header.mode, header.mode_step, self.name)
        return out

    def reduction_value(
        self,
        step: int,
        reduction_name: str,
        mode: ModeKeys | str = ModeKeys.TRAIN,
        abs: bool = False,
    ) -> float:
        """A reduction (min, max, mean, std, variance, sum, prod, l1, l2; abs=True for the
        abs_ variant) saved by the hook, or computed from the raw tensor when only that
        was saved."""
        if reduction_name not in REDUCTIONS and reduction_name not in NORMS:
            known = [*REDUCTIONS, *NORMS]
            raise ValueError(f"unknown reduction {reduction_name!r}; expected one of {known}")
        header = self.trial.step_header(step, mode)
        key = reduction_key(self.name, reduction_name, abs)
        if key in header.tensor_names:
            return float(self.trial.reader.read_tensor(header.mode, header.mode_step, key))
        if self.name not in header.tensor_names:
            raise TensorUnavailableForStep(self.name, step, ModeKeys.parse(mode))
        value = self.trial.reader.read_tensor(header.mode, header.mode_step, self.name)
        return reduce_array(value, reduction_name, abs)


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
