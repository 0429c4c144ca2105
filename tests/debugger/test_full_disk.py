"""A full disk under the store ends the job promptly, naming the cause (adversarial suite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.debugger.helpers import REPO
from tests.tmpfs import full_disk

TRAIN_TO_STORE = """
import sys, torch
from remedy.debugger import Hook, SaveConfig
hook = Hook(sys.argv[1], collections={"losses": SaveConfig(1), "gradients": SaveConfig(1)})
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
hook.register_module(model); hook.register_loss(loss_fn); hook.register_optimizer(opt)
x, y = torch.randn(32, 64), torch.randint(0, 2, (32,))
for step in range(100000):
    opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward(); opt.step()
hook.close()
print("trained without noticing the full disk")
"""


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_a_full_disk_under_the_store_ends_training_naming_it(tmp_path: Path) -> None:
    with full_disk(tmp_path / "disk", "256k") as disk:
        try:
            done = subprocess.run(
                [sys.executable, "-c", TRAIN_TO_STORE, str(disk / "store")],
                cwd=REPO,
                capture_output=True,
                text=True,
                env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"},
                timeout=300,  # a hang guard, not a timing: it ends in seconds
            )
        except subprocess.TimeoutExpired:
            pytest.fail("the training process hung on the full disk")
    assert done.returncode != 0, done.stdout
    assert "could not write its store" in done.stderr, done.stderr[-2000:]
    assert "No space left on device" in done.stderr, done.stderr[-2000:]
