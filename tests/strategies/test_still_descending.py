"""The verdict's open question: a run still descending in a line at its end is asked, by
probes at higher rates, whether its rate held it back. One that reaches its final loss in a
quarter of its updates makes it a stall; none does, and the run was clean (issue 21).

The figures are the tiny built-in job's at its rate (64 updates, loss thirds 2.653, 1.813,
1.311, 0.731: 1.16x the middle third's drop in the last third, a final window of 0.809),
and its probes at 10x, 100x and 1000x, which all diverge."""

from __future__ import annotations

from remedy.decisions.plan import plan_next
from remedy.records.verdict import run_is_clean, run_verdict_finding
from remedy.state_schema import (
    SETTLED_EARLY,
    STILL_DESCENDING,
    Attempt,
    AttemptKind,
    AttemptResult,
    Budgets,
    Finding,
    JobStatus,
    NextAction,
    ResultKind,
    RuleStatus,
    State,
)
from remedy.state_schema.transitions import CLEAN_END, begin_attempt, update_current_attempt
from remedy.strategies.probes import best
from remedy.strategies.search_lr import held_rate, shown_to_hold
from remedy.strategies.still_descending import is_held, settle

TINY_THIRDS = [2.653, 1.813, 1.311, 0.731]


def completed(state: State) -> State:
    """A completed run of the tiny job at lr 0.1."""
    return update_current_attempt(
        begin_attempt(state, "job-1"),
        outcome=JobStatus.Completed,
        steps_run=64,
        initial_loss=2.7,
        initial_window_loss=2.65,
        final_loss=0.73,
        final_window_loss=0.809,
        final_accuracy=0.58,
        loss_thirds=TINY_THIRDS,
    )


def in_a_line(policy: str = "adaptive", **budgets: int) -> State:
    """The tiny job's completed run, and the monitor's question about it."""
    state = completed(State(policy=policy, budgets=Budgets(**budgets)))
    found = run_verdict_finding(state)
    assert found is not None
    state = update_current_attempt(state, findings=[found])
    return state.model_copy(update={"findings": [found], "rule_status": RuleStatus.IssuesFound})


def probe(rate: float, kind: ResultKind, loss: float | None = None, steps: int = 16) -> Attempt:
    spec = (
        State().run_spec.with_roles({"learning_rate": rate}).model_copy(update={"max_updates": 16})
    )
    summary = f"loss {loss} after 16 updates" if loss is not None else "diverged at update 7"
    return Attempt(
        job_name=f"job-1-probe-{rate:g}".replace(".", "-"),
        spec=spec,
        kind=AttemptKind.probe,
        outcome=JobStatus.Stopped,
        steps_run=steps,
        initial_loss=2.7,
        result=AttemptResult(kind=kind, loss=loss, summary=summary),
    )


def test_the_question_is_asked_of_a_line_and_is_no_flaw() -> None:
    state = in_a_line()
    (found,) = state.findings
    assert found.rule == found.rule_class == STILL_DESCENDING
    assert "1.16x the 0.502 of the middle third (1.813 -> 1.311)" in found.message
    assert "a learning rate far too small, or in a healthy run stopped early" in found.message
    # a question, not a flaw: the same attempt without it is clean
    plain = update_current_attempt(state, findings=[])
    assert run_is_clean(plain)
    # only probes answer it: a run that may not probe is not asked
    no_probes = completed(State(budgets=Budgets(probe_steps=0)))
    assert run_verdict_finding(no_probes) is None and run_is_clean(no_probes)


def test_the_question_is_probed_at_higher_rates_from_a_cold_start() -> None:
    planned = plan_next(in_a_line(), probing=True)
    assert planned.next_action is NextAction.launch_new and planned.planned_change is None
    rates = [p.run_spec.role("learning_rate") for p in planned.probes]
    assert rates == [1.0, 0.316227766017, 3.16227766017]  # finer than a stall's: it learned
    assert "(0.1 too low only if a probe answers the question asked of it)" in (
        planned.probes[0].reason
    )
    assert all(p.strategy == "search_lr_up" for p in planned.probes)
    assert all(p.run_spec.init_checkpoint is None for p in planned.probes)  # cold, as it ran


