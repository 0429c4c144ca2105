"""Replay a repro bundle's step on CPU and say where it first goes non-finite.

replay(path) rebuilds the model and optimizer from the bundle's hyperparameters, loads the
state and the batch, restores the RNG to what it was before the step and runs the step's
forward and backward (never the update) with a hook on every module, so it names:
  forward   the first module, in execution order, whose output has a NaN or +-inf
  backward  the first module, in backward order, whose output gradient has one
  parameters  the parameters whose gradients are non-finite
Then it looks for bad records: samples whose input is non-finite, or whose loss alone (eval
mode: samples independent) is, and checks that the step without them is finite.
The job calls it right after writing a bundle, and `remedy repro BUNDLE` calls it again.
"""

from __future__ import annotations

import math
import pdb
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from remedy.state_schema import (
    Hyperparameters,
    PayloadError,
    RunSpec,
    hyperparameters_from_document,
)
from remedy.training.build import build_model_and_optimizer, total_grad_norm
from remedy.training.bundle import BATCH_FILE, META_FILE, Bundle, BundleError, read_bundle
from remedy.training.checkpoint import MODEL_FILE, CheckpointError, load_checkpoint

# Bundles written before the training contract was split out of RunSpec also carry run_spec
# fields the job never read (entry_point, debugger_save_interval): they are not the model's.
NOT_THE_JOBS = set(RunSpec.model_fields) - set(Hyperparameters.model_fields)


@dataclass
class Site:
    """Where a non-finite value first appeared, with the statistics of that tensor."""

    phase: str  # "forward" (module output) or "backward" (gradient of the module output)
    module: str
    stats: dict[str, Any]
    input_stats: dict[str, Any] | None = None  # forward: the module's (first) input


@dataclass
class ReplayResult:
    bundle: str
    step: int
    reproduced: bool  # the replayed step has a non-finite loss or gradient
    loss: float | None
    grad_norm: float | None
    forward: Site | None = None
    backward: Site | None = None
    parameters: list[str] = field(default_factory=list)  # non-finite gradients
    suspect_samples: list[int] = field(default_factory=list)  # bad records (sample ids)
    suspect_shards: list[str] = field(default_factory=list)

    @property
    def first(self) -> Site | None:
        return self.forward or self.backward

    @property
    def localisation(self) -> str | None:
        """'forward stacks.0.1' style: the phase and module of the first non-finite value."""
        if self.first is not None:
            return f"{self.first.phase} {self.first.module}"
        if self.parameters:
            return f"parameter gradient {self.parameters[0]}"
        return None

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"localisation": self.localisation}

    def summary(self) -> str:
        lines = [
            f"bundle {self.bundle}: step {self.step}",
            f"replayed on CPU: loss {self.loss}, gradient norm {self.grad_norm} -> "
            + ("non-finite value reproduced" if self.reproduced else "NOT reproduced (finite)"),
        ]
        for site in (self.forward, self.backward):
            if site is not None:
                what = "output" if site.phase == "forward" else "gradient of output"
                lines.append(f"first non-finite {site.phase}: {site.module} ({what}) {site.stats}")
                if site.input_stats is not None:
                    lines.append(f"  its input: {site.input_stats}")
        if self.parameters:
            more = len(self.parameters) - 5
            names = ", ".join(self.parameters[:5]) + (f" (+{more} more)" if more > 0 else "")
            lines.append(f"non-finite gradients of {len(self.parameters)} parameters: {names}")
        if self.suspect_samples:
            pairs = ", ".join(
                f"{i} ({s})" for i, s in zip(self.suspect_samples, self.suspect_shards, strict=True)
            )
            lines.append(f"bad records: the step is finite without samples {pairs}")
        else:
            lines.append("no single record explains it: a model/optimisation problem")
        return "\n".join(lines)


