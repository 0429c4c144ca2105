"""Moving a step's saved tensors to the host without stalling the training thread.

The hook packs what a step saves into one flat tensor per (device, dtype) (one batched
copy, taken before the optimizer can change anything). This module carries such a flat
tensor to host memory:

- CPU tensors: the packed copy already is host memory; nothing more happens.
- Accelerator tensors (CUDA): a non-blocking copy into a pinned host buffer, then a CUDA
  event recorded on the training stream. The training thread never waits: the writer
  thread waits on the event (`HostCopy.result`) before it reads the buffer. Pinned
  buffers are pooled and reused across steps (`PinnedPool`); a buffer returns to the pool
  once its step file is written (`HostCopy.release`).

Extra device memory: the packed copy of one step's saved tensors (plus its reductions),
freed as soon as the copy to the host is queued (the caching allocator reuses it in
stream order). Pinned host memory: at most `max_buffers` buffers of one step's size per
dtype (the writer's queue bound plus the steps in flight).

`staged=True` takes the pinned-buffer path for a CPU tensor too (a plain buffer from the
pool, an event that is always complete): tests run that logic on CPU-only torch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class _DoneEvent:
    """An event for work that is complete when recorded (CPU)."""

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class PinnedPool:
    """Host buffers reused across steps, one free list per (dtype, size)."""

    def __init__(self, max_buffers: int) -> None:
        self.max_buffers = max_buffers
        self._free: dict[tuple[Any, int], list[torch.Tensor]] = {}
        self._lock = threading.Lock()  # the training thread takes, the writer gives back
        self.allocated = 0  # buffers created so far (a test sees the reuse)

    def take(self, dtype: torch.dtype, numel: int, pin: bool) -> torch.Tensor:
        import torch

        with self._lock:
            free = self._free.get((dtype, numel))
            if free:
                return free.pop()
            self.allocated += 1
        return torch.empty(numel, dtype=dtype, pin_memory=pin)

    def give(self, buffer: torch.Tensor) -> None:
        key = (buffer.dtype, buffer.numel())
        with self._lock:
            free = self._free.setdefault(key, [])
            if len(free) < self.max_buffers:  # beyond: let it go (the step size changed)
                free.append(buffer)


@dataclass
class HostCopy:
    """A flat tensor on its way to the host; `result()` on the writer thread."""

    host: torch.Tensor
    event: Any  # torch.cuda.Event or _DoneEvent
    pool: PinnedPool | None = None

    def result(self) -> torch.Tensor:
        """The host tensor, once the copy is complete (waits for it, off the training
        thread)."""
        self.event.synchronize()
        return self.host

    def release(self) -> None:
        """The step is written: its pinned buffer may carry another step."""
        if self.pool is not None:
            self.pool.give(self.host)
            self.pool = None


class HostCopier:
    """Starts the copies of packed tensors to the host (training thread)."""

    def __init__(self, max_buffers: int, staged: bool = False) -> None:
        self.pool = PinnedPool(max_buffers)
        self.staged = staged

    def start(self, flat: torch.Tensor) -> HostCopy:
        """`flat` is a private packed copy (nothing else writes it)."""
        device = flat.device.type
        if device == "cpu" and not self.staged:
            return HostCopy(flat, _DoneEvent())
        pin = device == "cuda"
        host = self.pool.take(flat.dtype, flat.numel(), pin)
        host.copy_(flat, non_blocking=pin)
        event = _record_event(flat.device) if device != "cpu" else _DoneEvent()
        return HostCopy(host, event, self.pool)


def _record_event(device: torch.device) -> Any:
    """An event on the device's current stream, after the copy just queued; devices
    without events (MPS) wait here instead."""
    import torch

    if device.type == "cuda":
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        return event
    getattr(torch, device.type).synchronize()  # e.g. torch.mps: no event API to wait on
    return _DoneEvent()