def test_a_probe_that_reaches_the_final_loss_keeps_the_finding() -> None:
    planned = plan_next(in_a_line(), probing=True)
    probes = [probe(1.0, ResultKind.trained, 0.62), probe(10.0, ResultKind.diverged)]
    settled = settle(planned, probes, "probed ...")
    assert settled is planned  # the finding stands: the best probe is relaunched


def test_a_probe_faster_only_on_its_schedules_ramp_does_not_answer_the_question() -> None:
    # The run at 0.1 held through its whole schedule; a probe at 1.0 reached its final loss
    # in 16 updates, but still on its warmup's ramp, at 0.13 (0.065 held): faster there, its
    # peak still to come (a fine-tuning script's 0.5 answered its run at 0.21 so, went on
    # and diverged at its peak). It answers nothing; the same probe past its ramp does.
    planned = plan_next(in_a_line(), probing=True)
    on_ramp = probe(1.0, ResultKind.trained, 0.62).model_copy(update={"ramp_rate": 0.13})
    settled = settle(planned, [on_ramp, probe(10.0, ResultKind.diverged)], "probed ...")
    assert settled.next_action is NextAction.end and run_is_clean(settled)
    past_it = on_ramp.model_copy(update={"ramp_rate": None})
    assert settle(planned, [past_it], "probed ...") is planned


def test_a_probe_faster_on_its_ramp_answers_where_a_rate_seen_to_hold_lies_above_the_runs() -> None:
    # A OneCycle script at 1/30 of its max_lr: probes of 25 of its ramp's 67 updates. The
    # fastest, 3.16, reached 1.4 on its ramp (not half its rate: not seen to hold), but
    # 0.7 held there, above 0.316, which trained too: the question stands, and 0.316, not
    # 3.16, is relaunched (best). Called clean before, at 0.90 accuracy against 0.96.
    planned = plan_next(in_a_line(), probing=True)
    probes = [
        probe(0.316, ResultKind.trained, 1.9).model_copy(update={"ramp_rate": 0.14}),
        probe(1.0, ResultKind.trained, 1.2).model_copy(update={"ramp_rate": 0.44}),
        probe(3.16, ResultKind.trained, 0.62).model_copy(update={"ramp_rate": 1.4}),
    ]
    attempts = [*planned.history.attempts, *probes]
    planned = planned.model_copy(
        update={"history": planned.history.model_copy(update={"attempts": attempts})}
    )
    held = held_rate(planned.history.attempts)
    assert held == 0.7 and not shown_to_hold(probes[2], held)
    assert settle(planned, probes, "probed ...") is planned  # the finding stands
    chosen = best(probes, held)
    assert chosen is probes[0]
    # No probe above the run's 0.1 at or under what held: nothing answers.
    alone = probes[2:]
    lone = planned.model_copy(
        update={
            "history": planned.history.model_copy(
                update={"attempts": [*planned.history.attempts[:-3], *alone]}
            )
        }
    )
    assert settle(lone, alone, "probed ...").next_action is NextAction.end


def test_no_probe_that_learned_faster_withdraws_the_question() -> None:
    planned = plan_next(in_a_line(), probing=True)
    probes = [
        probe(1.0, ResultKind.trained, 1.35),  # learned, but not to 0.809 in 16 updates
        probe(10.0, ResultKind.diverged),
        probe(100.0, ResultKind.diverged),
    ]
    settled = settle(planned, probes, "probed lr 1: loss 1.35 after 16 updates, ...")
    assert settled.next_action is NextAction.end
    assert settled.rule_status is RuleStatus.NoIssuesFound and settled.findings == []
    attempt = settled.current_attempt
    assert attempt is not None and attempt.findings == []
    assert attempt.result is not None and attempt.result.kind is ResultKind.trained
    assert run_is_clean(settled)
    assert settled.end_reason == (
        f"{CLEAN_END}; asked because the loss still fell in a line when the run ended: 0.58 "
        "in the last third of its steps (1.311 -> 0.731), 1.16x the 0.502 of the middle third "
        "(1.813 -> 1.311), as under a learning rate far too small, or in a healthy run stopped "
        "early: no higher rate learned faster, no probe reached its final loss (0.809) in 16 of "
        "its 64 updates, nor took the loss down 1.5x as far as it did in them (probed lr 1: "
        "loss 1.35 after 16 updates, ...)"
    )


