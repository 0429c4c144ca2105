"""What the first attempt's log says about where a script's outputs go, an accuracy it
cannot judge, a length it cannot know and a learning rate no strategy can change."""

from __future__ import annotations

from remedy.records.verdict import accuracy_unread
from remedy.state_schema import RunSpec
from remedy.tasks.train import shared_outputs, unknown_length, unmapped_rate
from tests.conftest import REPO


def test_a_script_without_an_output_dir_role_is_told_its_outputs_may_be_shared() -> None:
    script = RunSpec(entry_point="train.py", hyperparameters={"work-dir": "work"})
    said = shared_outputs(script)
    assert said is not None and "outputs may be shared" in said and "output_dir" in said
    own = RunSpec.model_validate(
        {"entry_point": "train.py", "hyperparameter_roles": {"output_dir": "work-dir"}}
    )
    assert shared_outputs(own) is None
    assert shared_outputs(RunSpec()) is None  # the built-in job writes into its job folder


def test_a_job_whose_classes_are_stated_is_told_when_no_definition_reads_its_accuracy() -> None:
    """num_classes judges test:accuracy; a definition named val:accuracy reads another
    metric, and nothing tells the verdict the model beat chance: said at the first launch,
    naming the likely one."""
    spec = {
        "entry_point": "train.py",
        "num_classes": 3,
        "metric_definitions": [{"name": "val:accuracy", "regex": "val_acc ([0-9.]+)"}],
    }
    said = accuracy_unread(RunSpec.model_validate(spec))
    assert said is not None
    assert said.startswith("num_classes is 3: a clean run's test:accuracy must beat chance")
    assert "(val:accuracy: name it test:accuracy to have it judged)" in said
    named = spec | {"metric_definitions": [{"name": "test:accuracy", "regex": "acc ([0-9.]+)"}]}
    assert accuracy_unread(RunSpec.model_validate(named)) is None
    assert accuracy_unread(RunSpec.model_validate(spec | {"num_classes": None})) is None
    assert accuracy_unread(RunSpec()) is None  # the built-in job reports its own


def test_a_script_of_unknown_length_is_told_it_is_asked_only_at_its_end() -> None:
    """A regression script typed at a rate far too small ran all its 600 updates before it
    was asked (LearningTooSlowly at its end, 2.06x the updates of its repaired run): the
    first launch's log names the role that would have it asked at an eighth, and the
    flags that look like its length."""
    flags = {"lr": 3e-6, "steps": 600, "seed": 0, "log_steps": True}
    spec = {"entry_point": "fit.py", "hyperparameters": flags}
    said = unknown_length(RunSpec.model_validate(spec))
    assert said is not None and said.startswith("its length is unknown")
    assert 'map the flag (steps?): "hyperparameter_roles": {"max_steps": "<flag>"}' in said
    mapped = spec | {"hyperparameter_roles": {"max_steps": "steps"}}
    assert unknown_length(RunSpec.model_validate(mapped)) is None
    by_epochs = {"entry_point": "fit.py", "hyperparameters": {"epochs": 3},
                 "hyperparameter_roles": {"num_epochs": "epochs"}}  # fmt: skip
    assert unknown_length(RunSpec.model_validate(by_epochs)) is None
    assert unknown_length(RunSpec()) is None  # the built-in job reports its own
    plain = unknown_length(RunSpec(entry_point="fit.py", hyperparameters={"lr": 0.1}))
    assert plain is not None and "map the flag: " in plain


def test_a_script_mapping_no_learning_rate_is_told_a_finding_may_end_its_run() -> None:
    """A script that read its rate from a YAML config file alone (`arguments`: --config)
    was found diverging at update 4 and ended "no strategy left" after that one launch,
    every repair lacking a flag: the first launch's log says so up front, with the roles
    it maps and the flags that look like a rate."""
    from_config = RunSpec(entry_point="train.py", arguments=["--config", "cfg.yaml"])
    said = unmapped_rate(from_config)
    assert said is not None and said.startswith("no flag plays the learning_rate role")
    assert "(roles mapped: none)" in said and "or the key of a config file" in said
    flags = {"max-lr": 0.1, "base_lr": 0.01, "LearningRate": 1.0, "epochs": 3, "lrs": 2}
    by_epochs = RunSpec(
        entry_point="train.py", hyperparameters=flags,
        hyperparameter_roles={"num_epochs": "epochs"},
    )  # fmt: skip
    said = unmapped_rate(by_epochs)
    assert said is not None and "(roles mapped: num_epochs)" in said
    assert "map the flag of its rate (max-lr, base_lr, LearningRate?)" in said
    mapped = RunSpec(
        entry_point="train.py", hyperparameters={"lr": 0.1},
        hyperparameter_roles={"learning_rate": "lr"},
    )  # fmt: skip
    assert unmapped_rate(mapped) is None
    assert unmapped_rate(RunSpec()) is None  # the built-in job has every role


def test_the_hints_name_the_keys_of_a_config_file_the_command_line_names() -> None:
    """A script whose every setting is in a YAML file named on its command line: the
    hints name its rate's and its epochs' keys, as run_spec would write them."""
    spec = RunSpec(
        source_dir=str(REPO / "examples" / "yaml_config"), entry_point="train.py",
        arguments=["--config", "configs/spirals.yaml"],
    )  # fmt: skip
    rate = unmapped_rate(spec)
    assert (
        rate is not None and "map the flag of its rate (configs/spirals.yaml:optimizer.lr?)" in rate
    )
    length = unknown_length(spec)
    assert length is not None and "(configs/spirals.yaml:train.epochs?)" in length
    assert '{"num_epochs": "<flag>"}' in length  # an epochs setting maps to num_epochs
