import json

import pytest

from remedy.outlets.messages import (
    attempt_table,
    final_message,
    payload_for_people,
    redact,
    retraining_message,
    why_lines,
)
from remedy.state_schema import Finding, JobStatus, Payload, PlannedChange, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from tests.state_schema.seed_payload import SEED_FINAL_PAYLOAD

ROLE = "arn:aws:iam::111111111111:role/lambda-sagemaker-train"
BUCKET = "example-sagemaker-debugger-model-automation"


def test_redact_removes_arns_urls_keys_and_tokens() -> None:
    text = redact(
        f"role {ROLE} hook https://hooks.slack.com/services/T000/B000/XXXX "
        "key AKIAABCDEFGHIJKLMNOP token=abc123 mailto://user:pw@example.com"
    )
    for secret in (ROLE, "hooks.slack.com", "AKIAABCDEFGHIJKLMNOP", "abc123", "user:pw"):
        assert secret not in text
    assert "arn:***" in text and "<url>" in text and "token=***" in text


def seed_state_after_finding():
    state = Payload.model_validate(SEED_FINAL_PAYLOAD).state
    state = begin_attempt(state, "complex-resnet-model-2021-Jan-27-06h-45m-19")
    finding = Finding(rule="ExplodingTensor", step=40, tensor="gradient/head.weight")
    state = update_current_attempt(state, findings=[finding], outcome=JobStatus.Stopped)
    change = PlannedChange(
        strategy="lower_warmup_lr", reason="Halve the warmup learning rate (0.1 -> 0.05)"
    )
    return state.model_copy(update={"findings": [finding], "planned_change": change})


def test_retraining_message_says_what_and_why_without_secrets() -> None:
    title, body = retraining_message(seed_state_after_finding())
    assert "retraining" in title
    assert body.splitlines()[0] == (
        "Found ExplodingTensor @ step 40 on gradient/head.weight in attempt 8 of "
        "complex-resnet-model (job complex-resnet-model-2021-Jan-27-06h-45m-19)."
    )
    assert "Halve the warmup learning rate" in body
    assert "lower_warmup_lr" not in body or "initial" in body  # table row of the attempt
    assert ROLE not in body and BUCKET not in body and "111111111111" not in body


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_the_final_message_hides_the_role_and_bucket() -> None:
    _, body = final_message(seed_state_after_finding())
    assert ROLE not in body and BUCKET not in body and "111111111111" not in body


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_a_payload_shown_to_people_hides_them_in_every_run_spec() -> None:
    state = seed_state_after_finding()
    cloud, last = state.run_spec.sagemaker, state.history.attempts[-1].spec.sagemaker
    assert cloud is not None and last is not None
    assert cloud.sm_role == ROLE and last.bucket == BUCKET
    shown = payload_for_people(state)
    assert ROLE not in shown and BUCKET not in shown and "111111111111" not in shown
    document = json.loads(shown)
    assert document["state"]["run_spec"]["sagemaker"]["sm_role"] == "<hidden>"
    assert document["state"]["history"]["attempts"][-1]["spec"]["sagemaker"]["bucket"] == "<hidden>"
    assert document["state"]["run_spec"]["sagemaker"]["region"] == cloud.region  # not private


def test_attempt_table_has_a_row_per_attempt() -> None:
    state = seed_state_after_finding()
    state = begin_attempt(state, "second")
    lines = attempt_table(state).splitlines()
    assert lines[0].split()[:3] == ["#", "strategy", "warmup_lr"]
    assert len(lines) == 3
    assert "ExplodingTensor @ step 40" in lines[1] and "Stopped" in lines[1]
    assert lines[2].split()[1] == "lower_warmup_lr" and "running" in lines[2]


def test_a_probe_the_run_went_on_from_says_so_not_in_progress() -> None:
    """The best probe's job trains on as the next run: its row says which, not the
    InProgress it was judged in (a run that ended showed a job still in progress)."""
    from remedy.state_schema import Attempt, AttemptKind, RunSpec

    spec = RunSpec()
    probes = [
        Attempt(job_name=f"p{n}", spec=spec, kind=AttemptKind.probe, outcome=outcome)
        for n, outcome in ((1, JobStatus.Stopped), (2, JobStatus.InProgress))
    ]
    run = Attempt(job_name="p2", spec=spec, continues="p2", outcome=JobStatus.Completed)
    state = State()
    state = state.model_copy(
        update={"history": state.history.model_copy(update={"attempts": [*probes, run]})}
    )
    from remedy.outlets.messages import attempt_rows

    header, *rows = attempt_rows(state)
    outcomes = [row[header.index("outcome")] for row in rows]
    assert outcomes == ["Stopped", "went on as #3", "Completed"]


