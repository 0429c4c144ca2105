"""Zero-code capture: losses and gradients of an unmodified PyTorch script, per update.

    capture = ZeroCodeCapture(HookConfig.from_json_file(path), observer)  # or from_env()
    capture.install()      # torch's global hooks; nothing is attached to the script's objects
    ...run the script...
    capture.close()        # remove the hooks, write the store's end marker

What it hooks (all process-wide, none on the script's model or optimizer objects, so
torch.save(model), copy.deepcopy(model) and pickling keep working):
  - every module call (torch.nn.modules.module.register_module_forward_pre_hook): the
    modules seen name the parameters (debugger/param_names.py: their path in the outermost
    module, as the explicit Hook names them);
  - torch.autograd.backward (which Tensor.backward calls): the scalar being backpropagated
    is a loss; the outermost call only (reentrant checkpointing backpropagates inside);
  - every torch.optim optimizer step (register_optimizer_step_pre_hook);
  - torch.optim.Optimizer.__init__, to know whether an optimizer exists at all, and
    torch.nn.Module.compile, to see a model compiled in place.

A step is one update:
  - when a torch.optim optimizer exists, an update is its step(). The gradients are taken
    at its step pre-hook, i.e. accumulated over every backward() since the previous
    update, once; the loss is the mean of the losses backpropagated since then. A
    step(closure) (PyTorch Lightning, LBFGS) runs its backward inside step(), after the
    pre-hook: the closure is wrapped (_AfterClosure) and the update taken when it returns.
  - when none exists (manual updates such as p.data.add_(p.grad, alpha=-lr)), each
    backward() is an update, taken as soon as it returns (before the script applies it),
    with the gradients of the parameters of the modules seen.

At each update, in order: the store (when a config is given) gets a TRAIN step, with
"loss" in "losses" and "gradient/<name>" in "gradients" (and "weights"/"biases") exactly
when the config's save intervals make them due, through the explicit Hook's own writer
(Hook.begin_step / save_tensor / save_parameters / end_step); then the observer's
on_update(Update) runs, before the update is applied, so it may stop the job (raise) or
discard the update's gradients. observer.between_updates() runs when a backward() starts:
the previous update is complete, a point for stopping cleanly. Store step numbers count
from 0 (store step = Update.step - 1).

AMP: torch.autocast needs nothing. torch.amp.GradScaler.step (torch.cuda.amp's and
torch.cpu.amp's GradScaler derive from it) is wrapped while installed, and restored at
close: the scaler calls optimizer.step() only when the gradients are finite, so an update
it skips is known when its step() returns without one, and is recorded then as a step
(Update.scaler_skipped; "scaler_skipped" = 1.0 in "losses", no gradients or weights, which
were not applied). Every update under a scaler carries its scale (Update.loss_scale,
"loss_scale" in "losses"), and its loss and gradient norm are divided by it: the losses
backpropagated were scaled, and so were the gradients of an optimizer that unscales in its
own step (fused=True; torch hands it optimizer.grad_scale and optimizer.found_inf, from
which such a skip is read). Instances and pickling are untouched: only the class's method.

Per update, when nothing is due, the cost is one pass over the gradients and the observer:
on a device, their float64 L2 norms (one fused kernel) and one device-to-host transfer (the
loss and those norms); on the CPU, numpy's dot over each gradient's own memory, no torch
operation (_read_in_place: half the torch path's cost). Per module call it is one
dictionary lookup, and nothing at all once the names have settled: when an update's
parameters all have names and no new module was seen since the previous update, the global
module hook is removed (it puts every module call on torch's slow path); it is installed
again when an optimizer's number of parameters changes or holds unnamed ones, or when
updates become manual. Never removed once a torch.compile'd model runs: compiled code
guards on the global hooks, removing ours would recompile it.

One-step lag (lag="accelerator", what the launcher uses unless its NaN guard is "skip"):
on a GPU, reading the loss and norms back at once would make the training thread wait for
the whole step queued on the device. Instead, at each update the loss and the norms are
stacked into one small tensor on the device and copied, non-blocking, into a pinned host
buffer (debugger/host_copy.py), and the observer sees update N when update N+1 comes (or
at report_pending()/close()), reading the copy queued an update ago, which is normally
done: the training thread does not stall. The price: update N has been applied when the
observer sees it, so a NaN guard that stops the job stops it before update N+1, one
update late, and cannot discard update N's gradients (hence no lag for "skip"); progress
records are written one update late. The store is not lagged: its tensors are taken at
their own update. Not lagged, whatever `lag` says: values on the CPU ("always" lags them
too, so that CPU-only tests run this logic), on several devices, and updates under an AMP
GradScaler (its skip is known only from those values). Extra memory: two host buffers of
(1 + parameters) float64 numbers.

torch.compile: inside a compiled region every hook returns at once on
torch.compiler.is_compiling(), which torch.compile folds to a constant, so the hooks add
no graph break. A compiled model's outer call (the OptimizedModule) runs eagerly and is
seen. Our hooks' own frames are marked never to be compiled (_keep_dynamo_out), so where a
compiled function falls back to eager code (backward() always does) they run as they are.
What runs only inside compiled code is not captured: an optimizer.step() compiled as part
of a larger compiled function is not seen (a warning says so after UNSEEN_STEPS_WARNING
backward() calls).

Not captured (use the explicit Hook for these): activations and inputs (collections with
module types or regexes), EVAL/PREDICT steps (forward passes without an update are not
steps), losses computed with torch.autograd.grad, updates of optimizers that are not
torch.optim.Optimizer subclasses when a torch.optim optimizer also exists.
"""

