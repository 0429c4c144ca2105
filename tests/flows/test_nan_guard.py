"""The flow with the NaN guard: a corrupt record is caught, traced to the data, dropped."""

from __future__ import annotations

from pathlib import Path

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.messages import final_message
from remedy.state_schema import Finding, JobStatus, NextAction, RunSpec, State, load_state
from remedy.strategies import POLICIES, Checkpoint, Decision, Policy, get_policy, register_policy
from remedy.strategies.drop_bad_samples import DropBadSamples
from remedy.training.bundle import read_bundle
from remedy.training.replay import replay
from tests.flows.specs import RAN_TO_THE_END
from tests.helpers.cifar import BAD_SAMPLE, corrupt_cifar

POLICY = "test-drop-bad-samples-first"


if POLICY not in POLICIES:

    @register_policy
    class DropBadSamplesFirst(Policy):
        """Drop records the monitor traced a repeated failure to; otherwise the seed ladder."""

        name = POLICY

        def decide(
            self, state: State, findings: list[Finding], clean_checkpoint: Checkpoint | None
        ) -> Decision:
            drop = DropBadSamples.for_findings(findings)
            if drop.applies(state.run_spec):
                return Decision(drop)
            return get_policy("seed").decide(state, findings, clean_checkpoint)


def test_a_corrupt_record_is_caught_traced_dropped_and_the_run_completes(
    prefect_api_url: str, tmp_path: Path
) -> None:
    data = corrupt_cifar(tmp_path / "cifar")
    spec = RunSpec(
        base_job_name="guard", depth=8, width=2, batch_size=16, add_batch_norm=1,
        dataset="cifar10", data_path=str(data), train_samples=48, test_samples=20,
        num_epochs=2, warmup_learning_rate=0.01, learning_rate=0.05, rules=[],
        success_criteria=RAN_TO_THE_END,  # 6 steps on 48 images: it runs, it does not learn
    )  # fmt: skip
    assert spec.nan_guard == "stop"  # the default
    state = State(run_spec=spec, policy=POLICY)
    final = remediate(
        state=state,
        run_dir=str(tmp_path / "run"),
        settings=RemediateSettings(poll_interval_s=0.5),
        return_state=True,
    ).result(raise_on_failure=False)  # the payload, whatever Prefect state the run ended in
    assert load_state(tmp_path / "run" / "state.json") == final

    first, second, third = final.history.attempts
    # 1: caught; the record is a suspect only, so the ladder lowers the warmup rate.
    (caught,) = first.findings
    assert caught.rule == "NonFiniteGradient" and first.outcome is JobStatus.Stopped
    assert caught.suspect_samples == [BAD_SAMPLE] and caught.data_problem is None
    assert caught.localisation == "forward stem" and caught.bundle is not None
    assert replay(caught.bundle).localisation == caught.localisation
    assert BAD_SAMPLE in read_bundle(caught.bundle).sample_ids.tolist()
    # 2: the same record fails again: a data problem, and the policy drops it.
    assert second.strategy == "lower_warmup_lr"
    (again,) = second.findings
    assert again.data_problem is not None and again.data_problem.samples == [BAD_SAMPLE]
    assert again.data_problem.shards == ["data_batch_2:3"] and again.data_problem.failures == 2
    # 3: without it, the run completes.
    assert third.strategy == "drop_bad_samples"
    assert third.changes == {"exclude_samples": [[], [BAD_SAMPLE]]}
    assert third.outcome is JobStatus.Completed and third.findings == []
    assert final.next_action is NextAction.end and final.job_status is JobStatus.Completed

    _, body = final_message(final)
    assert f"remedy repro {caught.bundle}; first non-finite: forward stem" in body
    assert f"samples {BAD_SAMPLE} (data_batch_2:3)" in body
