import json
import re

import pytest

from remedy.state_schema import (
    JobStatus,
    NextAction,
    Payload,
    PayloadError,
    RunSpec,
    State,
    load_state,
    save_state,
    state_from_document,
)
from remedy.state_schema.io import SCHEMA_PATH, schema_text
from remedy.state_schema.run_spec import LEGACY_FIELDS
from tests.conftest import SHARED_REFERENCE
from tests.state_schema.seed_payload import SEED_FINAL_PAYLOAD


def test_seed_payload_validates_unchanged() -> None:
    payload = Payload.model_validate(SEED_FINAL_PAYLOAD)
    state = payload.state
    assert state.next_action is NextAction.end
    assert state.job_status is JobStatus.Completed
    assert state.history.num_retraining == 7
    assert state.run_spec.warmup_learning_rate == 0.003125
    # every original field survives a round trip with its value (a backend's fields under
    # the backend's name: run_spec.sagemaker.sm_role)
    dumped = payload.model_dump(mode="json")["state"]
    for section in ("history", "run_spec"):
        for key, value in SEED_FINAL_PAYLOAD["state"][section].items():
            place = dumped[section]
            if section == "run_spec" and key in LEGACY_FIELDS:
                place = place[LEGACY_FIELDS[key]]
            assert place[key] == value, key
    assert Payload.model_validate(payload.model_dump(mode="json")) == payload


def test_run_spec_leads_the_ui_form_and_state_json() -> None:
    """The Prefect UI's run form and state.json list fields in declaration order."""
    fields = list(State.model_fields)
    assert fields[:4] == ["run_spec", "budgets", "policy", "policy_config"]
    assert list(State().model_dump()) == fields


def test_reference_document_payload_is_the_one_tested() -> None:
    """Guard: the copy in the tests is the payload printed in the reference document."""
    document = SHARED_REFERENCE / "seed-workflow.md"
    if not document.exists():
        pytest.skip(f"{document} is not beside this checkout")
    text = document.read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block is not None
    assert json.loads(block.group(1)) == SEED_FINAL_PAYLOAD


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"learning_rate": -0.1}, "learning_rate"),
        ({"warmup_learning_rate": 0}, "warmup_learning_rate"),
        ({"activation": "swish"}, "activation"),
        ({"add_batch_norm": 2}, "add_batch_norm"),
        ({"depth": 21}, "depth"),
        ({"learnin_rate": 0.1}, "learnin_rate"),
        ({"dataset": "cifar10"}, "data_path"),
        ({"base_job_name": "bad name!"}, "base_job_name"),
    ],
)
def test_invalid_run_spec_names_the_field(document: dict, field: str) -> None:
    with pytest.raises(PayloadError, match=field):
        state_from_document(document, where="spec.json")


def test_unknown_next_action_names_the_field() -> None:
    bad = json.loads(json.dumps(SEED_FINAL_PAYLOAD))
    bad["state"]["next_action"] = "relaunch"
    with pytest.raises(PayloadError, match=r"state\.next_action"):
        state_from_document(bad)


def test_missing_state_field_names_it() -> None:
    with pytest.raises(PayloadError, match=r"state\.run_spec"):
        state_from_document({"state": {"history": {}, "next_action": "end", "run_spec": None}})


def test_documents_of_three_shapes() -> None:
    assert state_from_document({"learning_rate": 0.05}).run_spec.learning_rate == 0.05
    bare = state_from_document(SEED_FINAL_PAYLOAD["state"])
    assert bare.history.num_warmup_adjustments == 5
    with pytest.raises(PayloadError, match="JSON object"):
        state_from_document([1, 2])


def test_save_and_load_round_trip(tmp_path) -> None:
    state = State(run_spec=RunSpec(learning_rate=0.02))
    path = tmp_path / "run" / "state.json"
    save_state(path, state)
    assert load_state(path) == state
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temp files left


def test_load_errors_name_the_file(tmp_path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(PayloadError, match="broken.json: not valid JSON"):
        load_state(broken)
    with pytest.raises(PayloadError, match="missing.json: cannot read"):
        load_state(tmp_path / "missing.json")


def test_hyperparameters_carry_no_backend_secrets() -> None:
    spec = Payload.model_validate(SEED_FINAL_PAYLOAD).state.run_spec
    params = spec.hyperparameters()
    assert "sm_role" not in params and "bucket" not in params
    assert params["warmup_learning_rate"] == 0.003125


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "state_schema/state.schema.json is stale: run `python -m remedy.state_schema`"
    )


def test_the_payloads_rule_status_words_hold_every_word_the_debugger_writes() -> None:
    """The debugger stands alone (it imports nothing of ours), so it spells its statuses
    itself; the payload's RuleStatus carries each of them (plus the original monitor's
    summaries), so no status a rule writes is unknown to the state."""
    from remedy.debugger.status import RuleStatus as Written
    from remedy.state_schema import RuleStatus

    assert {word.value for word in Written} <= {word.value for word in RuleStatus}
