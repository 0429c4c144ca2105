"""The accelerator path of capture (pinned host buffers, events, packed copies), run on
CPU: `staged=True` sends CPU tensors through the same buffers as a GPU's."""

from pathlib import Path

import numpy as np
import pytest
import torch

from remedy.debugger import Hook, SaveConfig, create_trial
from remedy.debugger.host_copy import HostCopier, PinnedPool
from tests.debugger.helpers import train

EVERY = SaveConfig(save_interval=1)


@pytest.mark.parametrize("staged", [False, True])
def test_packed_weights_and_gradients_are_the_ones_before_each_update(
    tmp_path: Path, staged: bool
) -> None:
    hook = Hook(
        tmp_path / "store",
        collections={"losses": EVERY, "gradients": EVERY, "weights": EVERY, "biases": EVERY},
        max_pending_steps=2,
    )
    hook.host_copier.staged = staged
    log = train(hook, steps=12)
    hook.close()
    trial = create_trial(tmp_path / "store")
    assert trial.steps() == list(range(12))
    for step in range(12):
        assert float(trial.tensor("loss").value(step)) == pytest.approx(log.losses[step])
        for name, grad in log.grads[step].items():
            np.testing.assert_array_equal(trial.tensor(f"gradient/{name}").value(step), grad)
            weight = trial.tensor(name).value(step)
            np.testing.assert_array_equal(weight, log.weights_before[step][name])
            assert weight.shape == tuple(log.weights_before[step][name].shape)
    pool = hook.host_copier.pool
    if staged:
        # One float32 pack (weights and gradients together) per step, at most
        # max_pending_steps + 2 in flight: buffers are reused across the 12 steps.
        assert 1 <= pool.allocated <= 4
    else:
        assert pool.allocated == 0  # CPU: the packed copy is the host copy


def test_a_buffer_is_handed_out_again_only_once_given_back() -> None:
    pool = PinnedPool(max_buffers=2)
    first = pool.take(torch.float32, 10, pin=False)
    second = pool.take(torch.float32, 10, pin=False)
    assert first is not second and pool.allocated == 2
    pool.give(first)
    assert pool.take(torch.float32, 10, pin=False) is first
    assert pool.take(torch.float64, 10, pin=False) is not second  # another dtype: new
    assert pool.allocated == 3


def test_a_staged_copy_is_a_private_copy_of_the_packed_tensor() -> None:
    copier = HostCopier(max_buffers=1, staged=True)
    flat = torch.arange(6, dtype=torch.float32)
    copy = copier.start(flat)
    flat.add_(100)  # the training side reuses its memory: the host copy keeps the values
    np.testing.assert_array_equal(copy.result().numpy(), np.arange(6, dtype=np.float32))
    copy.release()
    copy.release()  # twice is harmless: the buffer is in the pool once
    assert len(copier.pool._free[(torch.float32, 6)]) == 1


def test_reductions_travel_packed(tmp_path: Path) -> None:
    from remedy.debugger import ReductionConfig

    hook = Hook(
        tmp_path / "store",
        collections={"gradients": EVERY, "weights": EVERY},
        reduction_config=ReductionConfig(reductions=["max"], norms=["l2"]),
    )
    hook.host_copier.staged = True
    model = torch.nn.Linear(3, 2)
    hook.begin_step()
    model(torch.ones(1, 3)).sum().backward()
    hook.save_parameters(model.named_parameters())
    hook.end_step()
    hook.close()
    view = create_trial(tmp_path / "store").tensor("weight")
    expected = model.weight.detach().double()
    assert view.reduction_value(0, "l2") == pytest.approx(float(expected.norm()), rel=1e-12)
    assert view.reduction_value(0, "max") == pytest.approx(float(expected.max()), rel=1e-12)


def test_bfloat16_parameters_travel_packed(tmp_path: Path) -> None:
    hook = Hook(tmp_path / "store", collections={"gradients": EVERY, "weights": EVERY})
    hook.host_copier.staged = True
    model = torch.nn.Linear(3, 2).to(torch.bfloat16)
    hook.begin_step()
    model(torch.ones(1, 3, dtype=torch.bfloat16)).sum().backward()
    hook.save_parameters(model.named_parameters())
    hook.end_step()
    hook.close()
    trial = create_trial(tmp_path / "store")
    expected = model.weight.detach().float().numpy()
    np.testing.assert_array_equal(trial.tensor("weight").value(0), expected)
    np.testing.assert_array_equal(trial.tensor("gradient/weight").value(0), np.ones((2, 3)))
