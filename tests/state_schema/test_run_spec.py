"""Script mode in run_spec: source_dir, entry_point, hyperparameters and their roles."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from remedy.state_schema import (
    ROLES,
    Hyperparameters,
    PayloadError,
    RunSpec,
    State,
    load_state,
    save_state,
    state_from_document,
)
from remedy.state_schema.job_traits import BUILTIN_JOB, SCRIPT_JOB
from remedy.state_schema.transitions import spec_changes

# The example of docs/job-contract.md: a classic argparse language-model script.
WORD_LM = {
    "source_dir": "examples/word_lm",
    "entry_point": "main.py",
    "hyperparameters": {"lr": 20, "clip": 0.25, "epochs": 2},
    "hyperparameter_roles": {"learning_rate": "lr", "grad_clip_norm": "clip"},
}


def script(hyperparameters: dict, roles: dict, **fields: object) -> RunSpec:
    document = {"entry_point": "main.py", "hyperparameters": hyperparameters}
    return RunSpec.model_validate(document | {"hyperparameter_roles": roles} | fields)


def errors(document: dict) -> str:
    with pytest.raises(PayloadError) as caught:
        state_from_document(document, where="spec.json")
    return str(caught.value)


def test_the_documented_example_validates_and_keeps_its_flags_in_state_json(tmp_path) -> None:
    spec = RunSpec.model_validate(WORD_LM)
    assert (spec.source_dir, spec.entry_point, spec.is_script) == (
        "examples/word_lm",
        "main.py",
        True,
    )
    assert spec.script_hyperparameters == {"lr": 20, "clip": 0.25, "epochs": 2}
    assert spec.job_hyperparameters() == {"lr": 20, "clip": 0.25, "epochs": 2}
    save_state(tmp_path / "state.json", State(run_spec=spec))
    written = json.loads((tmp_path / "state.json").read_text())["state"]["run_spec"]
    assert {key: written[key] for key in WORD_LM} == WORD_LM  # JSON names, as given
    assert load_state(tmp_path / "state.json").run_spec == spec


def test_the_built_in_job_has_no_flags_and_every_role() -> None:
    spec = RunSpec()
    assert spec.is_builtin and not spec.is_script
    assert (spec.script_hyperparameters, spec.hyperparameter_roles) == ({}, {})
    assert spec.job_hyperparameters() == spec.hyperparameters()  # the contract
    assert all(spec.has_role(role) for role in ROLES)
    assert spec.role("learning_rate") == 0.1 and spec.role_label("learning_rate") == "learning_rate"
    lowered = spec.with_roles({"learning_rate": 0.01, "add_batch_norm": 1})
    assert (lowered.learning_rate, lowered.add_batch_norm) == (0.01, 1)


def test_roles_read_and_write_a_scripts_flags() -> None:
    spec = RunSpec.model_validate(WORD_LM)
    assert spec.has_role("learning_rate") and spec.has_role("grad_clip_norm")
    assert not spec.has_role("warmup_learning_rate")
    assert spec.role("learning_rate") == 20.0  # the contract's value (a float)
    assert spec.role("warmup_learning_rate") is None  # unmapped
    assert spec.role_label("learning_rate") == "--lr"
    after = spec.with_roles({"learning_rate": 2.0, "grad_clip_norm": 0.025})
    assert after.script_hyperparameters == {"lr": 2.0, "clip": 0.025, "epochs": 2}
    assert after.learning_rate == spec.learning_rate  # the built-in field is untouched
    assert spec.script_hyperparameters["lr"] == 20  # a copy: the original is unchanged
    with pytest.raises(ValueError, match="maps no flag to warmup_learning_rate"):
        spec.with_roles({"warmup_learning_rate": 0.01})
    with pytest.raises(ValueError, match="unknown role 'lr'"):
        spec.role("lr")


def test_a_store_true_flag_stays_a_boolean_and_text_values_are_decoded() -> None:
    spec = script(
        {"batch-norm": False, "lr": "0.1", "act": "relu"},
        {"add_batch_norm": "batch-norm", "learning_rate": "lr", "activation": "act"},
    )
    assert spec.role("add_batch_norm") == 0 and spec.role("learning_rate") == 0.1
    after = spec.with_roles({"add_batch_norm": 1, "activation": "selu"})
    assert after.script_hyperparameters == {"batch-norm": True, "lr": "0.1", "act": "selu"}
    assert after.role("add_batch_norm") == 1


def test_a_null_flag_may_play_a_role_that_takes_null() -> None:
    spec = script({"clip": None}, {"grad_clip_norm": "clip"})
    assert spec.role("grad_clip_norm") is None and spec.has_role("grad_clip_norm")


def test_hyperparameters_understood_still_validates_and_restricts_roles() -> None:
    spec = RunSpec(hyperparameters_understood=["learning_rate"])
    assert spec.has_role("learning_rate") and not spec.has_role("grad_clip_norm")
    mapped = script({"lr": 1, "clip": 1}, {"learning_rate": "lr", "grad_clip_norm": "clip"})
    restricted = mapped.model_copy(update={"hyperparameters_understood": ["grad_clip_norm"]})
    assert not restricted.has_role("learning_rate") and restricted.has_role("grad_clip_norm")


def test_what_is_known_of_a_job_comes_from_its_traits() -> None:
    """The built-in job's facts are written once (job_traits.py); a script's come from its
    run_spec: its warm start goes to its resume flag, the built-in job's to init_checkpoint."""
    builtin = RunSpec()
    assert builtin.job is BUILTIN_JOB and builtin.writes_into_job_folder
    fields = builtin.job_hyperparameters(resume="/job/checkpoints/epoch-0002")
    assert fields == builtin.hyperparameters() | {"init_checkpoint": "/job/checkpoints/epoch-0002"}
    script = RunSpec.model_validate(
        {"entry_point": "fit.py", "hyperparameters": {"lr": 0.1}, "hyperparameter_roles": {
            "learning_rate": "lr", "resume": "resume-from"}}
    )  # fmt: skip
    assert script.job is SCRIPT_JOB and not script.writes_into_job_folder
    assert script.job_hyperparameters(resume="/c") == {"lr": 0.1, "resume-from": "/c"}
    assert script.model_copy(
        update={"hyperparameter_roles": {"output_dir": "out"}}
    ).writes_into_job_folder


