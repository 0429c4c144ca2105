"""What the first attempt's log says about where a script's outputs go."""

from __future__ import annotations

from remedy.state_schema import RunSpec
from remedy.tasks.train import shared_outputs


def test_a_script_without_an_output_dir_role_is_told_its_outputs_may_be_shared() -> None:
    script = RunSpec(entry_point="train.py", hyperparameters={"work-dir": "work"})
    said = shared_outputs(script)
    assert said is not None and "outputs may be shared" in said and "output_dir" in said
    own = RunSpec.model_validate(
        {"entry_point": "train.py", "hyperparameter_roles": {"output_dir": "work-dir"}}
    )
    assert shared_outputs(own) is None
    assert shared_outputs(RunSpec()) is None  # the built-in job writes into its job folder
