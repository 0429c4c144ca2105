"""A real flow under the adaptive policy: the relaunch warm-starts from the clean checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.state_schema import JobStatus, State, exploding_tensor_rule
from tests.flows.specs import tiny_spec


@pytest.mark.slow
def test_relaunch_loads_the_last_clean_checkpoint_and_completes(
    prefect_api_url: str, tmp_path: Path
) -> None:
    # Batch norm and two gentle warmup epochs: checkpoints at steps 8 and 16, then lr 20
    # explodes in epoch 2 (update 20). lr / 10 from the epoch-2 checkpoint completes.
    # The seed's rule only: this is about the warm start. (The default rules also catch
    # the lr / 10 relaunch diverging, finite: its loss reaches 1e6 in epoch 2.)
    spec = tiny_spec(
        add_batch_norm=1, warmup_epochs=2, warmup_learning_rate=0.01, learning_rate=20.0,
        num_epochs=4, rules=[exploding_tensor_rule()],
    )  # fmt: skip
    final = remediate(  # probes on, as by default: the first cut from sound weights has none
        state=State(run_spec=spec, policy="adaptive"),
        run_dir=str(tmp_path),
        settings=RemediateSettings(poll_interval_s=0.5),
        return_state=True,
    ).result(raise_on_failure=False)  # the payload, whatever Prefect state the run ended in
    first, second = final.history.attempts  # the run and the cut: no probe between them
    assert [a.kind.value for a in (first, second)] == ["run", "run"]
    assert first.findings and first.findings[0].step >= 18  # fired in epoch 2
    clean = tmp_path / "jobs" / first.job_name / "checkpoints" / "epoch-0002"
    assert second.strategy == "search_lr_down"
    assert second.spec.init_checkpoint == str(clean.resolve())
    assert second.spec.start_epoch == 2 and second.spec.learning_rate == pytest.approx(2.0)
    assert "warm start from epoch 2 (step 16)" in (second.strategy_reason or "")

    # The relaunch really loaded it, from the copy placed in its own checkpoint folder (as a
    # script's and a cloud job's are): it says so, and its steps continue from step 16.
    job = tmp_path / "jobs" / second.job_name
    placed = (job / "checkpoints" / "epoch-0002").resolve()
    log = "".join(p.read_text() for p in (job / "logs").glob("*train*"))
    assert f"warm start from {placed}: epoch 2, step 16, optimizer state restored" in log
    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["step"] == 17 and {m["epoch"] for m in metrics} == {2, 3}
    assert second.outcome is JobStatus.Completed and not second.findings
    assert (second.start_step, second.steps_run) == (16, 16)  # 2 epochs, not 4
    assert second.duration_s and second.duration_s > 0
    assert second.curve == f"jobs/{second.job_name}/metrics.jsonl"