def test_module_entry_points_and_legacy_names() -> None:
    assert RunSpec(entry_point="training.train").entry_point == "remedy.training.train"
    spec = RunSpec(entry_point="mypkg.train", source_dir="/code")
    assert not spec.is_builtin and not spec.is_script
    assert RunSpec(entry_point="/abs/path/train.py").is_script


@pytest.mark.parametrize(
    ("entry_point", "message"),
    [
        ("../train.py", "inside source_dir"),
        ("src/../../train.py", "inside source_dir"),
        ("my-script", "expected a module"),
        ("pkg..mod", "expected a module"),
        ("src\\train.py", "uses /"),
    ],
)
def test_entry_point_shapes_are_checked(entry_point: str, message: str) -> None:
    text = errors({"entry_point": entry_point})
    assert "\n  entry_point: Value error, " in text and message in text


def test_the_built_in_job_refuses_flags_and_roles_naming_the_field() -> None:
    text = errors({"hyperparameters": {"lr": 1}, "hyperparameter_roles": {"learning_rate": "lr"}})
    assert "2 invalid field(s)" in text
    assert "\n  hyperparameters: the built-in job (remedy.training.train)" in text
    assert "\n  hyperparameter_roles: the built-in job" in text


def test_a_script_refuses_fields_of_the_built_in_job() -> None:
    text = errors({"entry_point": "main.py", "learning_rate": 0.5, "seed": 3})
    assert "\n  learning_rate: a field of the built-in job" in text
    assert "\n  seed: a field of the built-in job" in text
    # ... but not the fields every job uses
    spec = RunSpec(entry_point="main.py", base_job_name="lm", nan_guard="skip")
    assert spec.model_copy(update={"init_checkpoint": "/c", "start_epoch": 2}).start_epoch == 2


def test_unknown_and_unmapped_roles_are_refused_naming_them() -> None:
    document = {
        "entry_point": "main.py",
        "hyperparameters": {"lr": 1, "lr2": 2},
        "hyperparameter_roles": {"lr_rate": "lr", "grad_clip_norm": "clip", "batch_size": "lr2"},
    }
    text = errors(document)
    assert "\n  hyperparameter_roles.lr_rate: unknown role 'lr_rate'; known roles: " in text
    assert ", ".join(ROLES) in text
    assert "\n  hyperparameter_roles.grad_clip_norm: maps to the flag 'clip', which " in text
    assert "hyperparameters lacks" in text
    assert "batch_size" not in text.replace("known roles: " + ", ".join(ROLES), "")