def held_at_half() -> State:
    """The tiny job's run asked at half its length, its job held there (running)."""
    state = in_a_line()
    return update_current_attempt(state, outcome=None, hold_at=32, steps_run=32)


def test_a_run_held_at_half_whose_question_is_withdrawn_goes_on() -> None:
    """Held at half its length, the run is not stopped while it is asked (is_held), and
    when no probe learned faster it goes on (the flow lets its job train on and watches it
    again) instead of ending: its end is judged when it comes."""
    state = held_at_half()
    assert is_held(state)
    assert not is_held(in_a_line())  # completed: nothing waits
    planned = plan_next(state, probing=True)
    assert planned.probes and is_held(planned)
    settled = settle(planned, [probe(1.0, ResultKind.trained, 1.35)], "probed ...")
    assert settled.next_action is NextAction.monitor and settled.end_reason is None
    assert settled.findings == [] and settled.rule_status is RuleStatus.InProgress
    attempt = settled.current_attempt
    assert attempt is not None and attempt.findings == [] and attempt.result is None
    assert attempt.hold_at == 32  # the flow lets it go on (tasks/stop.py: release_held)
    # answered: the finding stands, and the held job is stopped for the best probe
    answered = settle(planned, [probe(1.0, ResultKind.trained, 0.62)], "probed ...")
    assert answered is planned and is_held(answered)
    # a question no probe can ask lets it go on too
    unasked = plan_next(update_current_attempt(held_at_half(), outcome=None), probing=False)
    assert unasked.next_action is NextAction.monitor and unasked.findings == []


def test_a_question_that_cannot_be_probed_is_withdrawn_unasked() -> None:
    # no launch left to act on the answer
    ended = plan_next(in_a_line(), probing=False)
    assert ended.next_action is NextAction.end and run_is_clean(ended)
    assert ended.end_reason == (
        f"{CLEAN_END}; not asked whether its rate held it back: no launch is left to act on "
        "the answer (budgets.max_num_retraining)"
    )
    # a policy that does not probe
    seed = plan_next(in_a_line(policy="seed"), probing=True)
    assert seed.next_action is NextAction.end and run_is_clean(seed)
    assert seed.end_reason is not None and seed.end_reason.endswith("policy 'seed' does not probe")
    # too few probes left for the candidates
    short = plan_next(in_a_line(max_num_probes=2), probing=True)
    assert short.next_action is NextAction.end and run_is_clean(short)
    assert short.end_reason is not None and short.end_reason.endswith(
        "too few probes are left (budgets.max_num_probes 2)"
    )


def test_a_probe_that_learned_faster_over_the_same_updates_keeps_the_finding() -> None:
    """Short of the run's final loss, a probe still answers yes when, over the same first
    updates from the same cold start, it took the loss down 1.5x as far as the run did."""
    planned = plan_next(in_a_line(), probing=True)
    # the run's first 16 updates: 2.7 down by 0.02 each, to 2.4 (the mean of its last 5: 2.44)
    trace = [2.7 - 0.02 * i for i in range(64)]
    planned = update_current_attempt(planned, loss_trace=trace)
    faster = probe(0.316, ResultKind.trained, 2.2)  # down 0.5 against the run's 0.26
    assert settle(planned, [faster], "probed ...") is planned
    slower = probe(0.316, ResultKind.trained, 2.35)  # down 0.35: not 1.5x the run's 0.26
    assert settle(planned, [slower], "probed ...").next_action is NextAction.end
    # a trace shorter than the probe's updates says nothing about them
    short = update_current_attempt(planned, loss_trace=trace[:10])
    assert settle(short, [faster], "probed ...").next_action is NextAction.end
    # nor does a run that began warm: its first updates were not a cold start's
    warm = update_current_attempt(planned, start_step=64)
    assert settle(warm, [faster], "probed ...").next_action is NextAction.end


