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

A caller that decides itself what a step is drives the same writer without registering
anything: begin_step(), save_tensor(...) / save_parameters(...), end_step(). The zero-code
capture (debugger/zero_code.py) does so, one step per update.

Activations: a collection with a CollectionSpec (module types or path regexes) saves the
inputs/outputs of the matching submodules of every registered module, named
`<path>/<type>_<input|output>` (see debugger/collections.py); "activations" alone selects
the usual activation modules, "inputs" saves the registered module's first input as "input".

Cost on the training thread: the parameters and gradients save_parameters (and so the
optimizer hook) saves are copied in one batched copy per (device, dtype) (torch.cat of
references taken in one pass; the copy is needed: the update changes them in place).
Reductions (ReductionConfig) are computed on the tensor's device. When the step is
finished, all its reductions are stacked into one tensor and every other tensor not on
the CPU is packed per dtype; each pack travels to the host without synchronising the
training stream (debugger/host_copy.py: non-blocking copies into reused pinned buffers,
completion tracked by an event the writer thread waits on). On CPU no transfer is needed.
Conversion to numpy, checksums and file writes run on the writer thread.

I/O: a background thread converts and writes the step files (debugger/writer.py: small
steps are handed to it in batches). The queue between them is bounded (max_pending_steps);
when it is full the training thread blocks until the writer catches up (back-pressure:
memory stays bounded, no step is silently dropped).

This is the only module of the package that imports torch, and only when a Hook is built,
so `import debugger` stays cheap for readers and the rule evaluator.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from remedy.debugger import store
from remedy.debugger.collections import (
    DEFAULT_ACTIVATION_TYPES,
    NORMS,
    CollectionSpec,
    ReductionConfig,
    reduction_key,
)
from remedy.debugger.config import CONFIG_ENV_VAR, HookConfig, SaveConfig
from remedy.debugger.exceptions import DebuggerWarning
from remedy.debugger.host_copy import HostCopier
from remedy.debugger.modes import STEP_MODES, ModeKeys
from remedy.debugger.s3 import is_s3
from remedy.debugger.store import META_FILE, is_store
from remedy.debugger.writer import DEFAULT_MAX_PENDING_STEPS, Packed, StepRecord, StoreWriter

if TYPE_CHECKING:
    import torch

LOSSES = "losses"
GRADIENTS = "gradients"
WEIGHTS = "weights"
BIASES = "biases"
ACTIVATIONS = "activations"
INPUTS = "inputs"
INPUT_TENSOR_NAME = "input"
ROOT_PATH = "model"
DEFAULT_USER_COLLECTION = "default"
LOSS_TENSOR_NAME = "loss"
GRADIENT_PREFIX = "gradient/"


class _Callback:
    """What the Hook registers on a module or optimizer: calls fn, and returns None.

    fn is a bound method (or closure) of the Hook, which holds locks and a writer thread.
    Pickled or copied (torch.save(model), copy.deepcopy(model)), a _Callback becomes one
    without fn: the copy carries a no-op hook and captures nothing; the original is untouched.
    """

    __slots__ = ("_fn",)

    def __init__(self, fn: Any = None) -> None:
        self._fn = fn

    def __call__(self, *args: Any) -> None:
        if self._fn is not None:
            self._fn(*args)

    def __reduce__(self) -> tuple[type[_Callback], tuple[()]]:
        return (_Callback, ())


@dataclass
class _OpenStep:
    record: StepRecord
    written: bool = False
    # Reductions waiting for the step's single device-to-host transfer: key -> 1-element
    # tensor on the device, plus the collection each key belongs to.
    reductions: dict[str, Any] | None = None


