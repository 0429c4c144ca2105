"""The training contract: one model, RunSpec built on it, values as the cloud passes them."""

import json
from pathlib import Path
from typing import Any

import pytest

from remedy.state_schema import (
    SYNTHETIC_TEST_SAMPLES,
    SYNTHETIC_TRAIN_SAMPLES,
    Hyperparameters,
    Payload,
    PayloadError,
    RunSpec,
    hyperparameters_from_document,
    load_hyperparameters,
)
from remedy.state_schema.backends import BUILTIN_BACKENDS
from remedy.state_schema.run_spec import LEGACY_FIELDS

# A state.json as written by the release before the contract was split out of RunSpec: every
# run_spec field present, and the built-in job named by its pre-namespace module name.
BEFORE_SPLIT = Path(__file__).with_name("payload_before_contract_split.json")
CONTRACT = list(Hyperparameters.model_fields)
# run_spec fields added with script mode (issue 11), with their defaults
SCRIPT_MODE_FIELDS = {
    "source_dir": None,
    "hyperparameters": {},
    "hyperparameter_roles": {},
    "stop_grace_s": 10.0,
    "kill_after_s": 20.0,
}


def test_run_spec_is_the_contract_plus_orchestration_fields() -> None:
    assert issubclass(RunSpec, Hyperparameters)
    # The contract leads, in its own order: the UI form shows the job's fields first.
    assert list(RunSpec.model_fields)[: len(CONTRACT)] == CONTRACT


def test_the_job_receives_exactly_the_contract() -> None:
    spec = RunSpec(sm_role="arn:aws:iam::1:role/r", bucket="b", entry_point="my.job")
    assert list(spec.hyperparameters()) == CONTRACT
    # What a backend writes is what the job's model reads back, unchanged.
    assert Hyperparameters.model_validate(spec.hyperparameters()).hyperparameters() == (
        spec.hyperparameters()
    )


def test_a_state_written_before_the_split_validates_unchanged() -> None:
    document = json.loads(BEFORE_SPLIT.read_text())
    state = Payload.model_validate(document).state
    for spec in (state.run_spec, state.history.attempts[0].spec):
        assert spec.entry_point == "remedy.training.train"  # the legacy name is mapped
    dumped = state.run_spec.model_dump(mode="json")
    written = dict(document["state"]["run_spec"])
    # the backends' fields written at the top (all their defaults here) are their groups'
    for key in [key for key in written if key in LEGACY_FIELDS]:
        group = (
            getattr(state.run_spec, LEGACY_FIELDS[key]) or BUILTIN_BACKENDS[LEGACY_FIELDS[key]]()
        )
        assert getattr(group, key) == written.pop(key), key
    assert {key: dumped[key] for key in written} == written | {
        "entry_point": "remedy.training.train"
    }
    added = set(dumped) - set(written)  # fields added since: their defaults
    assert set(SCRIPT_MODE_FIELDS) <= added
    assert all(dumped[key] == value for key, value in SCRIPT_MODE_FIELDS.items())
    defaults = RunSpec().model_dump(mode="json")
    assert {key: dumped[key] for key in added} == {key: defaults[key] for key in added}


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("0.05", "learning_rate", 0.05),
        ("1e-4", "weight_decay", 1e-4),
        ("5", "num_epochs", 5),
        ("[1, 2]", "exclude_samples", [1, 2]),
        ("1", "add_batch_norm", 1),
        ("true", "add_batch_norm", 1),
        ("null", "grad_clip_norm", None),
        ("null", "init_checkpoint", None),
        ("adam", "optimizer", "adam"),
        ("relu", "activation", "relu"),
        ("5", "base_job_name", "5"),  # a text field keeps its text
    ],
)
def test_values_passed_as_text_are_decoded(text: str, field: str, value: Any) -> None:
    assert getattr(Hyperparameters.model_validate({field: text}), field) == value


def test_an_unknown_key_is_an_error_naming_it() -> None:
    with pytest.raises(PayloadError, match=r"(?m)^  lr: Extra inputs are not permitted"):
        hyperparameters_from_document({"lr": 0.1})


def test_a_run_spec_only_field_is_not_a_hyperparameter() -> None:
    with pytest.raises(PayloadError, match="sm_role"):
        hyperparameters_from_document({"sm_role": "arn:aws:iam::1:role/r"})


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"width": 8.5}, "width"),
        ({"num_epochs": True}, "num_epochs"),
        ({"num_epochs": "true"}, "num_epochs"),
        ({"activation": 3}, "activation"),
        ({"learning_rate": "fast"}, "learning_rate"),
        ({"learning_rate": "Infinity"}, "learning_rate"),
        ({"data_path": 7}, "data_path"),
        ({"train_samples": [1]}, "train_samples"),
        ({"base_job_name": None}, "base_job_name"),
        ({"add_batch_norm": 2}, "add_batch_norm"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"batch_size": -1}, "batch_size"),
        ({"momentum": 1.0}, "momentum"),
        ({"depth": 21}, "depth"),
        ({"dataset": "imagenet"}, "dataset"),
        ({"dataset": "cifar10"}, "data_path"),
        ({"train_samples": 0}, "train_samples"),
        ({"exclude_samples": "[-1]"}, "exclude_samples"),
        ({"optimizer": "lbfgs"}, "optimizer"),
        ({"grad_clip_norm": 0}, "grad_clip_norm"),
        ({"dropout": 1.0}, "dropout"),
        ({"init": "zeros"}, "init"),
        ({"warmup_epochs": -1}, "warmup_epochs"),
        ({"start_epoch": -1}, "start_epoch"),
    ],
)
def test_a_bad_value_names_the_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(PayloadError, match=field):
        hyperparameters_from_document(values)


def test_a_bad_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "hyperparameters.json"
    path.write_text(json.dumps({"learning_rate": "0.1", "batch_size": "many"}))
    with pytest.raises(PayloadError, match=r"hyperparameters\.json: 1 invalid") as error:
        load_hyperparameters(path)
    assert "batch_size:" in str(error.value) and "learning_rate" not in str(error.value)
    path.write_text("[1, 2]")
    with pytest.raises(PayloadError, match=r"hyperparameters\.json: expected a JSON object"):
        load_hyperparameters(path)
    path.write_text("{not json")
    with pytest.raises(PayloadError, match=r"hyperparameters\.json: not valid JSON"):
        load_hyperparameters(path)


def test_sample_counts_default_to_the_synthetic_set_only() -> None:
    synthetic = Hyperparameters()
    assert synthetic.num_train_samples == SYNTHETIC_TRAIN_SAMPLES == 5000
    assert synthetic.num_test_samples == SYNTHETIC_TEST_SAMPLES == 1000
    assert Hyperparameters(train_samples=64).num_train_samples == 64
    cifar = Hyperparameters(dataset="cifar10", data_path="/data")
    assert cifar.num_train_samples is None and cifar.num_test_samples is None
