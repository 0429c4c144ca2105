"""RemedyCallback for the Hugging Face Trainer: the tensor store and the stop file.

    from remedy.debugger.integrations.transformers import RemedyCallback
    trainer = transformers.Trainer(model, args, callbacks=[RemedyCallback()], ...)

Needs `transformers` (and `accelerate`, which its Trainer needs): pip install
'remedy-train[transformers]'.

What it does, at the Trainer's own events (debugger/integrations/common.py does the saving):
  - on_init_end / on_train_begin: creates the store (REMEDY_DEBUGGER_CONFIG, or the config /
    out_dir given) and puts a forward hook on the model. Under torch.distributed each
    process writes its own part of the store (workers/worker_<rank>/), as the Hook does;
  - one TRAIN step per optimizer update, numbered by state.global_step (0 = the first
    update; a resumed run goes on from its checkpoint's step), begun at on_step_begin;
    "loss" = the loss the model returns (its output's `loss`: the batch carries labels),
    over the update's micro-batches the mean, or the sum when the Trainer passes
    num_items_in_batch (the model then scales each micro-batch's loss itself);
    gradients/weights/biases at on_pre_optimizer_step, after the Trainer clipped them
    (max_grad_norm), named by their path in the model ("transformer.h.0.attn.c_attn.weight");
  - one EVAL step per forward of the model in eval mode (evaluate(), predict()), with its
    loss when it returns one;
  - at on_step_end: when REMEDY_STOP_FILE (or stop_file) exists (as seen by any process:
    under torch.distributed the decision is reduced over them),
    control.should_training_stop = True, so the Trainer ends train() after this update;
  - at on_train_end the steps are flushed to disk; the store is closed (end.json) by close()
    or when the process exits, so an evaluate() after train() is captured.
A loss computed outside the model (compute_loss_func, label smoothing, an overridden
compute_loss) is not seen: save it with callback.hook.save_tensor("loss", loss, "losses").
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError(
        "remedy.debugger.integrations.transformers needs Hugging Face transformers: "
        "pip install 'remedy-train[transformers]' (or transformers and accelerate)"
    ) from exc

from remedy.debugger.config import HookConfig, SaveConfig  # noqa: E402
from remedy.debugger.hook import Hook, _Callback  # noqa: E402
from remedy.debugger.integrations.common import (  # noqa: E402
    FrameworkCapture,
    loss_of,
    resolve_config,
    resolve_stop_file,
)
from remedy.debugger.modes import ModeKeys  # noqa: E402

__all__ = ["RemedyCallback"]


class RemedyCallback(TrainerCallback):
    """Saves a Hugging Face Trainer's losses and gradients to a remedy store and stops the
    Trainer when the job's stop file appears; see the module docstring."""

    def __init__(
        self,
        config: HookConfig | str | os.PathLike[str] | None = None,
        *,
        out_dir: str | os.PathLike[str] | None = None,
        collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
        save_config: SaveConfig | None = None,
        stop_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """`config`: a HookConfig or its JSON file; or `out_dir` with `collections` and
        `save_config` as Hook() takes them; neither: the file REMEDY_DEBUGGER_CONFIG names
        (no store when it is unset). `stop_file`: default REMEDY_STOP_FILE."""
        store = resolve_config(
            config, out_dir=out_dir, collections=collections, save_config=save_config
        )
        self.capture = FrameworkCapture(store, resolve_stop_file(stop_file))
        self._handles: list[Any] = []

    @property
    def hook(self) -> Hook | None:
        """The store's writer (None before the Trainer starts, on other processes, or
        without a store): hook.save_tensor(name, value, collection) adds to the current step."""
        return self.capture.hook

    def close(self) -> None:
        """Write the last step and the store's end marker (end.json)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.capture.close()

    # -- the Trainer's events -------------------------------------------------------------

    def on_init_end(
        self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any
    ) -> None:
        self._start(state, model)

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any
    ) -> None:
        self._start(state, model)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.capture.begin_train(state.global_step)

    def on_pre_optimizer_step(
        self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any
    ) -> None:
        if model is not None:
            self.capture.end_update(state.global_step, model.named_parameters())

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if _any_process(self.capture.stop_requested(), args.device):
            control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.capture.flush()

    # -- the model's forward ------------------------------------------------------------

    def _start(self, state: Any, model: Any) -> None:
        if self.capture.hook is not None:
            return
        self.capture.start(model)
        if self.capture.hook is None or model is None:
            return
        self._handles += [
            model.register_forward_pre_hook(_Callback(self._before_forward)),
            model.register_forward_hook(_Callback(self._after_forward), with_kwargs=True),
        ]

    def _before_forward(self, module: Any, args: Any) -> None:
        if not module.training:  # evaluate() / predict(): one EVAL step per batch
            self.capture.begin(ModeKeys.EVAL)

    def _after_forward(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        loss = loss_of(output)
        if loss is None:
            return
        if module.training:
            self.capture.add_loss(loss, summed="num_items_in_batch" in kwargs)
        else:
            self.capture.save_loss(loss)


def _any_process(decision: bool, device: Any) -> bool:
    """True when any process of a torch.distributed job decides so (one process that stops
    alone would leave the others waiting in their next collective); the decision itself in
    a single process."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return decision
    flag = torch.tensor([int(decision)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