class Hook:
    """Saves tensors of a PyTorch training job; see the module docstring for the lifecycle."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        save_config: SaveConfig | None = None,
        collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
        *,
        collection_specs: Mapping[str, CollectionSpec] | None = None,
        reduction_config: ReductionConfig | None = None,
        max_pending_steps: int = DEFAULT_MAX_PENDING_STEPS,
        tensorboard_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        """`collections`: names (saved with `save_config`) or {name: SaveConfig | None}.

        Only the collections given are saved (default: losses). A tensor passed to
        save_tensor in a collection not listed is saved with `save_config`.
        Raises FileExistsError when out_dir already holds a store: runs never mix.
        """
        import torch

        self.config = HookConfig.build(
            out_dir, save_config, collections, collection_specs, reduction_config, tensorboard_dir
        )
        rank, workers = process_rank()
        self.worker = store.worker_name(rank)
        root, tensorboard_dir = self.config.out_dir, self.config.tensorboard_dir
        if workers > 1:
            # One of several processes (torchrun): its own part of the store, so no process
            # writes another's files; the top meta.json says how many parts to read.
            top = None if is_s3(root) else store.read_json(os.path.join(root, META_FILE))
            if top is not None and store.meta_workers(top) != workers:
                raise FileExistsError(f"{root} already holds a debugger store")
            root = store.worker_location(self.config.out_dir, self.worker)
            if tensorboard_dir is not None:
                tensorboard_dir = os.path.join(tensorboard_dir, self.worker)
        exporter = None
        if tensorboard_dir is not None:
            from remedy.debugger.tensorboard import TensorBoardExporter

            exporter = TensorBoardExporter(tensorboard_dir)
        uploader = None
        if is_s3(root):
            from remedy.debugger.s3 import S3Uploader  # boto3 only for s3:// stores

            uploader = S3Uploader(root)
            if uploader.exists(META_FILE):
                raise FileExistsError(f"{root} already holds a debugger store")
            root = tempfile.mkdtemp(prefix="remedy-debugger-")  # staging for uploads
        elif is_store(root):
            raise FileExistsError(f"{root} already holds a debugger store")
        if workers > 1:  # before the worker's own files: a reader learns the layout first
            _write_workers_meta(self.config.out_dir, workers, torch.__version__)
        self._staging = root if uploader is not None else None
        # Moves packed tensors to the host (debugger/host_copy.py). Pinned buffers for: the
        # steps the writer's queue holds, the one it writes, the one being filled.
        self.host_copier = HostCopier(max_buffers=max_pending_steps + 2)
        self._writer = StoreWriter(
            root,
            self.config.collections,
            self.config.save_config,
            to_numpy=_to_numpy,
            framework="pytorch",
            framework_version=torch.__version__,
            max_pending_steps=max_pending_steps,
            uploader=uploader,
            exporter=exporter,
            worker=self.worker if workers > 1 else None,
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
        return cls(
            config.out_dir,
            config.save_config,
            config.collections,
            collection_specs=config.specs,
            reduction_config=config.reduction_config,
            tensorboard_dir=config.tensorboard_dir,
        )

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> Hook:
        return cls.from_config(HookConfig.from_json_file(path))

    @classmethod
    def from_env(cls) -> Hook | None:
        """A hook configured by the file named in $REMEDY_DEBUGGER_CONFIG, None if unset."""
        path = os.environ.get(CONFIG_ENV_VAR)
        return cls.from_json_file(path) if path else None

    # -- registration ---------------------------------------------------------------------

    def register_module(self, module: torch.nn.Module, *, count_steps: bool = True) -> None:
        """Count a step at each forward of this (top-level) module; learn parameter names.

        count_steps=False: only the activation and input hooks, for a caller that begins
        the steps itself (begin_step), such as a training framework's callback whose
        training step need not call the module's forward."""
        for name, param in module.named_parameters():
            self._param_names.setdefault(id(param), name)
        if count_steps:
            self._handles.append(module.register_forward_pre_hook(_Callback(self._on_forward)))
        elif INPUTS in self.config.collections:
            self._handles.append(module.register_forward_pre_hook(_Callback(self._on_input)))
        for collection, spec in self._module_specs().items():
            types = set(spec.module_types)
            patterns = [re.compile(p) for p in spec.include_regex]
            for path, sub in module.named_modules():
                path = path or ROOT_PATH
                kind = type(sub).__name__
                if kind not in types and not any(p.fullmatch(path) for p in patterns):
                    continue
                base = f"{path}/{kind.lower()}"
                if spec.save_inputs:
                    hook = self._activation_hook(f"{base}_input", collection, is_input=True)
                    self._handles.append(sub.register_forward_pre_hook(_Callback(hook)))
                if spec.save_outputs:
                    hook = self._activation_hook(f"{base}_output", collection, is_input=False)
                    self._handles.append(sub.register_forward_hook(_Callback(hook)))

    def register_loss(self, criterion: torch.nn.Module) -> None:
        """Save the criterion's output as tensor "loss" in collection "losses"."""
        self._handles.append(criterion.register_forward_hook(_Callback(self._on_loss)))

    def register_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Save gradients and weights just before each optimizer update, then write the step."""
        hook = _Callback(self._on_optimizer_step)
        self._handles.append(optimizer.register_step_pre_hook(hook))

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

    def save_parameters(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Save what is due at the current step of each (name, parameter): its gradient as
        "gradient/<name>" ("gradients"), and the parameter itself ("weights", or "biases"
        for names ending in "bias"). `named` is not iterated when nothing is due."""
        step = self._step
        if step is None or step.written:
            return
        mode_step = step.record.mode_step
        due = {c for c in (GRADIENTS, WEIGHTS, BIASES) if self._is_due(c, mode_step)}
        if not due:
            return
        items: list[tuple[str, str, Any]] = []  # (name, collection, live tensor)
        save_grads = GRADIENTS in due
        weights, biases = WEIGHTS in due, BIASES in due
        for name, param in named:
            grad = param.grad
            if save_grads and grad is not None:
                items.append((GRADIENT_PREFIX + name, GRADIENTS, grad))
            if weights or biases:
                is_bias = name.endswith("bias") and name.rsplit(".", 1)[-1] == "bias"
                if biases if is_bias else weights:
                    items.append((name, BIASES if is_bias else WEIGHTS, param))
        self._capture_many(step, items)

    # -- driving steps without registered modules (zero-code capture) -------------------

    def begin_step(self, mode: ModeKeys | str = ModeKeys.TRAIN, step: int | None = None) -> int:
        """Begin the next step of `mode` (writing the open one); returns its step number.

        For callers that decide themselves what a step is, e.g. the zero-code capture,
        which counts one step per update: begin_step(), save_tensor(...) /
        save_parameters(...), end_step(). `step` numbers the step when the caller counts
        steps itself (a framework's global step, which starts above 0 in a resumed run);
        it must be above the mode's last step. None: the one after it."""
        mode = ModeKeys.parse(mode)
        if mode is ModeKeys.GLOBAL:
            raise ValueError("GLOBAL is not a mode a job runs in; use TRAIN, EVAL or PREDICT")
        if step is not None:
            if isinstance(step, bool) or not isinstance(step, int):
                raise TypeError(f"step must be an int, got {type(step).__name__}")
            if step <= self._mode_steps[mode]:
                raise ValueError(
                    f"{mode.value} step {step} does not follow step {self._mode_steps[mode]}"
                )
        self._mode = mode
        self._begin_step(mode, step)
        return self._mode_steps[mode]

    def is_due(self, collection: str) -> bool:
        """Whether `collection` is saved at the current step (False before the first one)."""
        step = self._step
        return step is not None and self._is_due(collection, step.record.mode_step)

    def end_step(self) -> None:
        """Hand the current step to the writer now; it takes no more tensors."""
        self._finish_step()

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
        try:
            self._writer.close(last_steps, self._global_step)
        finally:
            if self._staging is not None:
                shutil.rmtree(self._staging, ignore_errors=True)

    def __enter__(self) -> Hook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- torch callbacks ------------------------------------------------------------------

    def _on_forward(self, module: torch.nn.Module, args: Any) -> None:
        if not self._mode_set_by_user:
            self._mode = ModeKeys.TRAIN if module.training else ModeKeys.EVAL
        self._begin_step(self._mode)
        self._on_input(module, args)

    def _on_input(self, module: torch.nn.Module, args: Any) -> None:
        if INPUTS in self.config.collections and args and _is_tensor(args[0]):
            self._capture(INPUT_TENSOR_NAME, INPUTS, args[0])

    def _activation_hook(self, name: str, collection: str, *, is_input: bool) -> Any:
        def on_input(module: torch.nn.Module, args: Any) -> None:
            if args and _is_tensor(args[0]):
                self._capture(name, collection, args[0])

        def on_output(module: torch.nn.Module, args: Any, output: Any) -> None:
            if _is_tensor(output):
                self._capture(name, collection, output)

        return on_input if is_input else on_output

    def _on_loss(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self._capture(LOSS_TENSOR_NAME, LOSSES, output)

    def _on_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        params = (p for g in optimizer.param_groups for p in g["params"])
        names = self._param_names
        self.save_parameters((names.get(id(p), f"param_{i}"), p) for i, p in enumerate(params))
        self._finish_step()

    # -- internals ------------------------------------------------------------------------

    def _begin_step(self, mode: ModeKeys, step: int | None = None) -> None:
        self._finish_step()
        self._mode_steps[mode] = self._mode_steps[mode] + 1 if step is None else step
        self._global_step += 1
        record = StepRecord(mode, self._mode_steps[mode], self._global_step, time.time())
        self._step = _OpenStep(record)

    def _finish_step(self) -> None:
        step = self._step
        if step is None or step.written:
            return
        step.written = True
        _to_host(step, self.host_copier)
        if step.record.tensors or step.record.packed:  # nothing selected: no file
            self._writer.put(step.record)

    def _is_due(self, collection: str, mode_step: int) -> bool:
        config = self.config.collections.get(collection)
        if config is None:
            if collection in (LOSSES, GRADIENTS, WEIGHTS, BIASES, ACTIVATIONS, INPUTS):
                return False  # built-in collections are saved only when configured
            config = self.config.save_config
        return config.should_save(mode_step, self._mode.value)

    def _module_specs(self) -> dict[str, CollectionSpec]:
        """Collections that select module inputs/outputs."""
        specs = {n: s for n, s in self.config.specs.items() if s.selects_modules()}
        if ACTIVATIONS in self.config.collections and ACTIVATIONS not in specs:
            base = self.config.specs.get(ACTIVATIONS, CollectionSpec())
            specs[ACTIVATIONS] = CollectionSpec(
                module_types=DEFAULT_ACTIVATION_TYPES,
                save_inputs=base.save_inputs,
                save_outputs=base.save_outputs,
                reduction_config=base.reduction_config,
            )
        return specs

    def _reduction_config(self, collection: str) -> ReductionConfig | None:
        spec = self.config.specs.get(collection)
        if spec is not None and spec.reduction_config is not None:
            return spec.reduction_config
        return self.config.reduction_config

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
        reductions = self._reduction_config(collection)
        if reductions is not None and _is_tensor(value):
            pending = step.reductions if step.reductions is not None else {}
            step.reductions = pending
            for suffix, reduced in _reduce(value, reductions).items():
                pending[name + suffix] = reduced
                step.record.collection_of[name + suffix] = collection
            if not reductions.save_raw_tensor:
                return
        step.record.tensors[name] = _snapshot(value)
        step.record.collection_of[name] = collection

    def _capture_many(self, step: _OpenStep, items: list[tuple[str, str, Any]]) -> None:
        """Save many tensors of one step (all due, the step open): per-tensor reductions
        where a collection asks for them, the raw tensors in one batched copy per
        (device, dtype), its transfer to the host started at once."""
        raw: list[tuple[str, str, Any]] = []
        reduced: dict[str, list[tuple[str, str, Any]]] = {}  # collection -> its items
        for item in items:
            reduced.setdefault(item[1], []).append(item)
        for collection, group in reduced.items():
            reductions = self._reduction_config(collection)
            if reductions is None:
                raw += group
                continue
            _reduce_many(step, group, reductions)
            if reductions.save_raw_tensor:
                raw += group
        if not raw:
            return
        record = step.record
        groups: dict[tuple[Any, Any], list[tuple[str, str, Any]]] = {}
        for item in raw:
            value = item[2]
            if value.is_sparse:
                record.tensors[item[0]] = _snapshot(value)
                record.collection_of[item[0]] = item[1]
                continue
            groups.setdefault((value.device, value.dtype), []).append(item)
        for group in groups.values():
            record.packed.append(_pack(group, self.host_copier))
            for name, collection, _ in group:
                record.collection_of[name] = collection

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, DebuggerWarning, stacklevel=3)


