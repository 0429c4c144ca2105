"""Zero-code capture in process: global hooks only, one step per update, the Hook's store."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.modules import module as module_globals
from torch.optim import optimizer as optimizer_globals

from remedy.debugger import (
    DebuggerWarning,
    Hook,
    HookConfig,
    SaveConfig,
    Update,
    ZeroCodeCapture,
    create_trial,
)
from remedy.debugger.param_names import ParameterNames


class Recorder:
    """An UpdateObserver that keeps each update and a copy of its gradients."""

    def __init__(self) -> None:
        self.updates: list[Update] = []
        self.grads: list[dict[str, torch.Tensor]] = []
        self.between = 0

    def on_update(self, update: Update) -> None:
        self.updates.append(update)
        self.grads.append(
            {n: p.grad.clone() for n, p in update.named_parameters() if p.grad is not None}
        )

    def between_updates(self) -> None:
        self.between += 1


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))


def data(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g)
    return x, x.sum(1, keepdim=True)


def config(out: Path, **collections: int) -> HookConfig:
    return HookConfig.build(out, collections={c: SaveConfig(i) for c, i in collections.items()})


def test_nothing_is_attached_to_the_model_or_optimizer_and_close_restores_torch() -> None:
    before = (
        torch.autograd.backward,
        torch.optim.Optimizer.__init__,
        nn.Module.compile,
        len(module_globals._global_forward_pre_hooks),
        len(optimizer_globals._global_optimizer_pre_hooks),
        len(optimizer_globals._global_optimizer_post_hooks),
    )
    model = mlp()
    with ZeroCodeCapture(None, Recorder()):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x, y = data()
        for _ in range(2):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())
        assert not optimizer._optimizer_step_pre_hooks
        # what a user's script does at the end: all of it works while capturing
        buffer = io.BytesIO()
        torch.save(model, buffer)
        buffer.seek(0)
        reloaded = torch.load(buffer, weights_only=False)
        assert torch.equal(reloaded[0].weight, model[0].weight)
        copy.deepcopy(model)
        pickle.loads(pickle.dumps(model))
        torch.save(optimizer.state_dict(), io.BytesIO())
    after = (
        torch.autograd.backward,
        torch.optim.Optimizer.__init__,
        nn.Module.compile,
        len(module_globals._global_forward_pre_hooks),
        len(optimizer_globals._global_optimizer_pre_hooks),
        len(optimizer_globals._global_optimizer_post_hooks),
    )
    assert after == before


def test_with_gradient_accumulation_a_step_is_an_update_saved_once(tmp_path: Path) -> None:
    model, recorder = mlp(), Recorder()
    x, y = data(32)
    micro_losses: list[list[float]] = []
    with ZeroCodeCapture(config(tmp_path, losses=1, gradients=1), recorder) as capture:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(3):
            optimizer.zero_grad()
            micro_losses.append([])
            for xb, yb in zip(x.split(8), y.split(8), strict=True):  # 4 micro-batches
                loss = nn.functional.mse_loss(model(xb), yb) / 4
                loss.backward()
                micro_losses[-1].append(loss.item())
            optimizer.step()
        assert capture.steps == 3

    assert [u.step for u in recorder.updates] == [1, 2, 3]
    assert all(u.micro_batches == 4 and not u.manual for u in recorder.updates)
    assert all(u.learning_rate == 0.05 for u in recorder.updates)
    for update, losses, grads in zip(recorder.updates, micro_losses, recorder.grads, strict=True):
        assert update.loss == pytest.approx(np.mean(losses), rel=1e-6)
        norm = torch.linalg.vector_norm(torch.stack([g.double().norm() for g in grads.values()]))
        # on the CPU each gradient's sum of squares is taken in its float32 (_read_in_place)
        assert update.grad_norm == pytest.approx(norm.item(), rel=1e-6)

    trial = create_trial(tmp_path)
    assert trial.has_ended and trial.steps() == [0, 1, 2]  # one file per update, not per backward
    names = ["gradient/0.bias", "gradient/0.weight", "gradient/2.bias", "gradient/2.weight"]
    assert sorted(trial.tensor_names(collection="gradients")) == names
    for step, (losses, grads) in enumerate(zip(micro_losses, recorder.grads, strict=True)):
        assert float(trial.tensor("loss").value(step)) == pytest.approx(np.mean(losses), rel=1e-6)
        for name, grad in grads.items():  # the accumulated gradient, as the update used it
            np.testing.assert_array_equal(trial.tensor(f"gradient/{name}").value(step), grad)


def test_without_an_optimizer_each_backward_is_a_step_taken_before_the_update(
    tmp_path: Path,
) -> None:
    model, recorder = mlp(), Recorder()
    x, y = data()
    seen: list[dict[str, torch.Tensor]] = []
    with ZeroCodeCapture(config(tmp_path, losses=1, gradients=2), recorder):
        for _ in range(5):
            model.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            seen.append({n: p.grad.clone() for n, p in model.named_parameters()})
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)

    assert [u.step for u in recorder.updates] == [1, 2, 3, 4, 5]
    assert all(u.manual and u.learning_rate is None for u in recorder.updates)
    trial = create_trial(tmp_path)
    assert trial.tensor("loss").steps() == [0, 1, 2, 3, 4]
    assert trial.tensor("gradient/2.weight").steps() == [0, 2, 4]
    for step in (0, 2, 4):
        for name, grad in seen[step].items():
            np.testing.assert_array_equal(trial.tensor(f"gradient/{name}").value(step), grad)


def test_reentrant_checkpointing_is_one_backward(tmp_path: Path) -> None:
    from torch.utils.checkpoint import checkpoint

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.body, x, use_reentrant=True)

    model, recorder = Checkpointed(), Recorder()
    x, y = data()
    x.requires_grad_(True)  # reentrant checkpointing needs an input that requires grad
    with ZeroCodeCapture(None, recorder):
        for _ in range(3):
            model.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
    assert [u.micro_batches for u in recorder.updates] == [1, 1, 1]
    assert {n for n, _ in recorder.updates[0].named_parameters()} == {
        "body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias",
    }  # fmt: skip


def test_an_observer_stops_before_the_update_or_discards_it() -> None:
    class Stop(BaseException):
        pass

    class StopAtTwo(Recorder):
        def on_update(self, update: Update) -> None:
            super().on_update(update)
            if update.step == 2:
                raise Stop
            if update.step == 1:
                update.discard_gradients()

    model = mlp()
    x, y = data()
    with ZeroCodeCapture(None, StopAtTwo()):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        start = copy.deepcopy(model.state_dict())
        for step in (1, 2):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            if step == 1:
                optimizer.step()  # discarded: no parameter has a gradient any more
            else:
                with pytest.raises(Stop):
                    optimizer.step()  # raised in the pre-hook: never applied
    for name, value in model.state_dict().items():
        assert torch.equal(value, start[name]), name


def test_parameter_names_follow_the_outermost_module_seen() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
            self.head = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(x))

    net, other = Net(), Net()
    loose = nn.Parameter(torch.zeros(1))
    names = ParameterNames()
    names.saw(net.encoder)  # a submodule called on its own first: still named from the root
    compiled = torch.compile(net)  # (kept: the registry holds modules weakly)
    names.saw(compiled)  # the compiled wrapper: unwrapped, no "_orig_mod."
    names.saw(other)  # a second model with the same paths: prefixed
    assert names.name(net.encoder[0].weight, 0) == "encoder.0.weight"
    assert names.name(net.head.bias, 3) == "head.bias"
    assert names.name(other.head.bias, 3) == "model1.head.bias"
    assert names.name(loose, 7) == "param_7"  # of no module seen: the Hook's fallback
    trainable = dict((n, p) for n, p in names.trainable())
    assert trainable["encoder.0.weight"] is net.encoder[0].weight
    assert len(trainable) == 8


def test_a_store_that_exists_is_left_to_the_scripts_own_hook(tmp_path: Path) -> None:
    model = mlp()
    x, y = data()
    explicit = Hook(tmp_path, collections={"losses": SaveConfig(1)})
    explicit.register_module(model)
    recorder = Recorder()
    with pytest.warns(DebuggerWarning, match="already holds a store"):
        with ZeroCodeCapture(config(tmp_path, losses=1, gradients=1), recorder):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            explicit.register_optimizer(optimizer)
            for _ in range(2):
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                explicit.save_tensor("loss", loss, collection="losses")
                loss.backward()
                optimizer.step()
    explicit.close()
    assert len(recorder.updates) == 2  # the observer still sees every update
    trial = create_trial(tmp_path)
    assert trial.steps() == [0, 1] and trial.tensor_names(collection="gradients") == []


def test_collections_it_cannot_fill_are_named_and_weights_are_saved(tmp_path: Path) -> None:
    model = mlp()
    x, y = data()
    hook_config = config(tmp_path, losses=1, weights=2, biases=2, activations=1)
    with pytest.warns(DebuggerWarning, match="activations"):
        with ZeroCodeCapture(hook_config, Recorder()):
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            for _ in range(3):
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
    trial = create_trial(tmp_path)
    assert sorted(trial.tensor_names(collection="weights")) == ["0.weight", "2.weight"]
    assert sorted(trial.tensor_names(collection="biases")) == ["0.bias", "2.bias"]
    assert trial.tensor("0.weight").steps() == [0, 2]
    assert trial.tensor_names(collection="activations") == []


def test_a_backward_of_no_scalar_has_no_loss_and_nonfinite_gradients_are_named() -> None:
    model, recorder = mlp(), Recorder()
    x, _ = data()
    with ZeroCodeCapture(None, recorder):
        model.zero_grad()
        out = model(x)
        out.backward(torch.full_like(out, float("inf")))  # no loss: a vector-Jacobian product
    (update,) = recorder.updates
    assert update.loss is None and not update.finite
    assert set(update.nonfinite_gradients()) == {"0.weight", "0.bias", "2.weight", "2.bias"}


def test_cpu_gradients_read_in_place_agree_with_float64_and_keep_finiteness() -> None:
    """The CPU's in-place read (numpy's dot over float32) gives the float64 norm to 1e-6;
    a gradient so large that its float32 sum of squares overflows is still finite (the
    float64 path decides), a NaN or an inf one is not."""
    from remedy.debugger.zero_code import _host_values, _read_in_place

    loss = torch.tensor(2.5)
    grads = [torch.randn(300, 40), torch.randn(40), torch.randn(7, 3, 3, 3)]
    exact = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
    assert _read_in_place(loss, grads) == (2.5, pytest.approx(exact, rel=1e-6))
    huge = [g * 1e30 for g in grads]  # finite, but 1e60 squared overflows float32
    assert _read_in_place(loss, huge) is None
    _, norm, _ = _host_values(loss, huge)
    assert norm is not None and math.isfinite(norm) and norm == pytest.approx(exact * 1e30)
    for bad in (math.nan, math.inf):
        broken = [grads[0].clone(), grads[1]]
        broken[0][3, 4] = bad
        _, norm, _ = _host_values(loss, broken)
        assert norm is not None and not math.isfinite(norm)
    # what numpy cannot share, or would sum imprecisely, goes the torch way
    assert _read_in_place(loss, [grads[1].bfloat16()]) is None
    assert _read_in_place(loss, [grads[1].half()]) is None
    assert _read_in_place(loss, [grads[1].to_sparse()]) is None


def test_only_one_capture_at_a_time() -> None:
    with ZeroCodeCapture(None):
        with pytest.raises(RuntimeError, match="already installed"):
            ZeroCodeCapture(None).install()


@pytest.mark.parametrize("style", ["positional", "keyword", "lbfgs"])
def test_a_step_with_a_closure_is_taken_after_its_backward(tmp_path: Path, style: str) -> None:
    """optimizer.step(closure) (PyTorch Lightning's loop, LBFGS) runs the forward and backward
    inside step(), after the step pre-hook: the update is the closure's, before it is
    applied, not the previous one's."""
    model, recorder = mlp(), Recorder()
    x, y = data()
    losses: list[float] = []
    states: list[dict[str, torch.Tensor]] = []
    with ZeroCodeCapture(config(tmp_path, losses=1, gradients=1), recorder) as capture:
        if style == "lbfgs":
            optimizer: torch.optim.Optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)
        else:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        for _ in range(3):
            states.append(copy.deepcopy(model.state_dict()))
            losses.append(nn.functional.mse_loss(model(x), y).item())  # no backward
            if style == "keyword":
                optimizer.step(closure=closure)
            else:
                optimizer.step(closure)
        assert capture.steps == 3

    assert [u.step for u in recorder.updates] == [1, 2, 3]
    # LBFGS evaluates the closure several times in one step: still one update, of 1 backward
    assert all(u.micro_batches == 1 for u in recorder.updates)
    probe = mlp()
    for update, loss, grads, state in zip(
        recorder.updates, losses, recorder.grads, states, strict=True
    ):
        assert update.loss == pytest.approx(loss, rel=1e-6)  # this step's loss, not the last
        probe.load_state_dict(state)  # the gradient at the weights before the update
        probe.zero_grad()
        nn.functional.mse_loss(probe(x), y).backward()
        for name, param in probe.named_parameters():
            torch.testing.assert_close(grads[name], param.grad)
    trial = create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2]
    assert [float(trial.tensor("loss").value(s)) for s in range(3)] == pytest.approx(losses)


