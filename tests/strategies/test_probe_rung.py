"""The probes' rung (successive halving): at half their updates, a probe another outpaced
is stopped; what it taught closes no end of the bracket, and it is kept only where no
probe trained. Loss traces from the benchmark's rounds (repair_quality.py), rounded."""

from __future__ import annotations

import pytest

from remedy.state_schema import Attempt, AttemptResult, Finding, ResultKind, RunSpec, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from remedy.strategies.probes import (
    LOST_SHARE,
    best,
    farther,
    keep_probes,
    learned_slower,
    outpaced,
)
from remedy.strategies.search_lr import bracket


def script(lr: float) -> RunSpec:
    return RunSpec.model_validate(
        {
            "entry_point": "main.py",
            "hyperparameters": {"lr": lr},
            "hyperparameter_roles": {"learning_rate": "lr"},
        }
    )


def falling(start: float, drop: float, steps: int = 12, wobble: float = 0.0) -> list[float]:
    """A loss that falls by `drop` in a line over `steps`, each loss off by +-wobble."""
    return [start - drop * i / (steps - 1) + (wobble if i % 2 else -wobble) for i in range(steps)]


def probe(name: str, lr: float, **fields: object) -> Attempt:
    spec = script(lr).model_copy(update={"max_updates": 24})
    changes = {"hyperparameters.lr": (1e-6, lr)}
    return Attempt(
        job_name=name, spec=spec, kind="probe", strategy="search_lr_up", changes=changes, **fields
    )


def test_a_probe_far_behind_at_its_rung_is_outpaced_one_near_is_not() -> None:
    """A VAE's round at its rung: 0.01 had taken the loss down 6.9, 0.001 0.79 (0.11 of
    it: outpaced); 0.1 leading by 15 made 0.01 0.46 of it, which goes on (0.1 diverged in
    its second half: 0.01 was the best)."""
    start = 45.0
    traces = {"p-1": falling(start, 6.92), "p-2": falling(start, 0.79)}
    probes = [probe("p-1", 0.01), probe("p-2", 0.001)]
    lost = outpaced(probes, traces)
    assert list(lost) == ["p-2"]
    result = lost["p-2"]
    assert result.kind is ResultKind.outpaced
    assert result.loss == pytest.approx(sum(traces["p-2"][-5:]) / 5)
    assert "outpaced after 12 updates" in result.summary and "lr 0.01's" in result.summary
    assert "loss down 0.646, under 0.25 of lr 0.01's fall of 5.66" in result.summary
    near = {"p-0": falling(start, 15.0), "p-1": falling(start, 0.46 * 15.0)}
    assert outpaced([probe("p-0", 0.1), probe("p-1", 0.01)], near) == {}
    assert LOST_SHARE < 0.46


def test_a_lower_rate_whose_loss_rose_at_its_rung_is_outpaced_in_words_that_say_so() -> None:
    """Lion at 3e-4 rose 37.7 in its first 12 updates where 3e-3 fell 87.5 (a regression
    script of ours, sign updates): lower than the leader, so not diverged, and its summary
    says its loss went up, not "down -37.7"."""
    traces = {"p-1": falling(230.0, 87.5), "p-2": falling(230.0, -37.7, wobble=0.5)}
    lost = outpaced([probe("p-1", 3e-3), probe("p-2", 3e-4)], traces)
    assert lost["p-2"].kind is ResultKind.outpaced
    assert "loss up 31.4, against lr 0.003's fall of 71.6" in lost["p-2"].summary


def test_no_probe_is_outpaced_by_a_drop_within_its_leaders_noise() -> None:
    """A word LM's rates far too small all sit on the untrained loss: the best 'drop' is
    the batches' noise, and ranking by it would stop probes at random."""
    start = 5.70
    noisy = {
        "p-0": falling(start, 0.02, wobble=0.03),
        "p-1": falling(start, -0.01, wobble=0.03),
        "p-2": falling(start, 0.001, wobble=0.03),
    }
    assert outpaced([], noisy) == {}
    clear = {**noisy, "p-3": falling(start, 0.25, wobble=0.03)}  # a rate that learns
    assert sorted(outpaced([], clear)) == ["p-0", "p-1", "p-2"]