def process_rank() -> tuple[int, int]:
    """(rank, number of processes) of this training process: torch.distributed's once the
    script has set it up, else torchrun's RANK and WORLD_SIZE, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def _write_workers_meta(out_dir: str, workers: int, torch_version: str) -> None:
    """The top meta.json of a store of several workers; each writes the same one."""
    meta = store.workers_meta(workers, "pytorch", torch_version)
    if not is_s3(out_dir):
        store.write_json(os.path.join(out_dir, META_FILE), meta)
        return
    from remedy.debugger.s3 import S3Uploader

    with tempfile.TemporaryDirectory(prefix="remedy-debugger-") as staging:
        path = os.path.join(staging, META_FILE)
        store.write_json(path, meta)
        S3Uploader(out_dir).upload(path, META_FILE)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _snapshot(value: Any) -> Any:
    """A private copy on the tensor's own device: the live tensor changes at the update,
    the copy must not. The copy to the host happens once per step, in _to_host."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_sparse:
            value = value.to_dense()
        return value.detach().clone()
    array = np.array(value, copy=True)
    if array.dtype.kind not in "biuf":  # fail here, not later on the writer thread
        raise TypeError(f"cannot save a value of dtype {array.dtype}; numbers only")
    return array


def _reduce(value: torch.Tensor, config: ReductionConfig) -> dict[str, torch.Tensor]:
    """Reductions of one tensor, computed on its device; each a 0-d float64 tensor."""
    import torch

    data = value.detach()
    if data.is_sparse:
        data = data.to_dense()
    # float64 so sums of large tensors keep their precision (MPS has no float64)
    wide = torch.float32 if data.device.type == "mps" else torch.float64
    data = data.to(wide) if data.dtype != wide else data
    out: dict[str, torch.Tensor] = {}
    for reduction, absolute in config.keys():
        operand = data.abs() if absolute else data
        out[reduction_key("", reduction, absolute)] = _REDUCE[reduction](operand)
    return out


