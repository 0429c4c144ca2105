"""Capture hook for PyTorch: saves losses, gradients, weights and user tensors to a store.

    hook = Hook.from_env() or Hook("/tmp/store", collections={"losses": SaveConfig(1)})
    hook.register_module(model)       # one top-level forward = one step
    hook.register_loss(criterion)     # "losses" collection, tensor "loss"
    hook.register_optimizer(opt)      # "gradients" / "weights" / "biases", before each update
    ...train...
    hook.close()                      # flush and write end.json

Steps: each top-level forward begins a step of the current mode. Until `set_mode` is called
the mode follows `model.training` (TRAIN or EVAL). TRAIN, EVAL and PREDICT count their own
steps from 0; the global step counts them all.

When a step's file is written: at the optimizer's step pre-hook (the step's loss, gradients
and weights are all known then, and a job that dies right after still leaves that step on
disk), or else when the next step begins, the mode changes, or at close(). A tensor saved
after its step's file was written (e.g. save_tensor after optimizer.step()) is dropped with
a DebuggerWarning: call save_tensor before optimizer.step(). One optimizer per hook for now.

I/O: tensors are detached and copied to CPU on the training thread, then a background
thread converts and writes them. The queue between them is bounded (max_pending_steps);
when it is full the training thread blocks until the writer catches up (back-pressure
instead of unbounded memory or silently dropped steps).

This is the only module of the package that imports torch, and only when a Hook is built,
so `import debugger` stays cheap for readers and the rule evaluator.
"""

from __future__ import annotations

import atexit
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from debugger.config import CONFIG_ENV_VAR, HookConfig, SaveConfig
from debugger.exceptions import DebuggerWarning
from debugger.modes import STEP_MODES, ModeKeys
from debugger.store import is_store
from debugger.writer import DEFAULT_MAX_PENDING_STEPS, StepRecord, StoreWriter

if TYPE_CHECKING:
    import torch

LOSSES = "losses"
GRADIENTS = "gradients"
WEIGHTS = "weights"
BIASES = "biases"
DEFAULT_USER_COLLECTION = "default"
LOSS_TENSOR_NAME = "loss"
GRADIENT_PREFIX = "gradient/"


@dataclass
class _OpenStep:
    record: StepRecord
    written: bool = False