@pytest.mark.parametrize(
    ("flags", "roles", "message"),
    [
        ({"lr": None}, {"learning_rate": "lr"}, "hyperparameters.lr is null"),
        ({"lr": -1}, {"learning_rate": "lr"}, "hyperparameters.lr is not a valid learning_rate"),
        ({"o": "SGD"}, {"optimizer": "o"}, "Input should be 'sgd', 'momentum'"),
        ({"lr": 1}, {"learning_rate": "lr", "warmup_learning_rate": "lr"}, "already plays"),
        ({"bs": True}, {"batch_size": "bs"}, "must be a number"),
        ({"n": 0}, {"max_steps": "n"}, "hyperparameters.n is 0, not a whole number of updates"),
        ({"n": "inf"}, {"max_steps": "n"}, "hyperparameters.n is inf, not a whole number"),
        ({"n": "all"}, {"max_steps": "n"}, "hyperparameters.n is 'all', not a number of updates"),
        ({}, {"max_steps": "n"}, "maps to the flag 'n', which hyperparameters lacks"),
    ],
)
def test_a_flag_must_fit_its_role(flags: dict, roles: dict, message: str) -> None:
    document = {"entry_point": "main.py", "hyperparameters": flags, "hyperparameter_roles": roles}
    assert message in errors(document)


def test_a_script_states_its_length_by_its_max_steps_flag() -> None:
    spec = RunSpec(
        entry_point="train.py",
        hyperparameters={"max_iters": "400", "lr": 0.1},
        hyperparameter_roles={"max_steps": "max_iters", "learning_rate": "lr"},
    )
    assert spec.stated_length == 400
    assert RunSpec(entry_point="train.py").stated_length is None
    assert RunSpec().stated_length is None  # the built-in job reports its own as it runs


def test_a_script_that_batches_by_hand_states_its_epoch() -> None:
    """updates_per_epoch: the epoch the launcher cannot measure without a DataLoader; it
    counts only with the epochs flag mapped, and not beside a length stated otherwise."""
    flags = {"epochs": 4, "lr": 20, "max_iters": 400}
    spec = RunSpec(
        entry_point="main.py", hyperparameters=flags,
        hyperparameter_roles={"num_epochs": "epochs"}, updates_per_epoch=45,
    )  # fmt: skip
    assert spec.steps_per_epoch == 45 and spec.role("num_epochs") == 4
    assert spec.model_dump(mode="json")["updates_per_epoch"] == 45
    assert RunSpec(entry_point="main.py").steps_per_epoch is None
    assert "updates_per_epoch" not in RunSpec().model_dump(mode="json")  # a built-in payload
    document: dict = {"entry_point": "main.py", "hyperparameters": flags, "updates_per_epoch": 45}
    assert "map the flag that counts them to the num_epochs role" in errors(document)
    both = {"num_epochs": "epochs", "max_steps": "max_iters"}
    assert "states the job's length already" in errors(document | {"hyperparameter_roles": both})
    assert "knows its own epoch" in errors({"updates_per_epoch": 45})


def test_every_role_is_a_field_of_the_training_contract() -> None:
    assert set(ROLES) <= set(Hyperparameters.model_fields)


def test_stop_settings_have_documented_defaults() -> None:
    spec = RunSpec()
    assert (spec.stop_grace_s, spec.kill_after_s) == (10.0, 20.0)
    assert "stop_grace_s" in errors({"stop_grace_s": -1})


def test_changes_of_a_scripts_flags_are_recorded_one_by_one() -> None:
    before = RunSpec.model_validate(WORD_LM)
    after = before.with_roles({"learning_rate": 2.0})
    assert spec_changes(before, after) == {"hyperparameters.lr": [20, 2.0]}
    dropped = after.model_copy(update={"script_hyperparameters": {"lr": 2.0}})
    assert spec_changes(after, dropped) == {
        "hyperparameters.clip": [0.25, None],
        "hyperparameters.epochs": [2, None],
    }


# -- rules (issue 12): names become status file names, used once ---------------------------