def _reduce_many(
    step: _OpenStep, items: list[tuple[str, str, Any]], config: ReductionConfig
) -> None:
    """The reductions of many tensors of one collection, left on their devices for the
    step's one transfer: norms (l1, l2; the abs_ variants are the same numbers) in one
    fused kernel per norm (torch._foreach_norm), the other reductions one tensor at a time."""
    import torch

    pending = step.reductions if step.reductions is not None else {}
    step.reductions = pending
    collection_of = step.record.collection_of
    dense = [
        (name, value.detach().to_dense() if value.is_sparse else value.detach())
        for name, _, value in items
    ]
    collection = items[0][1]
    by_device: dict[Any, list[tuple[str, Any]]] = {}
    for name, value in dense:
        by_device.setdefault(value.device, []).append((name, value))
    for reduction, absolute in config.keys():
        suffix = reduction_key("", reduction, absolute)
        if reduction in NORMS:
            order = 1 if reduction == "l1" else 2
            for device, group in by_device.items():
                wide = torch.float32 if device.type == "mps" else torch.float64
                tensors = [value for _, value in group]
                try:
                    norms = torch._foreach_norm(tensors, order, dtype=wide)
                except (RuntimeError, TypeError):  # an unusual tensor: one at a time
                    norms = tuple(torch.linalg.vector_norm(t, order, dtype=wide) for t in tensors)
                for (name, _), norm in zip(group, norms, strict=True):
                    pending[name + suffix] = norm
                    collection_of[name + suffix] = collection
    others = ReductionConfig(
        reductions=tuple(r for r in config.reductions if r not in NORMS),
        abs_reductions=tuple(r for r in config.abs_reductions if r not in NORMS),
    )
    if not others.keys():
        return
    for name, value in dense:  # one widening per tensor for all its other reductions
        for key_suffix, number in _reduce(value, others).items():
            pending[name + key_suffix] = number
            collection_of[name + key_suffix] = collection


