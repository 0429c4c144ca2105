"""What the framework callbacks share: the store, the steps, the losses and the stop file.

A callback tells a FrameworkCapture where the framework is:

    capture = FrameworkCapture(config=None)      # None: $REMEDY_DEBUGGER_CONFIG, if set
    capture.start(model)                         # once, on the process that writes
    capture.begin_train(global_step)             # a batch of update `global_step` begins
    capture.add_loss(loss)                       # each loss backpropagated for it
    capture.end_update(global_step, model.named_parameters())  # gradients final, not applied
    capture.begin(ModeKeys.EVAL); capture.save_loss(loss)       # an evaluation batch
    capture.stop_requested()                     # the stop file is there
    capture.close()

Steps go to the store through the explicit Hook's writer (Hook.begin_step with the
framework's step number, save_tensor, save_parameters, end_step), so the store, its names
("loss", "gradient/<param path in the model>", weights, biases) and its save intervals are
the Hook's. The model is registered with Hook.register_module(count_steps=False): the
activation and input collections work, while the steps are the framework's.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remedy.debugger.config import CONFIG_ENV_VAR, HookConfig, SaveConfig
from remedy.debugger.exceptions import DebuggerWarning
from remedy.debugger.hook import LOSS_TENSOR_NAME, LOSSES, Hook
from remedy.debugger.modes import ModeKeys

if TYPE_CHECKING:
    import torch

# The job contract's stop file (remedy.state_schema.job_env names it too; the debugger
# imports nothing of ours, so the name is spelled here as well).
STOP_FILE_ENV_VAR = "REMEDY_STOP_FILE"


def resolve_config(
    config: HookConfig | str | os.PathLike[str] | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
    save_config: SaveConfig | None = None,
) -> HookConfig | None:
    """The store's configuration: `config` (a HookConfig or a JSON file in the format of
    REMEDY_DEBUGGER_CONFIG), else `out_dir` with `collections` / `save_config` (as Hook()
    takes them), else the file $REMEDY_DEBUGGER_CONFIG names; None: no store."""
    if config is not None and out_dir is not None:
        raise ValueError("give config or out_dir, not both")
    if out_dir is None and (collections is not None or save_config is not None):
        raise ValueError("collections and save_config need out_dir")
    if isinstance(config, HookConfig):
        return config
    if config is not None:
        return HookConfig.from_json_file(config)
    if out_dir is not None:
        return HookConfig.build(out_dir, save_config, collections)
    path = os.environ.get(CONFIG_ENV_VAR)
    return HookConfig.from_json_file(path) if path else None


def resolve_stop_file(stop_file: str | os.PathLike[str] | None) -> Path | None:
    if stop_file is not None:
        return Path(stop_file)
    path = os.environ.get(STOP_FILE_ENV_VAR)
    return Path(path) if path else None


class FrameworkCapture:
    """The store and the stop file of one framework callback; see the module docstring."""

    def __init__(self, config: HookConfig | None, stop_file: Path | None) -> None:
        self.config = config
        self.stop_file = stop_file
        self.hook: Hook | None = None
        self._started = False
        self._losses: list[tuple[torch.Tensor, bool]] = []  # (loss, summed) of the update
        self._train_step = -1  # the TRAIN step last begun (the framework's global step)
        self._open: ModeKeys | None = None  # the mode of the step open in the hook

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, model: torch.nn.Module | None) -> None:
        """Create the store (once) and register the model's activation/input hooks.

        A store that already exists (another hook of this job got there first) is left to
        its writer, with a warning: the callback then saves nothing but still stops."""
        if self._started:
            return
        self._started = True
        if self.config is None:
            return
        try:
            self.hook = Hook.from_config(self.config)
        except FileExistsError as exc:
            warnings.warn(
                f"remedy callback: {exc}; this callback saves no tensors",
                DebuggerWarning,
                stacklevel=3,
            )
            return
        if model is not None:
            self.hook.register_module(model, count_steps=False)

    def flush(self) -> None:
        """End the open step and wait until every step is on disk (the store stays open)."""
        if self.hook is not None:
            self._end_open()
            self.hook.flush()

    def close(self) -> None:
        """Write the last step and the store's end marker. Safe to call twice; the Hook
        also closes itself when the process exits."""
        self._losses.clear()
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook.close()

    # -- steps ----------------------------------------------------------------------------

    def begin_train(self, global_step: int) -> None:
        """A training batch of update `global_step` begins (a later micro-batch of the same
        update continues its step)."""
        if self.hook is None or global_step <= self._train_step:
            return
        self._train_step = global_step
        self._losses.clear()
        self.hook.begin_step(ModeKeys.TRAIN, global_step)
        self._open = ModeKeys.TRAIN

    def add_loss(self, loss: Any, *, summed: bool = True) -> None:
        """A loss backpropagated for the current update. summed=True: the update's loss is
        the sum of them (a framework that divides each micro-batch's loss by the
        accumulation count); False: their mean."""
        if self.hook is None or not _is_scalar(loss):
            return
        self._losses.append((loss.detach().reshape(()), summed))

    def end_update(
        self, global_step: int, named_parameters: Iterable[tuple[str, torch.Tensor]]
    ) -> None:
        """The update's gradients are final and not applied yet: save the update's loss and
        the parameters due, and hand the step to the writer."""
        hook = self.hook
        if hook is None:
            return
        if self._open is not ModeKeys.TRAIN or global_step != self._train_step:
            if global_step <= self._train_step:  # its step was written already (an
                self._losses.clear()  # evaluation batch came in between): not saved
                return
            self.begin_train(global_step)  # an update whose batch start was not seen
        losses, self._losses = self._losses, []
        if losses and hook.is_due(LOSSES):
            hook.save_tensor(LOSS_TENSOR_NAME, _combine(losses), collection=LOSSES)
        hook.save_parameters(named_parameters)
        hook.end_step()
        self._open = None

    def begin(self, mode: ModeKeys) -> None:
        """An evaluation (EVAL) or prediction (PREDICT) batch begins: the next step of that
        mode, counted by the Hook."""
        if self.hook is None:
            return
        if self._open is ModeKeys.TRAIN:
            self._losses.clear()  # an update interrupted: its step is written as it is
        self.hook.begin_step(mode)
        self._open = mode

    def save_loss(self, loss: Any) -> None:
        """The loss of the current evaluation batch."""
        if self.hook is not None and self._open is not None and _is_scalar(loss):
            self.hook.save_tensor(LOSS_TENSOR_NAME, loss.detach().reshape(()), collection=LOSSES)

    def end_batch(self) -> None:
        """An evaluation or prediction batch ended: its step goes to the writer."""
        if self._open is not None and self._open is not ModeKeys.TRAIN:
            self._end_open()

    def _end_open(self) -> None:
        if self.hook is not None and self._open is not None:
            self.hook.end_step()
        self._open = None

    # -- stopping -------------------------------------------------------------------------

    def stop_requested(self) -> bool:
        """The job is asked to stop: the stop file exists."""
        return self.stop_file is not None and self.stop_file.exists()


def loss_of(output: Any) -> Any:
    """The loss in a model's or a step's output: the tensor itself, or its "loss" entry
    (a dict, or a Hugging Face ModelOutput); None when there is none."""
    if isinstance(output, Mapping):
        output = output.get("loss")
    else:
        output = getattr(output, "loss", output)
    return output if _is_scalar(output) else None


def _is_scalar(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.numel() == 1


def _combine(losses: list[tuple[torch.Tensor, bool]]) -> torch.Tensor:
    import torch

    values = [loss.float() for loss, _ in losses]
    if len(values) == 1:
        return values[0]
    device = values[0].device
    stacked = torch.stack([v.to(device) for v in values])
    return stacked.sum() if any(summed for _, summed in losses) else stacked.mean()