@pytest.mark.parametrize("name", ["a/b", "../x", "a..b", ".hidden", "", "x" * 256, "a b"])
def test_a_rule_name_that_is_not_a_safe_file_name_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match=r"rules\.0\.name"):
        RunSpec(rules=[{"name": name, "rule": "ExplodingTensor"}])


def test_a_rule_name_used_twice_is_refused() -> None:
    twice = [{"name": "Guard", "rule": "ExplodingTensor"}, {"name": "Guard", "rule": "DeadRelu"}]
    with pytest.raises(ValidationError, match="each rule name is used once; used twice: Guard"):
        RunSpec(rules=twice)


def test_a_custom_rule_file_is_allowed_and_a_built_in_rule_dumps_as_before() -> None:
    spec = RunSpec(rules=[{"name": "High", "rule": "LossAbove", "rule_file": "my_rules.py"}])
    assert spec.rules[0].rule_file == "my_rules.py"
    assert spec.model_dump()["rules"][0]["rule_file"] == "my_rules.py"
    assert "rule_file" not in RunSpec().model_dump()["rules"][0]


# -- command-line styles, coupled flags, path roles, what the payload shows (issue 22) ----


def test_the_style_and_fixed_arguments_make_the_command_line() -> None:
    spec = script(
        {"learning_rate": 1.0, "compile": False, "trainer.max_epochs": 2}, {},
        hyperparameter_style="--name=value", arguments=["config/train.py"],
    )  # fmt: skip
    assert spec.job_arguments() == [
        "config/train.py", "--learning_rate=1.0", "--compile=False", "--trainer.max_epochs=2"
    ]  # fmt: skip
    hydra = spec.model_copy(update={"hyperparameter_style": "name=value"})
    assert hydra.job_arguments()[1:] == [
        "learning_rate=1.0", "compile=false", "trainer.max_epochs=2"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bare_flags": ["tied"]}, "bare_flags: tied: a bare flag is a true/false entry"),
        ({"bare_flags": ["lr"]}, "bare_flags: lr: a bare flag is a true/false entry"),
        (
            {"bare_flags": ["cuda"], "hyperparameter_style": "name=value"},
            "bare_flags: cuda: name=value overrides have no bare flag",
        ),
        ({"hyperparameter_style": "--name value value"}, "hyperparameter_style"),
        ({"arguments": [""]}, "arguments.0: an argument is non-empty text"),
        ({"arguments": "cfg.py"}, "arguments"),
        ({"hyperparameters": {"+lr": 1}}, "hyperparameters.+lr: a + prefix is Hydra's"),
        ({"hyperparameter_roles": {"output_dir": "lr"}}, "remove it from hyperparameters"),
        ({"coupled_flags": {"min_lr": {"follows": "cuda"}}}, "does not map to a role"),
        ({"coupled_flags": {"min": {"follows": "lr"}}}, "is not in hyperparameters"),
        ({"coupled_flags": {"cuda": {"follows": "lr"}}}, "ratio scales a number"),
        ({"coupled_flags": {"lr": {"follows": "lr"}}}, "a flag follows or leads"),
        ({"coupled_flags": {"min_lr": {"follows": "lr", "relation": "x"}}}, "relation"),
    ],
)
def test_bad_command_line_settings_are_refused_naming_the_field(fields: dict, message: str) -> None:
    document = {
        "entry_point": "main.py",
        "hyperparameters": {"lr": 1.0, "min_lr": 0.1, "cuda": False},
        "hyperparameter_roles": {"learning_rate": "lr"},
    }
    document |= {k: v for k, v in fields.items() if k != "hyperparameters"}
    document["hyperparameters"] |= fields.get("hyperparameters", {})
    assert message in errors(document)


def test_the_built_in_job_refuses_the_command_line_fields() -> None:
    text = errors({"arguments": ["x"], "hyperparameter_style": "name=value"})
    assert "\n  arguments: the built-in job" in text
    assert "\n  hyperparameter_style: the built-in job" in text