class Hook:
    """Saves tensors of a PyTorch training job; see the module docstring for the lifecycle."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        save_config: SaveConfig | None = None,
        collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
        *,
        max_pending_steps: int = DEFAULT_MAX_PENDING_STEPS,
    ) -> None:
        """`collections`: names (saved with `save_config`) or {name: SaveConfig | None}.

        Only the collections given are saved (default: losses). A tensor passed to
        save_tensor in a collection not listed is saved with `save_config`.
        Raises FileExistsError when out_dir already holds a store: runs never mix.
        """
        import torch

        self.config = HookConfig.build(out_dir, save_config, collections)
        if is_store(self.config.out_dir):
            raise FileExistsError(f"{self.config.out_dir} already holds a debugger store")
        self._writer = StoreWriter(
            self.config.out_dir,
            self.config.collections,
            self.config.save_config,
            to_numpy=_to_numpy,
            framework="pytorch",
            framework_version=torch.__version__,
            max_pending_steps=max_pending_steps,
        )
        self._mode = ModeKeys.TRAIN
        self._mode_set_by_user = False
        self._mode_steps: dict[ModeKeys, int] = dict.fromkeys(STEP_MODES, -1)
        self._global_step = -1
        self._step: _OpenStep | None = None
        self._handles: list[Any] = []  # torch RemovableHandles, removed at close()
        self._param_names: dict[int, str] = {}
        self._warned: set[str] = set()
        self._closed = False
        # A job that exits without close() (exception, sys.exit) still flushes its steps.
        atexit.register(self.close)

    @classmethod
    def from_config(cls, config: HookConfig) -> Hook:
        return cls(config.out_dir, config.save_config, config.collections)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> Hook:
        return cls.from_config(HookConfig.from_json_file(path))

    @classmethod
    def from_env(cls) -> Hook | None:
        """A hook configured by the file named in $REMEDY_DEBUGGER_CONFIG, None if unset."""
        path = os.environ.get(CONFIG_ENV_VAR)
        return cls.from_json_file(path) if path else None

    # -- registration ---------------------------------------------------------------------

    def register_module(self, module: torch.nn.Module) -> None:
        """Count a step at each forward of this (top-level) module; learn parameter names."""
        for name, param in module.named_parameters():
            self._param_names.setdefault(id(param), name)
        self._handles.append(module.register_forward_pre_hook(self._on_forward))

    def register_loss(self, criterion: torch.nn.Module) -> None:
        """Save the criterion's output as tensor "loss" in collection "losses"."""
        self._handles.append(criterion.register_forward_hook(self._on_loss))

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Save gradients and weights just before each optimizer update, then write the step."""
        self._handles.append(optimizer.register_step_pre_hook(self._on_optimizer_step))

    # -- mode and steps -------------------------------------------------------------------

    def set_mode(self, mode: ModeKeys | str) -> None:
        """Fix the mode of the following steps (instead of following model.training)."""
        mode = ModeKeys.parse(mode)
        if mode is ModeKeys.GLOBAL:
            raise ValueError("GLOBAL is not a mode a job runs in; use TRAIN, EVAL or PREDICT")
        if mode is not self._mode:
            self._finish_step()  # the old mode's step cannot receive more tensors
        self._mode = mode
        self._mode_set_by_user = True

    @property
    def mode(self) -> ModeKeys:
        return self._mode

    @property
    def step(self) -> int:
        """Current step of the current mode (-1 before the first one)."""
        return self._mode_steps[self._mode]

    @property
    def global_step(self) -> int:
        return self._global_step

    @property
    def out_dir(self) -> str:
        return self.config.out_dir

    # -- saving ---------------------------------------------------------------------------

    def save_tensor(
        self,
        name: str,
        value: torch.Tensor | np.ndarray | float | int,
        collection: str = DEFAULT_USER_COLLECTION,
    ) -> None:
        """Save a tensor of the current step, if `collection`'s SaveConfig selects this step."""
        self._capture(name, collection, value)

    def flush(self) -> None:
        """Block until every step already handed to the writer is on disk."""
        self._writer.flush()

    def close(self) -> None:
        """Write the open step and end.json, detach from torch. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._finish_step()
        last_steps = {m: s for m, s in self._mode_steps.items() if s >= 0}
        self._writer.close(last_steps, self._global_step)

    def __enter__(self) -> Hook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- torch callbacks ------------------------------------------------------------------

    def _on_forward(self, module: torch.nn.Module, args: Any) -> None:
        if not self._mode_set_by_user:
            self._mode = ModeKeys.TRAIN if module.training else ModeKeys.EVAL
        self._begin_step(self._mode)

    def _on_loss(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._capture(LOSS_TENSOR_NAME, LOSSES, output)

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        step = self._step
        if step is None or step.written:
            return
        mode_step = step.record.mode_step
        due = {c for c in (GRADIENTS, WEIGHTS, BIASES) if self._is_due(c, mode_step)}
        if due:
            for index, param in enumerate(p for g in optimizer.param_groups for p in g["params"]):
                name = self._param_names.get(id(param), f"param_{index}")
                if GRADIENTS in due and param.grad is not None:
                    self._capture(GRADIENT_PREFIX + name, GRADIENTS, param.grad)
                collection = BIASES if name.rsplit(".", 1)[-1] == "bias" else WEIGHTS
                if collection in due:
                    self._capture(name, collection, param)
        self._finish_step()

    # -- internals ------------------------------------------------------------------------

    def _begin_step(self, mode: ModeKeys) -> None:
        self._finish_step()
        self._mode_steps[mode] += 1
        self._global_step += 1
        record = StepRecord(mode, self._mode_steps[mode], self._global_step, time.time())
        self._step = _OpenStep(record)

    def _finish_step(self) -> None:
        step = self._step
        if step is None or step.written:
            return
        step.written = True
        if step.record.tensors:  # steps with nothing selected leave no file
            self._writer.put(step.record)

    def _is_due(self, collection: str, mode_step: int) -> bool:
        config = self.config.collections.get(collection)
        if config is None:
            if collection in (LOSSES, GRADIENTS, WEIGHTS, BIASES):
                return False  # built-in collections are saved only when configured
            config = self.config.save_config
        return config.should_save(mode_step)

    def _capture(self, name: str, collection: str, value: Any) -> None:
        if self._closed:
            self._warn_once("closed", "tensor saved after Hook.close() is dropped")
            return
        step = self._step
        if step is None:
            self._warn_once("no-step", f"tensor {name!r} saved before the first step is dropped")
            return
        if not self._is_due(collection, step.record.mode_step):
            return
        if step.written:
            self._warn_once(
                f"late:{name}",
                f"tensor {name!r} saved after its step was written is dropped; "
                "save it before optimizer.step()",
            )
            return
        step.record.tensors[name] = _to_cpu_copy(value)
        step.record.collection_of[name] = collection

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, DebuggerWarning, stacklevel=3)


def _to_cpu_copy(value: Any) -> Any:
    """A private CPU copy: the live tensor changes at the update, the copy must not."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_sparse:
            value = value.to_dense()
        return value.detach().to("cpu", copy=True)
    array = np.array(value, copy=True)
    if array.dtype.kind not in "biuf":  # fail here, not later on the writer thread
        raise TypeError(f"cannot save a value of dtype {array.dtype}; numbers only")
    return array


def _to_numpy(value: Any) -> np.ndarray:
    """Runs on the writer thread."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            value = value.float()  # numpy has no bfloat16
        return value.numpy()
    return np.asarray(value)