def test_a_probe_with_a_non_finite_loss_at_its_rung_is_left_to_the_rules() -> None:
    traces = {"p-0": falling(5.7, 0.5), "p-1": [5.7, *falling(5.7, 0.0)[1:-1], None]}
    assert outpaced([], traces) == {}


def test_an_outpaced_probe_closes_no_end_of_the_bracket_and_counts_as_learning_slower() -> None:
    """Stopped at half its updates, it neither stalled nor diverged: the search upwards
    from a stall at 1e-6 keeps its bracket open above, and the next round may go past
    the best as before."""
    stall = AttemptResult(kind=ResultKind.stalled, update=30)
    found = Finding(rule="TinyUpdates", rule_class="TinyUpdates", step=30, message="tiny")
    state = begin_attempt(State(policy="adaptive", run_spec=script(1e-6)), "job-1")
    state = update_current_attempt(state, findings=[found], result=stall)
    state = state.model_copy(update={"findings": [found]})
    rung = outpaced([], {"p-0": [5.7] * 12, "p-1": falling(5.7, 0.4)})
    slow = probe("p-0", 1e-5, outcome="Stopped", steps_run=12, result=rung["p-0"])
    fast = probe("p-1", 1e-4, outcome="Stopped", steps_run=24, final_loss=5.2)
    kept = keep_probes(state, [slow, fast])
    judged = {a.job_name: a for a in kept.history.attempts}
    assert judged["p-0"].result.kind is ResultKind.outpaced  # kept as judged at the rung
    assert judged["p-1"].result.kind is ResultKind.trained
    assert bracket(kept.history.attempts).low == pytest.approx(1e-6)  # the run's stall only
    assert kept.run_spec.script_hyperparameters["lr"] == pytest.approx(1e-4)
    assert learned_slower(judged["p-0"], judged["p-1"])
    assert farther(state, [judged["p-0"], judged["p-1"]])  # the best was the farthest rate


def test_an_outpaced_probe_is_kept_only_where_no_probe_trained() -> None:
    """Its leader went on and diverged after the rung: the outpaced probe is the best
    there is (relaunched from the start: it was stopped, not held)."""
    result = outpaced([], {"p-0": falling(45.0, 15.0), "p-1": falling(45.0, 1.0)})["p-1"]
    behind = probe("p-1", 1e-3, outcome="Stopped", steps_run=12, result=result)
    diverged = AttemptResult(kind=ResultKind.diverged, update=20)
    leader = probe("p-0", 1e-2, outcome="Stopped", steps_run=20, result=diverged)
    assert best([leader, behind]) is behind
    learned = AttemptResult(kind=ResultKind.trained, loss=44.0)
    trained = probe("p-2", 1e-4, outcome="Stopped", steps_run=24, result=learned)
    assert best([leader, behind, trained]) is trained


def test_a_higher_rate_whose_loss_climbed_at_the_rung_diverged_a_lower_one_is_outpaced() -> None:
    """A word LM's round at 2000, 200 and 20 (its run at 20,000 diverged): at the rung 2000
    had climbed 12.4 above its first loss while 20 fell 0.3 (the lines here: 10.7 and 0.217
    by the mean of their last 5). It diverged, and closes the bracket as the rule that
    would fire a few updates later would; no round goes past the best (20) on its account.
    A rate below the leader whose loss climbed is only outpaced: it closes no end above the
    best."""
    start = 5.70
    hot = probe("p-0", 2000.0)
    best_so_far = probe("p-1", 20.0, start_step=0)
    low = probe("p-2", 0.2)
    traces = {
        "p-0": falling(start, -12.4, wobble=0.5),
        "p-1": falling(start, 0.295, wobble=0.02),
        "p-2": falling(start, -1.0, wobble=0.02),
    }
    lost = outpaced([hot, best_so_far, low], traces)
    assert lost["p-0"].kind is ResultKind.diverged and lost["p-0"].update == 12
    assert "its loss up 10.7 at its rung, while lr 20's fell 0.217" in lost["p-0"].summary
    assert lost["p-2"].kind is ResultKind.outpaced
    judged = [p.model_copy(update={"result": lost[p.job_name]}) for p in (hot, low)]
    assert bracket(judged).high == pytest.approx(2000) and bracket(judged).low is None