# -- one-step lag (the GPU path's reading, run on CPU with lag="always") ----------------


class StepLog(Recorder):
    """A Recorder that also notes how many optimizer.step() calls had begun when it saw
    each update, and can stop the training at one update (an exception of its own)."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.calls = 0  # optimizer.step() calls begun, counted by the training loop
        self.seen_at: list[int] = []
        self.stop_at = stop_at

    def on_update(self, update: Update) -> None:
        super().on_update(update)
        self.seen_at.append(self.calls)
        if update.step == self.stop_at:
            raise Stopped(update.step)


class Stopped(Exception):
    pass


def train(
    observer: StepLog | None,
    lag: str,
    steps: int,
    store: Path | None = None,
    model: nn.Module | None = None,
) -> None:
    """`steps` updates of the MLP (`model`: this one); no capture when no observer."""
    model = mlp() if model is None else model
    x, y = data()
    capture = ZeroCodeCapture(
        config(store, losses=1, gradients=1) if store else None, observer, lag=lag
    )
    with capture if observer is not None else contextlib.nullcontext():
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(steps):
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            if observer is not None:
                observer.calls += 1
            optimizer.step()
    if observer is not None:
        assert capture.steps == steps


def test_lagged_updates_reach_the_observer_one_update_late_with_the_same_values(
    tmp_path: Path,
) -> None:
    at_once, lagged = StepLog(), StepLog()
    train(at_once, "off", 4)
    train(lagged, "always", 4, tmp_path)

    assert at_once.seen_at == [1, 2, 3, 4]  # in its own optimizer.step()
    # update N when update N+1 comes; the last one at close()
    assert lagged.seen_at == [2, 3, 4, 4]
    assert [u.step for u in lagged.updates] == [1, 2, 3, 4]
    for mine, theirs in zip(lagged.updates, at_once.updates, strict=True):
        # at once on the CPU: float32 sums of squares; lagged, as on a device: float64
        assert mine.loss == theirs.loss
        assert mine.grad_norm == pytest.approx(theirs.grad_norm, rel=1e-6)
        assert mine.learning_rate == 0.05 and mine.micro_batches == 1 and not mine.manual
    # the store is not lagged: each step holds its own update's loss and gradients
    trial = create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2, 3]
    for step, update in enumerate(at_once.updates):
        assert float(trial.tensor("loss").value(step)) == pytest.approx(update.loss, rel=1e-6)
    grads = at_once.grads[0]["2.weight"].numpy()
    np.testing.assert_allclose(trial.tensor("gradient/2.weight").value(0), grads, rtol=1e-6)


def test_with_lag_a_stopping_observer_stops_one_update_late() -> None:
    # Update 2 stops the job: without lag inside the 2nd optimizer.step(), before update
    # 2 is applied; with lag inside the 3rd, update 2 applied and update 3 not.
    models = {}
    observers = {"off": StepLog(stop_at=2), "always": StepLog(stop_at=2)}
    for lag, observer in observers.items():
        models[lag] = mlp()
        with pytest.raises(Stopped):
            train(observer, lag, 4, model=models[lag])
    assert observers["off"].calls == 2 and observers["always"].calls == 3
    # the update that stopped it says whether it had been applied (its guard's words)
    assert not observers["off"].updates[-1].applied and observers["always"].updates[-1].applied
    for lag, applied in (("off", 1), ("always", 2)):
        plain = mlp()
        train(None, "off", applied, model=plain)
        for got, want in zip(models[lag].parameters(), plain.parameters(), strict=True):
            torch.testing.assert_close(got, want)


def test_lag_on_an_accelerator_only_reads_cpu_values_at_once() -> None:
    accelerator = StepLog()
    train(accelerator, "accelerator", 3)
    assert accelerator.seen_at == [1, 2, 3]


def test_report_pending_shows_the_lagged_update_and_an_unknown_lag_is_refused() -> None:
    with pytest.raises(ValueError, match="lag: 'sometimes'"):
        ZeroCodeCapture(None, Recorder(), lag="sometimes")  # type: ignore[arg-type]
    observer = StepLog()
    model = mlp()
    x, y = data()
    with ZeroCodeCapture(None, observer, lag="always") as capture:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        assert observer.updates == [] and capture.last_update is None
        capture.report_pending()
        assert [u.step for u in observer.updates] == [1]
        assert capture.last_update is observer.updates[0]
        capture.report_pending()  # nothing more on its way
        assert len(observer.updates) == 1


def test_module_calls_are_watched_until_the_names_settle() -> None:
    # The global module hook puts every module call on torch's slow path: it goes once an
    # update's parameters all have names and an update passed without a new module, and
    # comes back for an optimizer that gains parameters of a module not seen yet.
    def module_hooks() -> int:
        return len(module_globals._global_forward_pre_hooks)

    before = module_hooks()
    model, extra = mlp(), nn.Linear(1, 1)
    x, y = data()
    with ZeroCodeCapture(None, Recorder()) as capture:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        hooks = []
        for step in range(7):
            if step == 3:
                optimizer.add_param_group({"params": extra.parameters()})
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            if step >= 3:
                loss = loss + extra(loss.detach().reshape(1, 1)).sum() * 0
            loss.backward()
            optimizer.step()
            hooks.append(module_hooks() - before)
        names = [n for n, _ in capture.last_update.named_parameters()]  # type: ignore[union-attr]
    # update 1 sees the model first; update 2 nothing new: settled. Update 4 has two
    # parameters more, of a module called while unwatched: watched again; update 5 sees
    # it, update 6 nothing new: settled again.
    assert hooks == [1, 0, 0, 1, 1, 0, 0]
    assert names[-2:] == ["weight", "bias"]  # named from its module, not param_<i>
    assert module_hooks() == before


def test_optimizers_over_parameters_of_their_own_are_counted() -> None:
    """A GAN's two optimizers step parameters of their own: 2, each step() an update. An
    optimizer that steps an inner one over the same parameters (as ZeroRedundancyOptimizer
    does) adds none, nor does a second step of one already seen."""

    class Wrapper(torch.optim.SGD):  # its step() steps an inner optimizer of its parameters
        def __init__(self, params: list[nn.Parameter]) -> None:
            super().__init__(params, lr=0.1)
            self.inner = torch.optim.SGD(params, lr=0.1)

        def step(self, closure: object = None) -> None:  # type: ignore[override]
            self.inner.step()

    gen, disc = mlp(), mlp()
    x, y = data()
    capture = ZeroCodeCapture(None, Recorder()).install()
    try:
        wrapped = Wrapper(list(gen.parameters()))
        for _ in range(2):
            nn.functional.mse_loss(gen(x), y).backward()
            wrapped.step()
        assert capture.separate_optimizers == 1
        opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
        nn.functional.mse_loss(disc(x), y).backward()
        opt_d.step()
        assert capture.separate_optimizers == 2
    finally:
        capture.close()
