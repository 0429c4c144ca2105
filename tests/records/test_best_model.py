"""A run that ends not clean still says which of its models trained best."""

from __future__ import annotations

from remedy.outlets.messages import final_message
from remedy.records.best_model import best_model, best_trained
from remedy.state_schema import (
    LEARNING_TOO_SLOWLY,
    AttemptKind,
    Finding,
    JobStatus,
    RunSpec,
    State,
)
from remedy.state_schema.transitions import end
from tests.helpers.attempts import ended

SLOW = Finding(rule=LEARNING_TOO_SLOWLY, rule_class=LEARNING_TOO_SLOWLY, step=11)
DIVERGED = {"outcome": JobStatus.Stopped, "final_loss": 9.9, "findings": [Finding(rule="Div")]}


def with_probe(state: State, **fields: object) -> State:
    """A probe after the run's attempts: a short job that trained (a model of few updates)."""
    last = state.history.attempts[-1]
    probe = last.model_copy(update={"kind": AttemptKind.probe, "job_name": "p"} | fields)
    history = state.history.model_copy(update={"attempts": [*state.history.attempts, probe]})
    return state.model_copy(update={"history": history})


def test_the_best_trained_model_of_a_run_that_gave_up_is_named() -> None:
    # The built-in job knows its classes: ranked by test accuracy. #1 trained but was still
    # speeding up at its end; #2 trained better, with a finding a rule made at the end;
    # #3 diverged (stopped: its model is no final one); a probe did best, in few updates.
    state = ended(job="a", final_accuracy=0.81, findings=[SLOW])
    state = ended(state, job="b", final_accuracy=0.86, findings=[Finding(rule="LossPlateau")])
    state = with_probe(ended(state, job="c", **DIVERGED), final_accuracy=0.99)
    state = end(state, "max_num_retraining (3) reached")
    found = best_trained(state)
    assert found is not None and found[0] == 2 and found[1].job_name == "b"
    line = best_model(state)
    assert line == "attempt #2 (job b), test accuracy 0.86; its finding: LossPlateau"
    assert f"Best model trained: {line}." in final_message(state).opening


def test_without_classes_the_lowest_final_training_loss_is_best() -> None:
    script = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
    state = ended(script, job="a", initial_loss=2.3, final_loss=0.9, findings=[SLOW])
    state = ended(state, job="b", initial_loss=2.3, final_loss=0.7, findings=[SLOW])
    state = ended(state, job="c", initial_loss=2.3, final_loss=2.29)  # learned nothing
    assert best_model(end(state, "no strategy left")) == (
        "attempt #2 (job b), final training loss 0.7; its finding: LearningTooSlowly"
    )


def test_none_is_named_for_a_clean_run_a_running_one_or_one_that_trained_nothing() -> None:
    clean = ended(job="a")
    assert best_model(end(clean, "completed")) is None  # its model is its last attempt's
    assert best_model(ended(job="a", findings=[SLOW])) is None  # not ended yet
    at_chance = ended(job="a", final_accuracy=0.1)
    flat = ended(at_chance, job="b", final_loss=2.29)
    assert best_model(end(ended(flat, job="c", **DIVERGED), "no strategy left")) is None
    assert "Best model" not in " ".join(final_message(end(flat, "gave up")).opening)


def test_a_run_with_success_criteria_ranks_its_models_by_the_criterions_metric() -> None:
    # Nothing met val:accuracy >= 0.995; #2 came nearest, though its training loss is higher.
    criteria = [{"metric": "val:accuracy", "op": ">=", "value": 0.995}]
    spec = RunSpec(source_dir=".", entry_point="train.py", success_criteria=criteria)
    state = ended(State(run_spec=spec), job="a", metrics={"val:accuracy": 0.95})
    state = ended(state, job="b", final_loss=0.6, metrics={"val:accuracy": 0.97})
    state = ended(state, job="c", metrics={})  # did not report it: not ranked
    assert best_model(end(state, "max_num_retraining (3) reached")) == (
        "attempt #2 (job b), val:accuracy 0.97"
    )