from __future__ import annotations

import functools
import math
import sys
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from remedy.debugger.config import CONFIG_ENV_VAR, HookConfig
from remedy.debugger.exceptions import DebuggerWarning
from remedy.debugger.hook import (
    ACTIVATIONS,
    BIASES,
    GRADIENTS,
    INPUTS,
    LOSS_TENSOR_NAME,
    LOSSES,
    WEIGHTS,
    Hook,
)
from remedy.debugger.host_copy import HostCopier, HostCopy
from remedy.debugger.modes import ModeKeys
from remedy.debugger.param_names import ParameterNames

if TYPE_CHECKING:
    import torch

# Collections the zero-code capture fills; others in a config need the explicit Hook.
ZERO_CODE_COLLECTIONS = (LOSSES, GRADIENTS, WEIGHTS, BIASES)
# backward() calls without an optimizer step (an optimizer existing) before saying so
UNSEEN_STEPS_WARNING = 1000
# AMP: with a GradScaler, saved in "losses" beside "loss" (so at its interval): the scale of
# each step, and 1.0 at a step whose update the scaler skipped (gradients not finite).
LOSS_SCALE_TENSOR_NAME = "loss_scale"
SCALER_SKIPPED_TENSOR_NAME = "scaler_skipped"
# When the observer sees an update: see "One-step lag" in the module docstring.
ReadLag = Literal["off", "accelerator", "always"]
READ_LAGS: tuple[ReadLag, ...] = ("off", "accelerator", "always")
# torch warns that a global module hook also fires for the OptimizedModule; the registry
# expects exactly that (it unwraps it), so the warning would only confuse a job's log.
_COMPILE_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


@dataclass(frozen=True)
class Update:
    """One update (one step) as the capture saw it: before it is applied, or, read one
    update late (`applied`, see "One-step lag"), after."""

    step: int  # updates so far, this one included: 1 for the first
    loss: float | None  # mean of the losses backpropagated since the last update; may be nan
    grad_norm: float | None  # L2 norm of all the update's gradients; None: none (CPU: each
    # gradient's sum of squares in its own dtype, float32 mostly, to about 1e-7; a device:
    # float64. Finite exactly when every gradient is, either way.)
    learning_rate: float | None  # the optimizer's first parameter group's; None if manual
    micro_batches: int  # backward() calls since the previous update
    manual: bool  # True: no torch.optim optimizer; the backward() is the update
    wall_time: float  # seconds since the Unix epoch
    _named: Callable[[], list[tuple[str, torch.Tensor]]] = field(repr=False, compare=False)
    # With an AMP GradScaler: the scale the update's losses and gradients were multiplied by
    # (loss and grad_norm above are divided by it); None when no scaler took part.
    loss_scale: float | None = None
    # The scaler found non-finite gradients and did not apply the update (it then lowers
    # its scale): the update is reported after the fact, its gradients as they overflowed.
    scaler_skipped: bool = False
    # Read one update late (the lag): the optimizer has applied it already, and the job can
    # only stop before the next one.
    applied: bool = False

    @property
    def finite(self) -> bool:
        """The loss and every gradient are finite (what is absent counts as finite)."""
        return all(v is None or math.isfinite(v) for v in (self.loss, self.grad_norm))

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """The update's parameters with their names (as in "gradient/<name>")."""
        return self._named()

    def nonfinite_gradients(self) -> list[str]:
        """Names of the parameters whose gradient holds a NaN or an infinity."""
        import torch

        return [
            name
            for name, p in self._named()
            if p.grad is not None and not bool(torch.isfinite(p.grad).all())
        ]

    def discard_gradients(self) -> None:
        """Make the update change nothing: an optimizer skips parameters without a gradient
        (grad set to None); a manual update adds zeros (grad zeroed in place)."""
        for _, param in self._named():
            if param.grad is None:
                continue
            if self.manual:
                param.grad.zero_()
            else:
                param.grad = None


