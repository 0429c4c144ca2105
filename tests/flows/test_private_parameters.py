"""The role ARN and bucket never show in a flow run's parameters (issue 13): the Prefect UI
shows them. The run folder keeps them; the flow takes them from there, or from its
machine's REMEDY_SM_ROLE / REMEDY_BUCKET. Read back from the session's real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.state_schema import NextAction, Payload, State, load_state
from remedy.state_schema.private import HIDDEN, hidden_state, reveal_private
from remedy.state_schema.transitions import begin_attempt
from tests.helpers.cli import remedy
from tests.state_schema.seed_payload import SEED_FINAL_PAYLOAD

ROLE = "arn:aws:iam::111111111111:role/lambda-sagemaker-train"
BUCKET = "example-sagemaker-debugger-model-automation"
QUIET = RemediateSettings(report=False)


def role_and_bucket(state: State) -> tuple[str | None, str | None]:
    """run_spec.sagemaker's role and the first attempt's spec's bucket."""
    cloud, attempts = state.run_spec.sagemaker, state.history.attempts
    first = attempts[0].spec.sagemaker if attempts else cloud
    return (cloud.sm_role if cloud else None, first.bucket if first else None)


def ended_state() -> State:
    """The seed's final payload with an attempt: an ended run whose run_spec and attempt
    both name them."""
    state = Payload.model_validate(SEED_FINAL_PAYLOAD).state
    state = begin_attempt(state, "seed-job-1").model_copy(update={"next_action": NextAction.end})
    assert role_and_bucket(state) == (ROLE, BUCKET)
    return state


def parameters_of(run_dir: Path) -> dict[str, Any]:
    """The parameters the server holds for the flow run of `run_dir` (what the UI shows)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(limit=200)
    found = [run.parameters for run in runs if run.parameters.get("run_dir") == str(run_dir)]
    assert found, f"no flow run of {run_dir}"
    return found[0]


def assert_hidden(parameters: dict[str, Any]) -> None:
    text = json.dumps(parameters)
    assert ROLE not in text and BUCKET not in text and "111111111111" not in text
    assert parameters["state"]["run_spec"]["sagemaker"]["sm_role"] == HIDDEN
    assert parameters["state"]["run_spec"]["sagemaker"]["bucket"] == HIDDEN


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_remedy_run_never_sends_them(prefect_api_url: str, tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text(Payload(state=ended_state()).model_dump_json())
    run_dir = tmp_path / "run"
    done = remedy("run", str(payload), "--run-dir", str(run_dir), api_url=prefect_api_url)
    assert "Traceback" not in done.stderr, done.stderr
    assert_hidden(parameters_of(run_dir))
    assert ROLE not in done.stdout and BUCKET not in done.stdout
    saved = load_state(run_dir / "state.json")  # the run folder keeps them
    assert role_and_bucket(saved) == (ROLE, BUCKET)


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_given_through_the_api_they_are_hidden_and_a_retry_finds_them(
    prefect_api_url: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    remediate(state=ended_state(), run_dir=str(run_dir), settings=QUIET, return_state=True)
    shown = parameters_of(run_dir)  # as a deployment run given them would show them
    assert_hidden(shown)
    # A retry of that flow run starts from the parameters as the server now holds them.
    retried = remediate(
        state=State.model_validate(shown["state"]), run_dir=str(run_dir), return_state=True
    ).result(raise_on_failure=False)  # the seed's payload did not end clean: Failed
    assert role_and_bucket(retried)[0] == ROLE
    assert role_and_bucket(load_state(run_dir / "state.json")) == (ROLE, BUCKET)


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_a_new_run_takes_hidden_ones_from_the_machine(
    prefect_api_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMEDY_SM_ROLE", ROLE)
    monkeypatch.setenv("REMEDY_BUCKET", BUCKET)
    run_dir = tmp_path / "run"
    remediate(
        state=hidden_state(ended_state()), run_dir=str(run_dir), settings=QUIET, return_state=True
    )
    saved = load_state(run_dir / "state.json")
    assert role_and_bucket(saved) == (ROLE, BUCKET)
    assert_hidden(parameters_of(run_dir))


def test_hidden_ones_without_the_machine_s_value_are_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REMEDY_SM_ROLE", raising=False)
    monkeypatch.setenv("REMEDY_BUCKET", BUCKET)
    with pytest.raises(
        ValueError, match="run_spec.sagemaker.sm_role is <hidden> and REMEDY_SM_ROLE"
    ):
        reveal_private(hidden_state(ended_state()))
    # The cloud backend with them left empty (the UI form) takes them from the machine.
    spec = ended_state().run_spec
    assert spec.sagemaker is not None
    emptied = spec.sagemaker.model_copy(update={"sm_role": None, "bucket": None})
    cloud = spec.model_copy(update={"backend": "sagemaker", "sagemaker": emptied})
    monkeypatch.setenv("REMEDY_SM_ROLE", "arn:aws:iam::222222222222:role/r")
    filled = reveal_private(State(run_spec=cloud))
    assert filled.run_spec.sagemaker is not None
    assert (filled.run_spec.sagemaker.sm_role, filled.run_spec.sagemaker.bucket) == (
        "arn:aws:iam::222222222222:role/r",
        BUCKET,
    )
