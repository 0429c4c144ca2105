"""DivergingLoss's windows: a loss far above the untrained model's fires at its first
window, a transient spike under that waits for `patience`, a warm start judges neither."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from remedy.debugger import RULES, ModeKeys, create_trial
from tests.debugger.helpers import new_store, write_step


def fired_at(root: Path, losses: list[float], **parameters: object) -> tuple[int | None, str]:
    """The step at which the rule first fires on these training losses (None: never),
    and its message."""
    new_store(root, {"losses": ["loss"]})
    for step, loss in enumerate(losses):
        write_step(root, step, {"loss": np.array(loss, dtype=np.float32)})
    rule = RULES["DivergingLoss"](create_trial(root), **parameters)
    for step in rule.trial.steps(ModeKeys.TRAIN):
        if rule.invoke_at_step(step, ModeKeys.TRAIN):
            return step, rule.finding.message if rule.finding else ""
    return None, ""


def test_a_loss_far_above_the_untrained_models_fires_at_its_first_window(
    tmp_path: Path,
) -> None:
    """The word LM at 1000x its rate: 5.7, then hundreds. Its first window is 4x the first
    loss and more: fired there, five updates before the second window's patience."""
    blown = [5.7, 310.0, 1280.0, 1290.0, 1170.0, 760.0, 1070.0, 890.0, 1570.0, 6060.0]
    step, message = fired_at(tmp_path / "blown", blown)
    assert step == 4 and "fired at once" in message and "the untrained model's 5.7" in message
    patient, _ = fired_at(tmp_path / "patient", blown, blowup_factor=None)
    assert patient == 9  # two windows above 1.1x the untrained loss


def test_a_spike_under_four_times_the_untrained_loss_that_recovers_is_not_stopped(
    tmp_path: Path,
) -> None:
    """One window at 3x the untrained loss, then a loss that falls again: a transient."""
    losses = [2.3, 6.0, 8.0, 7.5, 6.5] + [2.0 - 0.02 * i for i in range(30)]
    assert fired_at(tmp_path / "spike", losses) == (None, "")
    warm = RULES["DivergingLoss"].WARM_START  # a warm start's first loss is a trained model's
    blown = [5.7, 310.0, 1280.0, 1290.0, 1170.0] + [1.0] * 10
    assert fired_at(tmp_path / "warm", blown, **warm)[0] != 4
