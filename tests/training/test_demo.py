"""The demo's run_spec is checked by the training contract, not a free copy of it."""

from remedy.state_schema import Hyperparameters, RunSpec
from remedy.training.demo import DEMO_RUN_SPEC


def test_the_demo_is_a_valid_run_spec_the_job_accepts() -> None:
    assert isinstance(DEMO_RUN_SPEC, RunSpec)
    job = Hyperparameters.model_validate(DEMO_RUN_SPEC.hyperparameters())
    assert job.hyperparameters() == DEMO_RUN_SPEC.hyperparameters()


def test_the_demo_is_the_seed_scenario_made_smaller() -> None:
    seed, demo = RunSpec(), DEMO_RUN_SPEC
    same = ["depth", "activation", "add_batch_norm", "optimizer", "momentum", "weight_decay"]
    same += ["warmup_learning_rate", "learning_rate", "warmup_epochs", "num_epochs", "init"]
    assert {name: getattr(demo, name) for name in same} == {n: getattr(seed, n) for n in same}
    assert (demo.width, demo.batch_size) == (8, 64)
    assert (demo.num_train_samples, demo.num_test_samples) == (5000, 1000)
    assert demo.debugger_save_interval == 5 and demo.nan_guard == "off"
