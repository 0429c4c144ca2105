"""Each backend's own fields under its name (run_spec.sagemaker, run_spec.local,
run_spec.slurm); the top-level places earlier payloads used still read."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from remedy.state_schema import PayloadError, RunSpec, State, state_from_document
from remedy.state_schema.private import HIDDEN, hide_private, reveal_private

ROLE = "arn:aws:iam::111111111111:role/r"
LEGACY = {
    "backend": "sagemaker",
    "sm_role": ROLE,
    "bucket": "my-bucket",
    "region": "us-west-2",
    "instance_type": "ml.m5.xlarge",
    "spot": True,
    "max_wait_s": 90000,
    "instance_count": 1,  # a default: says nothing
    "tensorboard": False,
    "gpus_per_job": 0,
}


def test_a_legacy_top_level_payload_validates_and_dumps_nested() -> None:
    state = state_from_document({"run_spec": LEGACY})
    spec = state.run_spec
    assert spec.sagemaker is not None and spec.local is not None
    assert (spec.sagemaker.sm_role, spec.sagemaker.spot, spec.sagemaker.max_wait_s) == (
        ROLE,
        True,
        90000,
    )
    assert spec.local.gpus_per_job == 0
    dumped = spec.model_dump(mode="json")
    assert not {"sm_role", "bucket", "region", "spot", "gpus_per_job", "tensorboard"} & set(dumped)
    assert dumped["sagemaker"]["region"] == "us-west-2"
    assert dumped["local"] == {"tensorboard": False, "gpus_per_job": 0}
    assert RunSpec.model_validate(dumped) == spec  # the nested form reads back the same


def test_defaults_at_the_top_level_make_no_group() -> None:
    """An older dump carries every cloud field with its default: no sagemaker group."""
    spec = RunSpec.model_validate({"sm_role": None, "bucket": None, "spot": False,
                                   "instance_count": 1, "tensorboard": False})  # fmt: skip
    assert spec.sagemaker is None and spec.local is None
    assert "sagemaker" not in spec.model_dump(mode="json")


def test_a_field_given_in_both_places_with_two_values_is_refused_naming_it() -> None:
    document = {"run_spec": {"sm_role": ROLE, "sagemaker": {"sm_role": "arn:other"}}}
    with pytest.raises(PayloadError, match=r"run_spec\.sm_role: .*given twice.*"
                       r"run_spec\.sagemaker\.sm_role"):  # fmt: skip
        state_from_document(document)
    with pytest.raises(ValidationError, match="gpus_per_job is given twice"):
        RunSpec(gpus_per_job=1, local={"gpus_per_job": 2})
    # the same value in both places, or one of them the default: taken
    same = RunSpec(region="eu-west-1", sagemaker={"region": "eu-west-1", "bucket": "b"})
    assert same.sagemaker is not None and (same.sagemaker.region, same.sagemaker.bucket) == (
        "eu-west-1",
        "b",
    )
    assert RunSpec(spot=False, sagemaker={"spot": True}).sagemaker.spot is True  # type: ignore[union-attr]


def test_a_group_s_own_checks_name_the_nested_field() -> None:
    with pytest.raises(PayloadError, match=r"run_spec\.sagemaker: .*max_wait_s"):
        state_from_document({"run_spec": {"sagemaker": {"max_run_s": 100, "max_wait_s": 50}}})
    with pytest.raises(PayloadError, match=r"run_spec\.sagemaker\.instance_count"):
        state_from_document({"run_spec": {"instance_count": 0}})  # the legacy place too
    with pytest.raises(PayloadError, match=r"run_spec\.sagemaker\.depth"):
        state_from_document({"run_spec": {"sagemaker": {"depth": 3}}})


def test_the_nested_role_and_bucket_are_hidden_and_revealed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = State(run_spec=RunSpec.model_validate(LEGACY))
    shown = hide_private(state.model_dump(mode="json"))
    assert shown["run_spec"]["sagemaker"]["sm_role"] == HIDDEN
    assert shown["run_spec"]["sagemaker"]["bucket"] == HIDDEN
    monkeypatch.setenv("REMEDY_SM_ROLE", ROLE)
    monkeypatch.setenv("REMEDY_BUCKET", "my-bucket")
    assert reveal_private(State.model_validate(shown)) == state
    # the cloud backend with them left empty (the form) takes them from the machine
    bare = reveal_private(State(run_spec=RunSpec(backend="sagemaker")))
    assert bare.run_spec.sagemaker is not None
    assert (bare.run_spec.sagemaker.sm_role, bare.run_spec.sagemaker.bucket) == (ROLE, "my-bucket")
    # another backend's run is left as it is
    assert reveal_private(State(run_spec=RunSpec())).run_spec.sagemaker is None