def _reduction_fns() -> dict[str, Any]:
    import torch

    def guard(fn: Any) -> Any:  # min/max of an empty tensor raise; NaN says "nothing there"
        return lambda t: fn(t) if t.numel() else torch.tensor(float("nan"), dtype=t.dtype)

    return {
        "min": guard(torch.min),
        "max": guard(torch.max),
        "mean": guard(torch.mean),
        "std": guard(lambda t: torch.std(t, correction=0)),
        "variance": guard(lambda t: torch.var(t, correction=0)),
        "sum": torch.sum,
        "prod": torch.prod,
        "l1": lambda t: torch.linalg.vector_norm(t, 1),
        "l2": lambda t: torch.linalg.vector_norm(t, 2),
    }


class _LazyFns(dict):  # torch is imported only when a hook reduces something
    def __missing__(self, key: str) -> Any:
        self.update(_reduction_fns())
        return dict.__getitem__(self, key)


_REDUCE: dict[str, Any] = _LazyFns()


def _pack(group: list[tuple[str, str, Any]], copier: HostCopier) -> Packed:
    """One batched copy of tensors of one device and dtype (a private copy: the live
    tensors may change right after), its transfer to the host started."""
    import torch

    with torch.no_grad():  # half the cost of detach() per tensor: no view is tracked
        tensors = [value.reshape(-1) for _, _, value in group]
        flat = torch.cat(tensors)  # a new tensor even for one input
    offsets = [0]
    for tensor in tensors:
        offsets.append(offsets[-1] + tensor.numel())
    return Packed(
        copier.start(flat),
        [name for name, _, _ in group],
        [tuple(value.shape) for _, _, value in group],
        offsets,
    )


def _to_host(step: _OpenStep, copier: HostCopier) -> None:
    """Start moving a finished step's tensors to the host: one transfer for all
    reductions (per device) and one per (device, dtype) for the single raw tensors living
    on an accelerator (CPU tensors stay as they are). Nothing here waits for a device."""
    import torch

    record = step.record
    if step.reductions:
        by_device: dict[Any, list[str]] = {}
        for key, value in step.reductions.items():
            by_device.setdefault(value.device, []).append(key)
        for keys in by_device.values():
            stacked = torch.stack([step.reductions[k].reshape(()) for k in keys])
            record.packed.append(
                Packed(copier.start(stacked), keys, [()] * len(keys), list(range(len(keys) + 1)))
            )
        step.reductions = None
    groups: dict[Any, list[tuple[str, str, Any]]] = {}
    for name, value in record.tensors.items():
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            groups.setdefault((value.device, value.dtype), []).append((name, "", value))
    for group in groups.values():
        record.packed.append(_pack(group, copier))
        for name, _, _ in group:
            del record.tensors[name]


def _to_numpy(value: Any) -> np.ndarray:
    """Runs on the writer thread."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16:
            value = value.float()  # numpy has no bfloat16
        return value.numpy()
    return np.asarray(value)
