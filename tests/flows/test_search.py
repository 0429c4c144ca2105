"""The architecture search with real tiny candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remedy.flows.remediate import RemediateSettings
from remedy.flows.search import SearchSettings, SearchSpace, search
from remedy.outlets.notifications import NOTIFY_URLS_ENV
from remedy.state_schema import Budgets, load_state
from tests.flows.specs import tiny_spec
from tests.helpers.receiver import Receiver

ROLE = "arn:aws:iam::111111111111:role/search"
BUCKET = "search-bucket-of-the-account"


@pytest.mark.slow
def test_search_runs_every_candidate_and_ranks_them(
    prefect_api_url: str,
    receiver: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, receiver)
    # Without batch norm the tiny ELU ResNet explodes, and one launch is all it may use.
    space = SearchSpace(
        depth=[20],
        activation=["elu"],
        add_batch_norm=[0, 1],
        width=[4],
        learning_rate=[0.1],
        warmup_learning_rate=[0.003125],
    )
    settings = SearchSettings(
        concurrency=2,
        budgets=Budgets(max_num_retraining=1),
        remediate=RemediateSettings(poll_interval_s=0.5),
    )
    base = tiny_spec(num_epochs=2, sm_role=ROLE, bucket=BUCKET)  # unused by local jobs
    rows = search(space=space, base_spec=base, settings=settings, search_dir=str(tmp_path))
    assert [(r["candidate"], r["batch_norm"]) for r in rows] == [(2, 1), (1, 0)]  # ranked
    clean, failed = rows
    assert clean["status"] == "clean" and clean["accuracy"] is not None
    assert failed["status"] == "failed" and failed["accuracy"] is None
    assert "max_num_retraining (1) reached" in failed["why"]
    assert json.loads((tmp_path / "leaderboard.json").read_text()) == rows
    assert "| candidate |" in (tmp_path / "leaderboard.md").read_text()
    # One message for the whole search; the candidates' own are off by default.
    assert [message["title"] for message in Receiver.received] == ["remedy: search finished"]
    # The search's and its candidates' flow runs show no role or bucket (issue 13); the
    # candidates' run folders keep them.
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(limit=200)
    ours = [
        run.parameters
        for run in runs
        if str(tmp_path) in json.dumps(run.parameters)  # search_dir, or a candidate's run_dir
    ]
    assert len(ours) == 3 and all(ROLE not in json.dumps(p) for p in ours)
    # The candidate that gave up is a Failed flow run, the clean one Completed.
    states = {
        run.parameters.get("run_dir"): run.state.type.value
        for run in runs
        if "run_dir" in run.parameters and str(tmp_path) in str(run.parameters["run_dir"])
    }
    assert sorted(states.values()) == ["COMPLETED", "FAILED"], states
    assert all(BUCKET not in json.dumps(p) for p in ours)
    saved = load_state(tmp_path / "candidate-001" / "state.json")
    cloud = saved.run_spec.sagemaker
    assert cloud is not None and (cloud.sm_role, cloud.bucket) == (ROLE, BUCKET)


def test_space_validates_every_candidate_before_running() -> None:
    with pytest.raises(ValueError, match="depth"):
        SearchSpace(depth=[21]).candidates(tiny_spec())
    specs = SearchSpace(
        activation=["elu", "relu", "tanh"], add_batch_norm=[0, 1], max_candidates=4
    ).candidates(tiny_spec())
    assert len(specs) == 4
    assert len({s.base_job_name for s in specs}) == 4


def test_candidates_send_their_own_messages_only_when_switched_on() -> None:
    assert SearchSettings().candidate_settings().notify is False
    switched_on = SearchSettings(notify_candidates=True).candidate_settings()
    assert switched_on.notify is True
    # what else the candidates get is the search's remediate settings, unchanged
    settings = SearchSettings(remediate=RemediateSettings(poll_interval_s=0.25))
    assert settings.candidate_settings().poll_interval_s == 0.25