def settled_early() -> State:
    """The char transformer at 100x its rate (AdamW at 0.1), held at a quarter of its 400
    updates and asked whether it levelled off on a rate's noise floor (its loss 1.64)."""
    spec = State().run_spec.with_roles({"learning_rate": 0.1})
    state = begin_attempt(State(run_spec=spec), "job-1")
    found = Finding(
        rule=SETTLED_EARLY,
        rule_class=SETTLED_EARLY,
        step=99,
        message="the model's loss fell from 2.71 to 1.65 in the first third of its 100 "
        "updates, then levelled off",
    )
    state = update_current_attempt(
        state,
        outcome=None,
        hold_at=100,
        steps_run=100,
        initial_loss=2.71,
        final_window_loss=1.64,
        findings=[found],
    )
    return state.model_copy(update={"findings": [found], "rule_status": RuleStatus.IssuesFound})


def test_a_run_that_levelled_off_early_is_probed_at_lower_rates_and_a_lower_one_answers() -> None:
    """Asked SETTLED_EARLY, the held run is probed at 3.2x, 10x and 32x below its rate,
    from a cold start; a probe that reaches its held loss in its few updates answers (the
    rate was too high: the best probe is relaunched, the bracket closed above at 0.1);
    none does, and the question is withdrawn, the held run going on."""
    state = settled_early()
    assert is_held(state)
    planned = plan_next(state, probing=True)
    rates = [p.run_spec.role("learning_rate") for p in planned.probes]
    assert rates == [0.01, 0.0316227766017, 0.00316227766017]
    assert all(p.strategy == "search_lr_down" for p in planned.probes)
    assert planned.probes[0].reason.endswith(
        "so far too low at <= -, too high at >= 0.1 (0.1 too high only if a probe answers "
        "the question asked of it)"
    ), planned.probes[0].reason
    assert all(p.run_spec.init_checkpoint is None for p in planned.probes)  # cold, as it ran
    held = planned.current_attempt
    assert held is not None and held.result is not None
    assert held.result.kind is ResultKind.diverged  # the bracket's top: a rate too high
    assert (
        held.result.summary == "its rate too high: lower rates beat it (SettledEarly at update 100)"
    )
    answered = settle(planned, [probe(0.01, ResultKind.trained, 1.56)], "probed ...")
    assert answered is planned and is_held(answered)
    slower = [probe(0.01, ResultKind.trained, 1.70), probe(0.00316, ResultKind.trained, 1.9)]
    withdrawn = settle(planned, slower, "probed ...")
    assert withdrawn.next_action is NextAction.monitor and withdrawn.findings == []
    attempt = withdrawn.current_attempt
    assert attempt is not None and attempt.findings == [] and attempt.hold_at == 100
    # its job not held (it ended meanwhile): the run ends clean, saying what was asked
    ended = update_current_attempt(planned, outcome=JobStatus.Completed, hold_at=None)
    said = settle(ended, slower, "probed ...")
    assert said.next_action is NextAction.end and said.end_reason is not None
    assert "then levelled off: no lower rate reached its loss (1.64) in 16 of its 100" in (
        said.end_reason
    ), said.end_reason


def test_the_question_probes_no_rate_past_one_a_launch_of_the_run_failed_at() -> None:
    """The run's first launch, at 1.0, was stopped on its dead units (an Accelerate
    script's, killed by its rate); repaired at 0.1, its run ended in a line and was asked.
    The question probes 3.2x and 32x above 0.1 (10x is 1.0, launched before): 3.16 lies
    past the rate that failed and is no candidate; 0.316 is."""
    state = in_a_line()
    dead = Finding(rule="DyingRelu", rule_class="DyingRelu", step=100, message="dead")
    failed = Attempt(
        job_name="job-0",
        spec=state.run_spec.with_roles({"learning_rate": 1.0}),
        outcome=JobStatus.Stopped,
        steps_run=100,
        findings=[dead],
        result=AttemptResult(kind=ResultKind.flawed, update=100, summary="DyingRelu"),
    )
    history = state.history.model_copy(update={"attempts": [failed, *state.history.attempts]})
    planned = plan_next(state.model_copy(update={"history": history}), probing=True)
    rates = [p.run_spec.role("learning_rate") for p in planned.probes]
    assert rates == [0.316227766017], rates
    # without that launch, the question probes all three (the test above)
    assert len(plan_next(in_a_line(), probing=True).probes) == 3
