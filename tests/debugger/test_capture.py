"""Capture: activations, per-mode and per-collection SaveConfig, reductions, one transfer."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from remedy.debugger import (
    Hook,
    ModeKeys,
    ReductionConfig,
    SaveConfig,
    StepUnavailable,
    TensorUnavailableForStep,
    create_trial,
)
from remedy.debugger.collections import CollectionSpec
from remedy.debugger.config import CONFIG_ENV_VAR
from tests.debugger import scenarios as sc

EVERY = SaveConfig(save_interval=1)


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6), torch.nn.ELU(),
        torch.nn.Linear(6, 1),
    )  # fmt: skip


def test_activations_by_type_and_by_path_regex(tmp_path: Path) -> None:
    model = net()
    hook = Hook(
        tmp_path,
        collections={"relu": EVERY, "middle": EVERY, "inputs": EVERY},
        collection_specs={
            "relu": CollectionSpec(module_types=["ReLU"], save_inputs=True),
            "middle": CollectionSpec(include_regex=[r"2"]),
        },
    )
    hook.register_module(model)
    x = torch.randn(5, 4)
    expected_pre = model[0](x)
    model(x)
    hook.close()
    trial = create_trial(tmp_path)
    assert trial.tensor_names(collection="relu") == ["1/relu_input", "1/relu_output"]
    assert trial.tensor_names(collection="middle") == ["2/linear_output"]
    assert trial.tensor_names(collection="inputs") == ["input"]
    np.testing.assert_allclose(trial.tensor("1/relu_input").value(0), expected_pre.detach())
    np.testing.assert_allclose(trial.tensor("1/relu_output").value(0), expected_pre.relu().detach())
    np.testing.assert_array_equal(trial.tensor("input").value(0), x.numpy())


def test_builtin_activations_collection_selects_activation_modules(tmp_path: Path) -> None:
    hook = Hook(tmp_path, collections={"activations": EVERY})
    model = net()
    hook.register_module(model)
    model(torch.randn(2, 4))
    hook.close()
    names = create_trial(tmp_path).tensor_names(collection="activations")
    assert names == ["1/relu_output", "3/elu_output"]


def test_inplace_relu_input_is_captured_before_it_is_overwritten(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(inplace=True))
    hook = Hook(
        tmp_path,
        collections={"activations": EVERY},
        collection_specs={"activations": CollectionSpec(save_inputs=True)},
    )
    hook.register_module(model)
    x = torch.randn(16, 3)
    pre = model[0](x).detach().clone()
    model(x)
    hook.close()
    saved = create_trial(tmp_path).tensor("1/relu_input").value(0)
    assert (saved < 0).any()  # the in-place ReLU did not zero what was saved
    np.testing.assert_allclose(saved, pre)


def test_per_mode_save_configs(tmp_path: Path) -> None:
    config = SaveConfig(save_interval=4, modes={"EVAL": SaveConfig(save_interval=1)})
    hook = Hook(tmp_path, collections={"losses": config})
    run_eval = sc.regression(16)
    model = sc.mlp([4, 1])
    criterion = torch.nn.MSELoss()
    hook.register_module(model)
    hook.register_loss(criterion)
    for _ in range(9):
        criterion(model(run_eval[0]), run_eval[1])
    model.eval()
    for _ in range(3):
        criterion(model(run_eval[0]), run_eval[1])
    hook.close()
    trial = create_trial(tmp_path)
    assert trial.steps(ModeKeys.TRAIN) == [0, 4, 8]
    assert trial.steps(ModeKeys.EVAL) == [0, 1, 2]
    assert config.for_mode("EVAL").save_interval == 1
    assert config.for_mode("TRAIN") is config


def test_reductions_instead_of_tensors_match_numpy(tmp_path: Path) -> None:
    reductions = ReductionConfig(
        reductions=["min", "max", "mean", "std", "variance", "sum", "prod"],
        abs_reductions=["mean", "max"],
        norms=["l1", "l2"],
        abs_norms=["l2"],
    )
    hook = Hook(
        tmp_path,
        collections={"losses": EVERY, "gradients": EVERY},
        collection_specs={"gradients": CollectionSpec(reduction_config=reductions)},
    )
    log = train_recording_grads(hook, steps=3)
    trial = create_trial(tmp_path)
    name = "gradient/0.weight"
    assert name in trial.tensor_names(collection="gradients")
    assert all("::" not in n for n in trial.tensor_names())
    assert trial.tensor(name).steps() == [0, 1, 2]
    with pytest.raises(TensorUnavailableForStep):
        trial.tensor(name).value(1)  # only reductions were saved
    grad = log[1]["0.weight"].astype(np.float64)
    view = trial.tensor(name)
    expected = {
        "min": grad.min(),
        "max": grad.max(),
        "mean": grad.mean(),
        "std": grad.std(),
        "variance": grad.var(),
        "sum": grad.sum(),
        "prod": grad.prod(),
        "l1": np.abs(grad).sum(),
        "l2": np.linalg.norm(grad),
    }
    for how, value in expected.items():
        assert view.reduction_value(1, how) == pytest.approx(value, rel=1e-6, abs=1e-30)
    assert view.reduction_value(1, "mean", abs=True) == pytest.approx(np.abs(grad).mean())
    assert view.reduction_value(1, "l2", abs=True) == pytest.approx(np.linalg.norm(grad))
    # a reduction that was not saved, of a tensor saved raw, is computed from the tensor
    assert trial.tensor("loss").reduction_value(2, "max") == pytest.approx(
        float(trial.tensor("loss").value(2))
    )
    with pytest.raises(ValueError, match="unknown reduction"):
        view.reduction_value(1, "median")


def train_recording_grads(hook: Hook, steps: int) -> list[dict[str, np.ndarray]]:
    x, y = sc.regression(16)
    model = sc.mlp([4, 8, 1])
    criterion = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(opt)
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        criterion(model(x), y).backward()
        grads.append({n: p.grad.clone().numpy() for n, p in model.named_parameters()})
        opt.step()
    hook.close()
    return grads


def test_all_reductions_of_a_step_reach_the_host_in_one_transfer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remedy.debugger.host_copy import HostCopier

    calls: list[tuple[int, ...]] = []
    original = HostCopier.start

    def counting_start(self: HostCopier, flat: torch.Tensor) -> object:
        calls.append(tuple(flat.shape))
        return original(self, flat)

    monkeypatch.setattr(HostCopier, "start", counting_start)  # every transfer to the host
    hook = Hook(
        tmp_path,
        collections={"gradients": EVERY, "weights": EVERY},
        reduction_config=ReductionConfig(reductions=["mean", "max"], norms=["l2"]),
    )
    train_recording_grads(hook, steps=2)
    # 2 steps x (4 gradients + 2 weights) x 3 reductions, moved as one stack per step
    assert calls == [(18,), (18,)]
    trial = create_trial(tmp_path)
    assert trial.tensor("0.weight").reduction_value(0, "l2") > 0


def test_json_config_from_env_enables_activations_and_reductions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "store"
    config = {
        "out_dir": str(out),
        "save_config": {"save_interval": 2},
        "reduction_config": {"norms": ["l2"], "save_raw_tensor": True},
        "collections": {
            "losses": {"save_interval": 1},
            "gradients": {"reduction_config": {"abs_reductions": ["mean"]}},
            "activations": {"module_types": ["ReLU"], "save_inputs": True},
        },
    }
    path = tmp_path / "hook.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv(CONFIG_ENV_VAR, str(path))
    hook = Hook.from_env()
    assert hook is not None
    train_recording_grads(hook, steps=3)
    trial = create_trial(out)
    assert trial.steps() == [0, 1, 2]
    assert trial.tensor("gradient/0.weight").steps() == [0, 2]
    assert trial.tensor_names(collection="activations") == ["1/relu_input", "1/relu_output"]
    header = trial.step_header(2).tensor_names
    assert "gradient/0.weight::abs_mean" in header and "gradient/0.weight" not in header
    assert "1/relu_output::l2" in header and "1/relu_output" in header  # raw kept too
    assert hook.config.to_dict()["collections"]["activations"]["save_inputs"] is True


def test_values_and_wait_for_steps_follow_a_running_job(tmp_path: Path) -> None:
    hook = Hook(tmp_path, collections={"losses": EVERY})
    model = sc.mlp([4, 1])
    criterion = torch.nn.MSELoss()
    hook.register_module(model)
    hook.register_loss(criterion)
    x, y = sc.regression(8)
    trial = create_trial(tmp_path)

    def job() -> None:
        for _ in range(5):
            criterion(model(x), y)
            time.sleep(0.05)
        hook.close()

    thread = threading.Thread(target=job)
    thread.start()
    trial.wait_for_steps([3, 4], timeout=30)
    assert {3, 4} <= set(trial.steps())
    thread.join()
    with pytest.raises(StepUnavailable):
        trial.wait_for_steps([7], timeout=30)  # the job ended at step 4: never comes
    values = trial.tensor("loss").values()
    assert sorted(values) == [0, 1, 2, 3, 4]
    assert all(v.shape == () for v in values.values())
    with pytest.raises(TimeoutError):
        create_trial(tmp_path / "nothing").wait_for_steps([0], timeout=0.2)
