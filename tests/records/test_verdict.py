"""A run is clean in one place: completed, no finding, and its model trained."""

from __future__ import annotations

from remedy.records.verdict import attempt_flaw, run_flaw, run_is_clean
from remedy.state_schema import Finding, JobStatus, RuleStatus, RunSpec, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt


def ended(state: State | None = None, job: str = "j", **fields: object) -> State:
    trained = {"outcome": JobStatus.Completed, "steps_run": 12}
    trained |= {"initial_loss": 2.3, "final_loss": 0.4}
    return update_current_attempt(begin_attempt(state or State(), job), **(trained | fields))


def test_a_completed_attempt_whose_loss_fell_is_clean() -> None:
    assert run_is_clean(ended())


def test_what_is_not_clean_and_why() -> None:
    assert not run_is_clean(State())
    assert attempt_flaw(None) == "no job was launched"
    stopped = ended(outcome=JobStatus.Stopped)
    assert attempt_flaw(stopped.current_attempt) == "the job ended Stopped"
    found = ended(findings=[Finding(rule="Overfit")])
    assert attempt_flaw(found.current_attempt) == "Overfit reported an issue"
    idle = ended(steps_run=0)
    assert "without running a single update" in run_flaw(idle)


def test_a_model_that_did_not_train_is_not_clean() -> None:
    # e.g. a language model whose learning rate drove it above a uniform guess, all finite
    assert "did not train" in run_flaw(ended(initial_loss=9.1, final_loss=11.9))
    assert "did not train" in run_flaw(ended(initial_loss=2.30, final_loss=2.25))
    assert "no finite final loss" in run_flaw(ended(final_loss=None))
    assert "no finite loss was reported at the start" in run_flaw(ended(initial_loss=None))


def test_a_warm_started_attempt_is_judged_against_the_start_of_the_run() -> None:
    first = ended(outcome=JobStatus.Stopped, initial_loss=2.3, final_loss=0.3)
    # the warm start begins near 0.3 and ends at 0.29: judged against 2.3, it trained
    warm = ended(first, "k", start_step=100, initial_loss=0.3, final_loss=0.29)
    assert run_is_clean(warm)


def test_success_criteria_replace_the_default() -> None:
    spec = RunSpec(success_criteria=[{"metric": "test:accuracy", "op": ">=", "value": 0.9}])
    state = State(run_spec=spec)
    good = ended(state, metrics={"test:accuracy": 0.93}, initial_loss=None)
    assert run_is_clean(good)
    bad = ended(state, metrics={"test:accuracy": 0.5})
    assert run_flaw(bad) == "success criterion test:accuracy >= 0.9 not met (test:accuracy 0.5)"
    missing = ended(state, metrics={"train:loss": 0.1})
    assert "reported no test:accuracy (reported: train:loss)" in run_flaw(missing)


def test_a_criterion_can_name_a_metric_of_the_scripts_log() -> None:
    ppl = {"name": "test:perplexity", "regex": r"test ppl ([0-9.]+)"}
    spec = RunSpec.model_validate(
        {
            "source_dir": ".",
            "entry_point": "main.py",
            "metric_definitions": [ppl],
            "success_criteria": [{"metric": "test:perplexity", "op": "<", "value": 500}],
        }
    )
    state = State(run_spec=spec)
    assert run_is_clean(ended(state, metrics={"test:perplexity": 148.4, "train:loss": 4.9}))
    high = ended(state, metrics={"test:perplexity": 3000.0})
    assert run_flaw(high) == (
        "success criterion test:perplexity < 500 not met (test:perplexity 3000)"
    )
    # the job never printed it (or its last value was not finite): not clean, and said
    never = run_flaw(ended(state, metrics={"train:loss": 4.9}))
    assert never == (
        "success criterion test:perplexity < 500: the job reported no test:perplexity "
        "(reported: train:loss)"
    )
    # a criterion on a figure no definition finds says where it is missing
    undefined = State(run_spec=spec.model_copy(update={"metric_definitions": []}))
    assert run_flaw(ended(undefined, metrics={"train:loss": 4.9})).endswith(
        "(reported: train:loss; run_spec.metric_definitions has none)"
    )


def test_a_rule_that_could_not_judge_the_job_leaves_it_not_clean() -> None:
    # Issue 12: e.g. DeadRelu on a job that saved no activations reports Error.
    error = Finding(rule="DeadRelu", status=RuleStatus.Error, message="read nothing in 40 steps")
    state = ended(rule_errors=[error])
    assert not run_is_clean(state)
    assert run_flaw(state) == "rule DeadRelu could not judge the job: read nothing in 40 steps"