def test_a_run_held_at_half_its_length_says_where_it_holds_while_it_runs() -> None:
    """A run asked at half its length waits there for the flow's word: its row says where
    it holds, once known (a job told to hold at half its epochs says where once it measured
    one); ended, its outcome."""
    from remedy.outlets.messages import attempt_rows
    from remedy.state_schema import Attempt, RunSpec

    spec = RunSpec()
    attempts = [
        Attempt(job_name="a", spec=spec, hold_at=200, outcome=JobStatus.Stopped),
        Attempt(job_name="b", spec=spec, holds_by_its_epochs=True),
        Attempt(job_name="c", spec=spec, hold_at=172, outcome=JobStatus.InProgress),
    ]
    state = State()
    state = state.model_copy(
        update={"history": state.history.model_copy(update={"attempts": attempts})}
    )
    header, *rows = attempt_rows(state)
    outcomes = [row[header.index("outcome")] for row in rows]
    assert outcomes == ["Stopped", "running", "InProgress, holds at 172"]


def test_a_probe_stopped_at_its_rung_says_how_it_was_judged_there() -> None:
    """No rule's finding stopped it, the flow's judgement at its rung did: outpaced, or
    diverged (its loss climbed); a probe a rule stopped shows its finding as any attempt."""
    from remedy.outlets.messages import attempt_rows
    from remedy.state_schema import Attempt, AttemptKind, AttemptResult, ResultKind, RunSpec

    spec, stopped = RunSpec(), JobStatus.Stopped
    found = Finding(rule="DivergingLoss", rule_class="DivergingLoss", step=9)
    attempts = [
        Attempt(job_name=f"p{n}", spec=spec, kind=AttemptKind.probe, outcome=stopped, **fields)
        for n, fields in enumerate(
            [
                {"result": AttemptResult(kind=ResultKind.outpaced, loss=5.7)},
                {"result": AttemptResult(kind=ResultKind.diverged, update=12)},
                {"result": AttemptResult(kind=ResultKind.diverged, update=9), "findings": [found]},
                {"result": AttemptResult(kind=ResultKind.trained, loss=4.2)},
            ]
        )
    ]
    state = State()
    state = state.model_copy(
        update={"history": state.history.model_copy(update={"attempts": attempts})}
    )
    header, *rows = attempt_rows(state)
    outcomes = [row[header.index("outcome")] for row in rows]
    assert outcomes == [
        "Stopped at its rung, outpaced",
        "Stopped at its rung, diverged",
        "Stopped",
        "Stopped",
    ]


def test_the_report_s_table_is_the_same_attempts_in_more_detail() -> None:
    """One attempt table, two views: the terminal's compact one and the report's detailed
    one (why, what changed, every finding, time, loss), whose cells are redacted."""
    from remedy.outlets.messages import attempt_rows
    from remedy.outlets.report import report_rows

    state = seed_state_after_finding()
    change = PlannedChange(strategy="lower_warmup_lr", reason=f"as {ROLE} said")
    state = begin_attempt(state.model_copy(update={"planned_change": change}), "second")
    compact, detailed = attempt_rows(state), report_rows(state)
    assert compact[0][:3] == ["#", "strategy", "warmup_lr"] and compact[0][-1] != "outcome"
    assert detailed[0][:5] == ["#", "strategy", "why", "spec diff", "findings"]
    assert len(compact) == len(detailed) == 3
    for short, full in zip(compact[1:], detailed[1:], strict=True):
        assert short[:2] == full[:2]  # the same attempt, number and strategy
        assert short[compact[0].index("steps")] == full[detailed[0].index("steps")]
    assert detailed[1][4] == "ExplodingTensor @ step 40 on gradient/head.weight"
    assert compact[1][compact[0].index("finding")] == "ExplodingTensor @ step 40"
    assert detailed[2][2] == "as arn:*** said" and ROLE not in str(detailed)


def test_why_lines_give_each_attempts_reason_and_what_it_taught() -> None:
    from remedy.decisions.plan import plan_next
    from remedy.state_schema import RunSpec

    spec = RunSpec(
        entry_point="main.py",
        hyperparameters={"lr": 20},
        hyperparameter_roles={"learning_rate": "lr"},
    )
    state = begin_attempt(State(policy="adaptive", run_spec=spec), "job-1")
    diverged = Finding(rule="DivergingLoss", rule_class="DivergingLoss", step=2)
    state = begin_attempt(plan_next(state, [diverged]), "job-2")
    first, second = why_lines(state)[:2], why_lines(state)[2:]
    assert first == ["#1 initial: -", "   result: diverged at update 3 (DivergingLoss)"]
    assert second[0].startswith("#2 search_lr_down: ") and "--lr 20 -> 2" in second[0]
    assert len(second) == 1  # still running: nothing taught yet