class UpdateObserver(Protocol):
    def on_update(self, update: Update) -> None:
        """At each update, after the store got its step, before the update is applied."""

    def between_updates(self) -> None:
        """When a backward() starts: the previous update is complete, the next one not
        begun; a point to stop at cleanly."""


class ZeroCodeCapture:
    """Installs torch's global hooks; see the module docstring. One per process at a time."""

    _installed: ZeroCodeCapture | None = None

    def __init__(
        self,
        config: HookConfig | None,
        observer: UpdateObserver | None = None,
        *,
        lag: ReadLag = "off",
    ) -> None:
        """`config`: where and what to save (None: no store; the observer still sees every
        update). The store is created at the first update, so a script that builds its own
        Hook from the same config before it (Hook.from_env()) keeps the store to itself.
        `lag`: when the observer sees an update (see "One-step lag" in the module
        docstring): "off", at once; "accelerator", one update later when the values live
        on an accelerator; "always", one update later on any device (CPU tests of it)."""
        if lag not in READ_LAGS:
            raise ValueError(f"lag: {lag!r} is not one of {list(READ_LAGS)}")
        self.config = config
        self.observer = observer
        self.lag = lag
        self._values_copier = HostCopier(max_buffers=2, staged=lag == "always")
        self._pending: _PendingUpdate | None = None  # an update whose values are on the way
        self.names = ParameterNames()
        self.steps = 0
        self.last_update: Update | None = None
        self.hook: Hook | None = None  # the store's writer, once created
        self._store_state = "pending" if config is not None else "off"  # -> "on" | "off"
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        # each optimizer that stepped: its parameters' ids (separate_optimizers)
        self._stepping: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()
        self.separate_optimizers = 0  # optimizers that stepped parameters of their own
        self._losses: list[torch.Tensor] = []
        self._micro_batches = 0
        self._backward_depth = 0
        self._undo: list[Callable[[], None]] = []
        self._entry_codes: list[Any] = []  # code objects of the functions torch calls
        # Watching module calls (to name parameters): the hook's handle, None once settled
        self._watch: Callable[[], Any] | None = None
        self._module_hook: Any = None
        self._seen_at_update = -1  # names.modules_seen at the previous update
        self._compiled = False  # a compiled model runs: module calls stay watched
        # optimizers whose parameters were all named, with their number then
        self._settled: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._scaler: Any = None  # the GradScaler whose step() is running, if any
        self._stepped = False  # an optimizer step ran inside that scaler step
        self._dynamo_kept_out = False

    @classmethod
    def from_env(cls, observer: UpdateObserver | None = None) -> ZeroCodeCapture:
        """Saving to the store that $REMEDY_DEBUGGER_CONFIG names; no store when unset."""
        import os

        path = os.environ.get(CONFIG_ENV_VAR)
        return cls(HookConfig.from_json_file(path) if path else None, observer)

    @property
    def installed(self) -> bool:
        return ZeroCodeCapture._installed is self

    # -- installing -----------------------------------------------------------------------

    def install(self) -> ZeroCodeCapture:
        import torch
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        if ZeroCodeCapture._installed is not None:
            raise RuntimeError("a zero-code capture is already installed in this process")
        ZeroCodeCapture._installed = self
        is_compiling = torch.compiler.is_compiling
        saw = self.names.saw

        def on_module_call(module: torch.nn.Module, args: Any) -> None:
            if not is_compiling():
                saw(module)

        def on_step(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
            if is_compiling():
                return None
            # args are step()'s own: (optimizer, closure?)
            closure = kwargs["closure"] if "closure" in kwargs else (args[1:2] or [None])[0]
            if closure is None:
                self._optimizer_update(optimizer)
                return None
            # step(closure) (PyTorch Lightning, LBFGS): the backward runs inside step(),
            # after this pre-hook; the update is taken when the closure returns.
            wrapped = _AfterClosure(self, optimizer, closure)
            if "closure" in kwargs:
                return args, {**kwargs, "closure": wrapped}
            return (args[0], wrapped, *args[2:]), kwargs

        self._undo.append(register_optimizer_step_pre_hook(on_step).remove)
        self._watch = functools.partial(register_module_forward_pre_hook, on_module_call)
        self._module_hook = self._watch()
        self._undo.append(self._stop_watching_modules)

        original_backward = torch.autograd.backward

        @functools.wraps(original_backward)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if self._backward_depth or is_compiling():
                return original_backward(*args, **kwargs)
            if not self._dynamo_kept_out:
                self._keep_dynamo_out()
            if self.observer is not None:
                self.observer.between_updates()
            self._backward_depth += 1
            try:
                result = original_backward(*args, **kwargs)
            finally:
                self._backward_depth -= 1
            self._after_backward(args[0] if args else kwargs.get("tensors"))
            return result

        self._patch(torch.autograd, "backward", backward)

        optimizers = self._optimizers
        original_init = torch.optim.Optimizer.__init__

        @functools.wraps(original_init)
        def optimizer_init(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            optimizers.add(optimizer)
            if not self._dynamo_kept_out:  # torch.optim has just imported torch._dynamo
                self._keep_dynamo_out()

        self._patch(torch.optim.Optimizer, "__init__", optimizer_init)

        original_compile = torch.nn.Module.compile

        @functools.wraps(original_compile)
        def compile_in_place(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            saw(module)  # its calls run compiled from now on: the hook never sees them
            self._compiled = True  # compiled code guards on the hooks: keep ours (_settle)
            result = original_compile(module, *args, **kwargs)
            self._keep_dynamo_out()
            return result

        self._patch(torch.nn.Module, "compile", compile_in_place)
        entries: list[Callable[..., Any]] = [
            on_module_call,
            on_step,
            backward,
            optimizer_init,
            compile_in_place,
        ]
        entries.append(_AfterClosure.__call__)

        scaler_class = _grad_scaler_class()
        if scaler_class is not None:
            original_scaler_step = scaler_class.step

            @functools.wraps(original_scaler_step)
            def scaler_step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
                # The scaler calls optimizer.step() only when the gradients are finite: our
                # step pre-hook then reads the scale here, and a step it skips is seen.
                if is_compiling() or self._scaler is not None:
                    return original_scaler_step(scaler, optimizer, *args, **kwargs)
                self._scaler, self._stepped = scaler, False
                try:
                    result = original_scaler_step(scaler, optimizer, *args, **kwargs)
                finally:
                    self._scaler = None
                if not self._stepped and scaler.is_enabled():
                    self._skipped_update(optimizer, scaler)
                return result

            self._patch(scaler_class, "step", scaler_step)
            entries.append(scaler_step)

        self._entry_codes = [f.__code__ for f in entries]
        self._keep_dynamo_out()
        warnings.filterwarnings("ignore", message=_COMPILE_WARNING, category=UserWarning)
        self._undo.append(functools.partial(_remove_filter, warnings.filters[0]))
        return self

    def report_pending(self) -> None:
        """Show the observer the update still on its way (one-step lag), now; the
        observer's exceptions (a NaN guard's stop) propagate. Nothing when none is."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._report(pending.finish())

    def close(self) -> None:
        """Remove every hook and close the store (end.json), after the observer has seen
        the last update (report_pending; its exception is raised once the store is
        closed). Safe to call twice."""
        undo, self._undo = self._undo, []
        for action in reversed(undo):
            action()
        self._watch = None  # no module hook after close, settled or not
        if ZeroCodeCapture._installed is self:
            ZeroCodeCapture._installed = None
        self._losses.clear()
        try:
            self.report_pending()
        finally:
            if self.hook is not None:
                hook, self.hook = self.hook, None
                hook.close()

    def __enter__(self) -> ZeroCodeCapture:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- updates --------------------------------------------------------------------------

    def _after_backward(self, tensors: Any) -> None:
        loss = _scalar(tensors)
        if loss is not None:
            self._losses.append(loss)
        self._micro_batches += 1
        if len(self._optimizers) == 0:  # no torch.optim: this backward() is the update
            if self._module_hook is None and self._watch is not None:
                self._module_hook = self._watch()  # its parameters come from modules seen
            trainable = self.names.trainable()
            params = [p for _, p in trainable if p.grad is not None]
            named = [(n, p) for n, p in trainable if p.grad is not None]
            self._update(params, lambda: named, None, manual=True)
        elif self._micro_batches == UNSEEN_STEPS_WARNING:
            warnings.warn(
                f"zero-code capture: {UNSEEN_STEPS_WARNING} backward() calls and no optimizer "
                "step seen: a step that runs inside torch.compile is not captured (compile "
                "the model, not the optimizer step); no steps are recorded",
                DebuggerWarning,
                stacklevel=3,
            )

    def _optimizer_update(self, optimizer: torch.optim.Optimizer) -> None:
        scaler = self._scaler
        if scaler is not None:
            self._stepped = True
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if optimizer not in self._stepping:
            self._saw_optimizer(optimizer, params)
        names = self.names
        named = functools.partial(names.named, params)
        self._settle(optimizer, params)
        self._update(params, named, optimizer, manual=False, scaler=scaler)

    def _saw_optimizer(self, optimizer: Any, params: list[torch.Tensor]) -> None:
        """Counts the optimizers that step parameters of their own: a GAN's discriminator's
        and generator's are 2, each step() an update of its own, and the losses between
        them the two networks' (no one objective to minimise). An optimizer that steps
        an inner one over the same parameters (ZeroRedundancyOptimizer) adds none."""
        ids = frozenset(map(id, params))
        if all(ids.isdisjoint(other) for other in self._stepping.values()):
            self.separate_optimizers += 1
        self._stepping[optimizer] = ids

    def _settle(self, optimizer: Any, params: list[torch.Tensor]) -> None:
        """Stop watching module calls once they can name nothing new: a global module hook
        puts every module call on torch's slow path (about 10 µs a call on a loaded CPU),
        and the calls are watched only to name parameters. Once an update's parameters all
        have names and no new module was seen since the previous update, the hook goes;
        it comes back when an optimizer's number of parameters changes (add_param_group)
        or has parameters without a name, or when updates become manual. (Parameters
        added to an optimizer whose module is first called while unwatched are named
        "param_<i>" in that one update, and by their module from the next.)"""
        names = self.names
        if self._module_hook is None:
            if self._settled.get(optimizer) == len(params):
                return
            if names.all_named(params):  # another optimizer, its modules seen already
                self._settled[optimizer] = len(params)
            elif self._watch is not None:
                self._module_hook = self._watch()
                self._seen_at_update = -1
            return
        seen = names.modules_seen
        if self._compiled or names.saw_compiled():
            # Compiled code guards on the global hooks: removing ours would recompile it.
            self._compiled = True
            return
        if seen == self._seen_at_update and names.all_named(params):
            self._settled[optimizer] = len(params)
            self._stop_watching_modules()
        self._seen_at_update = seen

    def _stop_watching_modules(self) -> None:
        hook, self._module_hook = self._module_hook, None
        if hook is not None:
            hook.remove()

    def _skipped_update(self, optimizer: Any, scaler: Any) -> None:
        """scaler.step(optimizer) returned without calling optimizer.step(): non-finite
        gradients, an update not applied. Still a step of the script's loop: recorded."""
        import torch

        if not isinstance(optimizer, torch.optim.Optimizer) or not self._optimizers:
            return  # manual updates: its backward() was the step
        params = [p for group in optimizer.param_groups for p in group["params"]]
        named = functools.partial(self.names.named, params)
        self._update(params, named, optimizer, manual=False, scaler=scaler, skipped=True)

    def _update(
        self,
        params: Sequence[torch.Tensor],
        named: Callable[[], list[tuple[str, torch.Tensor]]],
        optimizer: torch.optim.Optimizer | None,
        *,
        manual: bool,
        scaler: Any = None,
        skipped: bool = False,
    ) -> None:
        self.steps += 1
        named = _Once(named)  # the store and the observer list the parameters once
        losses, self._losses = self._losses, []
        micro_batches, self._micro_batches = self._micro_batches, 0
        loss = _mean(losses)
        # With a GradScaler the losses backpropagated were multiplied by its scale (until
        # scaler.update() after the step), and so were the gradients unless unscaled
        # already: an optimizer that unscales inside its own step (fused=True) is handed
        # the scale as optimizer.grad_scale and the scaler's verdict as optimizer.found_inf.
        scale = found_inf = grad_scale = None
        if scaler is not None:
            scale = _loss_scale(scaler)
            if not skipped:
                found_inf = getattr(optimizer, "found_inf", None)
                grad_scale = getattr(optimizer, "grad_scale", None)
        if loss is not None and scale is not None:
            loss = loss / scale.to(device=loss.device, dtype=loss.dtype)
        grads = [p.grad for p in params if p.grad is not None]
        values = None
        if scaler is None and self.lag != "off":
            values = _device_values(loss, grads, always=self.lag == "always")
        if values is not None:  # one-step lag: this update is reported at the next one
            self._save(loss, None, False, named)
            pending = _PendingUpdate(
                step=self.steps,
                has_loss=loss is not None,
                copy=self._values_copier.start(values),
                learning_rate=_learning_rate(optimizer),
                micro_batches=micro_batches,
                manual=manual,
                wall_time=time.time(),
                named=named,
            )
            self.report_pending()  # the previous one: its copy has long been done
            self._pending = pending
            return
        self.report_pending()  # updates reach the observer in order
        loss_value, norm_value, (scale_value, found_value, grad_scale_value) = _host_values(
            loss, grads, [scale, found_inf, grad_scale]
        )
        if found_value:  # a fused step skips the update itself
            skipped = True
        if grad_scale_value and norm_value is not None:
            norm_value /= grad_scale_value
        update = Update(
            step=self.steps,
            loss=loss_value,
            grad_norm=norm_value,
            learning_rate=_learning_rate(optimizer),
            micro_batches=micro_batches,
            manual=manual,
            wall_time=time.time(),
            _named=named,
            loss_scale=scale_value,
            scaler_skipped=skipped,
        )
        self._save(loss, scale_value, skipped, named)
        self._report(update)

    def _report(self, update: Update) -> None:
        self.last_update = update
        if self.observer is not None:
            self.observer.on_update(update)

    # -- the store ------------------------------------------------------------------------

    def _save(
        self,
        loss: torch.Tensor | None,
        loss_scale: float | None,
        scaler_skipped: bool,
        named: Callable[[], list[tuple[str, torch.Tensor]]],
    ) -> None:
        hook = self._store()
        if hook is None:
            return
        try:
            hook.begin_step(ModeKeys.TRAIN)
            if loss is not None:
                hook.save_tensor(LOSS_TENSOR_NAME, loss, collection=LOSSES)
            if loss_scale is not None:  # scalars beside the loss, saved when it is
                hook.save_tensor(LOSS_SCALE_TENSOR_NAME, loss_scale, collection=LOSSES)
            if scaler_skipped:
                # Nothing of the parameters: the overflowed gradients were never applied
                # (ExplodingTensor would call the scaler's routine a divergence).
                hook.save_tensor(SCALER_SKIPPED_TENSOR_NAME, 1.0, collection=LOSSES)
            else:
                hook.save_parameters(_lazy(named))
            hook.end_step()
        except Exception:  # a store that fails must not end the training
            self._store_state = "off"
            warnings.warn(
                "zero-code capture: saving to the store failed, no more tensors are saved:\n"
                + traceback.format_exc(),
                DebuggerWarning,
                stacklevel=2,
            )

    def _store(self) -> Hook | None:
        if self._store_state == "pending":
            assert self.config is not None
            self._store_state = "off"
            try:
                self.hook = Hook.from_config(self.config)
            except FileExistsError:
                warnings.warn(
                    f"zero-code capture: {self.config.out_dir} already holds a store (the "
                    "script's own Hook?); the zero-code capture saves no tensors",
                    DebuggerWarning,
                    stacklevel=3,
                )
                return None
            self._store_state = "on"
            ignored = sorted(
                name
                for name in self.config.collections
                if name in (ACTIVATIONS, INPUTS) or name in self.config.specs
            )
            if ignored:
                warnings.warn(
                    f"zero-code capture saves {', '.join(ZERO_CODE_COLLECTIONS)}; collections "
                    f"{ignored} need the explicit Hook (register_module)",
                    DebuggerWarning,
                    stacklevel=3,
                )
        return self.hook if self._store_state == "on" else None

    def _keep_dynamo_out(self) -> None:
        """Tell torch.compile never to compile a frame of ours that runs eagerly.

        Inside a compiled function, code torch.compile cannot trace (backward(), an
        optimizer step it gives up on) runs eagerly, and torch.compile tries to compile
        every new frame it meets there: our hooks and what they call, which would cost
        graph-break records, compilations and recompilations (they read our state). So
        each hook's code is marked to run as is, with everything it calls (as torch marks
        frames it gives up on). Tracing is unaffected: a hook torch.compile inlines into a
        graph still sees is_compiling() and does nothing. Done once torch._dynamo is loaded,
        never by importing it (that takes seconds)."""
        if self._dynamo_kept_out:
            return
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is None:
            return
        try:
            from torch._dynamo.types import FrameAction, FrameExecStrategy

            skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
            for code in self._entry_codes:
                eval_frame.set_code_exec_strategy(code, skip)
        except (ImportError, AttributeError, TypeError):  # another torch: frames compile
            pass
        self._dynamo_kept_out = True

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, replacement)
        self._undo.append(lambda: setattr(owner, name, original))


class _AfterClosure:
    """The closure an optimizer's step(closure) gets instead of the script's: when the
    closure first returns (its backward has run, the optimizer has not updated yet), the
    update is taken, as the step pre-hook takes it when there is no closure. Later calls
    (LBFGS evaluates the closure again within one step) are part of the same update: their
    losses and backward() calls are not counted towards the next one."""

    __slots__ = ("_capture", "_closure", "_optimizer", "_taken")

    def __init__(self, capture: ZeroCodeCapture, optimizer: Any, closure: Any) -> None:
        self._capture = capture
        self._optimizer = optimizer
        self._closure = closure
        self._taken = False

    def __call__(self) -> Any:
        result = self._closure()
        capture = self._capture
        if not self._taken:
            self._taken = True
            capture._optimizer_update(self._optimizer)
        else:
            capture._losses.clear()
            capture._micro_batches = 0
        return result


@dataclass
class _PendingUpdate:
    """An update whose loss and gradient norms are being copied to the host (one-step
    lag): made into its Update when the next update comes, or at report_pending()."""

    step: int
    has_loss: bool
    copy: HostCopy  # [loss?, gradient norms...] on their way to a host buffer
    learning_rate: float | None
    micro_batches: int
    manual: bool
    wall_time: float
    named: Callable[[], list[tuple[str, torch.Tensor]]]

    def finish(self) -> Update:
        """Waits for the copy (done long since, normally: it was queued an update ago)."""
        values = self.copy.result().tolist()
        self.copy.release()
        loss = values.pop(0) if self.has_loss else None
        return Update(
            step=self.step,
            loss=loss,
            grad_norm=math.hypot(*values) if values else None,
            learning_rate=self.learning_rate,
            micro_batches=self.micro_batches,
            manual=self.manual,
            wall_time=self.wall_time,
            _named=self.named,
            applied=True,
        )


class _Once:
    """A function's result, computed at the first call only."""

    __slots__ = ("_make", "_value")

    def __init__(self, make: Callable[[], list[tuple[str, torch.Tensor]]]) -> None:
        self._make = make
        self._value: list[tuple[str, torch.Tensor]] | None = None

    def __call__(self) -> list[tuple[str, torch.Tensor]]:
        if self._value is None:
            self._value = self._make()
        return self._value


def _remove_filter(entry: Any) -> None:
    if entry in warnings.filters:
        cast("list[Any]", warnings.filters).remove(entry)  # a list (typeshed: a Sequence)


def _lazy(
    make: Callable[[], list[tuple[str, torch.Tensor]]],
) -> Iterator[tuple[str, torch.Tensor]]:
    """Named parameters, listed only if iterated (Hook.save_parameters does when due)."""
    yield from make()


def _scalar(tensors: Any) -> torch.Tensor | None:
    """The loss being backpropagated: a one-element tensor, detached, on its device."""
    import torch

    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    if isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
        return tensors.detach().reshape(())
    return None


def _wide(device: torch.device) -> torch.dtype:
    import torch

    return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64


def _mean(losses: list[torch.Tensor]) -> torch.Tensor | None:
    import torch

    if not losses:
        return None
    if len(losses) == 1:
        return losses[0].float()
    device = losses[0].device
    return torch.stack([t.to(device=device, dtype=torch.float32) for t in losses]).mean()


def _norms(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each gradient's L2 norm as a 0-d tensor on its device, in float64 (so that their
    combination is finite exactly when every gradient is); one fused kernel when it can."""
    import torch

    if not grads:
        return []
    dense = grads
    if any(g.is_sparse for g in grads):
        dense = [g.to_dense() if g.is_sparse else g for g in grads]
    try:
        return list(torch._foreach_norm(dense, 2, dtype=_wide(dense[0].device)))
    except (RuntimeError, TypeError):  # mixed devices or an unusual tensor: one at a time
        return [torch.linalg.vector_norm(g, dtype=_wide(g.device)) for g in dense]


def _device_values(
    loss: torch.Tensor | None, grads: list[torch.Tensor], always: bool
) -> torch.Tensor | None:
    """[loss?, each gradient's L2 norm] as one float64 tensor on their device, for a
    lagged read; None when they are on the CPU (unless `always`), on several devices, or
    there is nothing to read: those are read at once."""
    if not grads and loss is None:
        return None
    device = grads[0].device if grads else loss.device  # type: ignore[union-attr]
    if device.type == "cpu" and not always:
        return None
    if any(g.device != device for g in grads) or (loss is not None and loss.device != device):
        return None
    import torch

    norms = _norms(grads)
    parts = norms if loss is None else [loss.to(norms[0].dtype if norms else _wide(device))]
    if loss is not None:
        parts.extend(norms)
    return torch.stack(parts)


def _host_values(
    loss: torch.Tensor | None,
    grads: list[torch.Tensor],
    extras: Sequence[torch.Tensor | float | None] = (),
) -> tuple[float | None, float | None, list[float | None]]:
    """(loss, L2 norm of all gradients, the extra scalars) as numbers, in one
    device-to-host transfer (None stays None)."""
    import torch

    present = [(i, x) for i, x in enumerate(extras) if x is not None]
    extra_values: list[float | None] = [None] * len(extras)
    if loss is not None and not present:  # the usual update (no AMP scaler)
        read = _read_in_place(loss, grads) or _read_stacked(loss, grads)
        if read is not None:
            return read[0], read[1], extra_values
    norms = _norms(grads)
    if loss is None and not norms and not present:
        return None, None, extra_values
    device: torch.device | str | None = (
        norms[0].device if norms else loss.device if loss is not None else None
    )
    if device is None:
        device = present[0][1].device if isinstance(present[0][1], torch.Tensor) else "cpu"
    wide = _wide(torch.device(device))
    parts = [torch.as_tensor(x, device=device).reshape(()).to(wide) for _, x in present]
    if loss is not None:
        parts.append(loss.to(device=device, dtype=wide))
    parts.extend(norms)
    try:
        values = torch.stack(parts).tolist()
    except RuntimeError:  # gradients on several devices
        values = torch.stack([p.to(device) for p in parts]).tolist()
    for (i, _), value in zip(present, values, strict=False):
        extra_values[i] = value
    values = values[len(present) :]
    loss_value = values.pop(0) if loss is not None else None
    return loss_value, (math.hypot(*values) if norms else None), extra_values


def _read_stacked(loss: torch.Tensor, grads: list[torch.Tensor]) -> tuple[float, float] | None:
    """(loss, L2 norm of all gradients): each gradient's float64 norm, one fused kernel,
    stacked with the loss and read in one transfer; None without gradients, or with them
    on another device than the loss."""
    import torch

    norms = _norms(grads)
    if not norms or loss.device != norms[0].device:
        return None
    values = torch.stack([loss.to(norms[0].dtype), *norms]).tolist()
    return values[0], math.hypot(*values[1:])


def _read_in_place(loss: torch.Tensor, grads: list[torch.Tensor]) -> tuple[float, float] | None:
    """(loss, L2 norm of all gradients) of dense float32/float64 CPU tensors, read where
    they lie: numpy's dot over each gradient's own memory, no torch operation and no copy
    (about half _read_stacked's cost: benchmarks/update_read.py). None where it does not
    apply, or where the norm is not finite: _read_stacked then decides in float64, so a
    gradient that is only huge (its float32 sum of squares overflows) is never called
    non-finite."""
    import numpy as np

    if not grads or loss.device.type != "cpu":
        return None
    total = 0.0
    for grad in grads:
        try:  # refused for a GPU, sparse or bfloat16 tensor, or a view numpy cannot share
            values = grad.numpy().reshape(-1)
        except (RuntimeError, TypeError):
            return None
        if values.dtype.kind != "f" or values.itemsize < 4:  # float16 would sum in float16
            return None
        total += float(np.dot(values, values))
    if not math.isfinite(total):
        return None
    return loss.item(), math.sqrt(total)


def _grad_scaler_class() -> Any:
    """torch.amp.GradScaler (torch.cuda.amp's and torch.cpu.amp's derive from it); None in
    a torch without it."""
    try:
        from torch.amp.grad_scaler import GradScaler
    except ImportError:
        return None
    return GradScaler if "step" in GradScaler.__dict__ else None


def _loss_scale(scaler: Any) -> torch.Tensor | None:
    """The scaler's current scale as a 0-d tensor; None when it is disabled (no scaling)."""
    import torch

    if not scaler.is_enabled():
        return None
    scale = getattr(scaler, "_scale", None)  # on the loss's device: read with it, no sync
    if isinstance(scale, torch.Tensor):
        return scale
    return torch.tensor(float(scaler.get_scale()))  # another torch: its public value


def _learning_rate(optimizer: torch.optim.Optimizer | None) -> float | None:
    if optimizer is None or not optimizer.param_groups:
        return None
    lr = optimizer.param_groups[0].get("lr")
    try:
        return None if lr is None else float(lr)
    except (TypeError, ValueError):
        return None