def test_a_coupled_flag_follows_its_roles_flag_by_the_same_factor() -> None:
    coupled = {"min_lr": {"follows": "lr"}, "warmup_lr": {"follows": "lr", "relation": "equal"}}
    flags = {"lr": 1.0, "min_lr": 0.1, "warmup_lr": 1.0, "iters": 100}
    spec = script(flags, {"learning_rate": "lr"}, coupled_flags=coupled)
    after = spec.with_roles({"learning_rate": 0.01})
    assert after.script_hyperparameters == flags | {"lr": 0.01, "min_lr": 0.001, "warmup_lr": 0.01}
    assert spec_changes(spec, after)["hyperparameters.min_lr"] == [0.1, 0.001]
    # a role a strategy does not change leaves its followers alone
    assert spec.with_roles({"learning_rate": 1.0}).script_hyperparameters["min_lr"] == 0.1
    text = errors({"entry_point": "m.py", "hyperparameters": {"c": 1.0, "d": 1.0},
                   "hyperparameter_roles": {"grad_clip_norm": "c"},
                   "coupled_flags": {"d": {"follows": "c"}}})  # fmt: skip
    assert "ratio needs a leader that is always a number; grad_clip_norm" in text


def test_an_old_roles_payload_still_validates() -> None:
    spec = RunSpec.model_validate(WORD_LM)
    assert spec.hyperparameter_roles == {"learning_rate": "lr", "grad_clip_norm": "clip"}
    assert (spec.hyperparameter_style, spec.arguments) == ("--name value", [])
    assert (spec.bare_flags, spec.coupled_flags) == ([], {})


def test_path_roles_get_the_attempts_folders() -> None:
    spec = script({"lr": 1.0}, {"output_dir": "work-dir", "resume": "resume"})
    assert spec.job_arguments() == ["--lr", "1.0"]
    assert spec.job_arguments(output_dir="/j/model", resume=None) == [
        "--lr", "1.0", "--work-dir", "/j/model"
    ]  # fmt: skip
    assert spec.job_hyperparameters("/j/model", "/j/ck/3")["resume"] == "/j/ck/3"


def test_a_script_runs_payload_shows_its_flags_not_the_built_in_fields(tmp_path) -> None:
    spec = RunSpec.model_validate(WORD_LM | {"base_job_name": "lm"})
    dumped = spec.model_dump(mode="json")
    for field in ("learning_rate", "depth", "width", "optimizer", "momentum", "batch_size"):
        assert field not in dumped
    assert dumped["hyperparameters"]["lr"] == 20 and dumped["base_job_name"] == "lm"
    assert RunSpec.model_validate(dumped) == spec
    save_state(tmp_path / "state.json", State(run_spec=spec))
    assert load_state(tmp_path / "state.json").run_spec == spec
    # the built-in job's payload is as it was: no script fields added
    builtin = RunSpec().model_dump(mode="json")
    assert builtin["learning_rate"] == 0.1 and "hyperparameter_style" not in builtin
    assert "hyperparameters" in builtin  # as before: an empty object


def test_a_misspelled_field_gets_a_did_you_mean_at_its_place() -> None:
    from remedy.state_schema.io import state_from_document

    cases = {
        "learning_rat": ({"learning_rat": 0.1}, "learning_rat: Extra inputs are not permitted; "
                         "did you mean learning_rate?"),
        "nested": ({"state": {"run_spec": {"rules": [{"rule": "Loss", "parameter": {}}]}}},
                   "state.run_spec.rules.0.parameter: Extra inputs are not permitted; "
                   "did you mean parameters?"),
        "budgets": ({"state": {"budgets": {"max_num_retrainings": 3}}},
                    "did you mean max_num_retraining?"),
    }  # fmt: skip
    for name, (document, expected) in cases.items():
        with pytest.raises(PayloadError) as raised:
            state_from_document(document)
        assert expected in str(raised.value), name
    with pytest.raises(PayloadError) as raised:  # nothing close: no guess
        state_from_document({"zzz": 1})
    assert str(raised.value).endswith("zzz: Extra inputs are not permitted")


def test_a_scripts_jobs_are_named_after_it_unless_named() -> None:
    assert RunSpec.model_validate(WORD_LM).base_job_name == "main"
    assert RunSpec(entry_point="src/fit model.py", source_dir=".").base_job_name == "fit-model"
    assert RunSpec.model_validate(WORD_LM | {"base_job_name": "word-lm"}).base_job_name == "word-lm"
    assert RunSpec().base_job_name == "complex-resnet-model"  # the built-in job: the seed's
    named = RunSpec.model_validate(WORD_LM)
    assert RunSpec.model_validate(named.model_dump()).base_job_name == "main"  # kept as saved