def tensor_stats(tensor: torch.Tensor) -> dict[str, Any]:
    t = tensor.detach().float()
    finite = t[torch.isfinite(t)]
    return {
        "shape": list(t.shape),
        "nan": int(torch.isnan(t).sum()),
        "posinf": int(torch.isposinf(t).sum()),
        "neginf": int(torch.isneginf(t).sum()),
        "finite_min": float(finite.min()) if finite.numel() else None,
        "finite_max": float(finite.max()) if finite.numel() else None,
        "finite_abs_mean": float(finite.abs().mean()) if finite.numel() else None,
    }


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, list | tuple):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


@contextmanager
def _watch(model: nn.Module, result: ReplayResult) -> Iterator[None]:
    """Record the first non-finite module output (forward) and output gradient (backward)."""

    def on_forward(name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            out = _first_tensor(output)
            if out is None:
                return
            if result.forward is None and not torch.isfinite(out).all():
                inp = _first_tensor(args)
                stats = None if inp is None else tensor_stats(inp)
                result.forward = Site("forward", name, tensor_stats(out), stats)
            if out.requires_grad:
                out.register_hook(on_backward(name))

        return hook

    def on_backward(name: str) -> Any:
        def hook(grad: torch.Tensor) -> None:
            if result.backward is None and not torch.isfinite(grad).all():
                result.backward = Site("backward", name, tensor_stats(grad))

        return hook

    handles = [
        module.register_forward_hook(on_forward(name))
        for name, module in model.named_modules()
        if name  # the root's output is the loss's input: its children name the place
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def bundle_hyperparameters(bundle: Bundle) -> Hyperparameters:
    """The hyperparameters the bundled job trained with, checked by the training contract."""
    values = bundle.meta["hyperparameters"]
    if isinstance(values, dict):
        values = {name: value for name, value in values.items() if name not in NOT_THE_JOBS}
    try:
        return hyperparameters_from_document(values, where=str(bundle.path / META_FILE))
    except PayloadError as exc:
        raise BundleError(f"hyperparameters do not validate here: {exc}") from exc


def check_fits(bundle: Bundle, config: Hyperparameters) -> None:
    """BundleError unless the model the hyperparameters describe has the bundled state's
    shapes and takes the batch. Checked on the meta device, where nothing is allocated: a
    manifest claiming a width of 1024 for a model of width 4 costs nothing."""
    with torch.device("meta"):
        model, _ = build_model_and_optimizer(config)
    expected = {name: tuple(value.shape) for name, value in model.state_dict().items()}
    file = bundle.state_path / MODEL_FILE
    try:
        with safe_open(str(file), "pt") as saved:  # the header only
            found = {name: tuple(saved.get_slice(name).get_shape()) for name in saved.keys()}
    except (SafetensorError, OSError) as exc:
        raise BundleError(f"{file}: unreadable ({exc})") from exc
    if found != expected:
        differ = sorted(set(found) ^ set(expected)) or sorted(
            name for name in found if found[name] != expected[name]
        )
        raise BundleError(
            f"{bundle.path / META_FILE}: its hyperparameters describe a model that does not "
            f"fit the bundled state ({file.name}: {len(differ)} tensor(s) differ, e.g. {differ[0]})"
        )
    try:
        out = model(bundle.images.to("meta"))
    except RuntimeError as exc:
        shape = tuple(bundle.images.shape)
        raise BundleError(
            f"{bundle.path / BATCH_FILE}: images {shape} do not fit the model"
        ) from exc
    labels = bundle.labels
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= out.shape[-1]):
        raise BundleError(f"{bundle.path / BATCH_FILE}: labels outside 0..{out.shape[-1] - 1}")


def rebuild(bundle: Bundle) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The job's model and optimizer, holding the state from before the failing step."""
    config = bundle_hyperparameters(bundle)
    check_fits(bundle, config)  # before anything is allocated
    model, optimizer = build_model_and_optimizer(config)
    try:
        load_checkpoint(bundle.state_path, model, optimizer)
    except CheckpointError as exc:
        raise BundleError(f"{bundle.path}: model state does not load ({exc})") from exc
    model.train()
    return model, optimizer


def _step(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, rng: torch.Tensor
) -> tuple[float, float]:
    """The step's forward and backward (no update): loss and total gradient norm."""
    torch.set_rng_state(rng)
    model.zero_grad(set_to_none=True)
    loss = nn.CrossEntropyLoss()(model(images), labels)
    loss.backward()
    return loss.item(), total_grad_norm(model)


def find_bad_records(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, rng: torch.Tensor
) -> list[int]:
    """Batch positions of samples that alone make the step non-finite ([] if none do)."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    device = next(model.parameters()).device  # the job's batches live on the CPU
    images, labels = images.to(device), labels.to(device)
    bad_input = ~torch.isfinite(images.flatten(1)).all(dim=1)
    model.eval()  # samples are independent in eval mode: one forward gives each one's loss
    with torch.no_grad():
        losses = nn.CrossEntropyLoss(reduction="none")(model(images), labels)
    model.train()
    suspects = bad_input | ~torch.isfinite(losses)
    if not suspects.any() or suspects.all():
        return []
    keep = ~suspects
    loss, grad_norm = _step(model, images[keep], labels[keep], rng)
    model.load_state_dict(state)  # the check's forward moved batch-norm statistics
    model.zero_grad(set_to_none=True)
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return suspects.nonzero().flatten().tolist()
    return []


def replay(path: str | Path) -> ReplayResult:
    """Replay a bundle's step; BundleError if the bundle cannot be read or does not fit."""
    bundle = read_bundle(path)
    model, _ = rebuild(bundle)
    rng_before = torch.get_rng_state()
    try:
        return _replay(bundle, model)
    finally:
        torch.set_rng_state(rng_before)  # in the job, training goes on with its own stream


def _replay(bundle: Bundle, model: nn.Module) -> ReplayResult:
    rng = bundle.rng["torch_cpu"]
    result = ReplayResult(
        bundle=str(bundle.path),
        step=int(bundle.meta["step"]),
        reproduced=False,
        loss=None,
        grad_norm=None,
    )
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with _watch(model, result):
        loss, grad_norm = _step(model, bundle.images, bundle.labels, rng)
    result.loss, result.grad_norm = _finite_or_none(loss), _finite_or_none(grad_norm)
    result.reproduced = not (math.isfinite(loss) and math.isfinite(grad_norm))
    result.parameters = [
        name
        for name, p in model.named_parameters()
        if p.grad is not None and not torch.isfinite(p.grad).all()
    ]
    model.load_state_dict(state)
    if result.reproduced:
        positions = find_bad_records(model, bundle.images, bundle.labels, rng)
        ids = bundle.sample_ids.tolist()
        shards = bundle.meta["samples"].get("shards", [])
        result.suspect_samples = [ids[i] for i in positions]
        result.suspect_shards = [shards[i] if i < len(shards) else "?" for i in positions]
    return result


def debug(path: str | Path, result: ReplayResult) -> None:
    """Replay again and stop in pdb at the first non-finite site's module."""
    site = result.first
    if site is None:
        raise BundleError(f"{path}: nothing non-finite to stop at")
    bundle = read_bundle(path)
    model, _ = rebuild(bundle)
    module = dict(model.named_modules())[site.module]

    def before_forward(module: nn.Module, inputs: Any) -> None:
        print(f"pdb: before {site.module}.forward; `inputs` are its arguments, step in with `s`")
        pdb.set_trace()

    def on_output(module: nn.Module, inputs: Any, output: Any) -> None:
        out = _first_tensor(output)
        if out is not None and out.requires_grad:

            def at_gradient(grad: torch.Tensor) -> None:
                print(f"pdb: gradient of {site.module}'s output is `grad`")
                pdb.set_trace()

            out.register_hook(at_gradient)

    if site.phase == "forward":
        handle = module.register_forward_pre_hook(before_forward)
    else:
        handle = module.register_forward_hook(on_output)
    try:
        _step(model, bundle.images, bundle.labels, bundle.rng["torch_cpu"])
    finally:
        handle.remove()
