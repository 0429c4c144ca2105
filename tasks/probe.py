"""probe: try the plan's candidate fixes briefly, side by side, and keep the best.

Each candidate is a job of its own (attempt kind "probe"), launched through the run's
backend, watched by the same rules, and stopped once it has run its updates (probe_length:
Budgets.probe_steps, or a quarter of the job's own length where known), or earlier by a
rule. Probes run concurrently, one task each, as far as the backend has room (the local
backend runs them as parallel processes, sharing GPUs by its leases). What they taught
joins the history either way: a rate that diverged or stalled in a probe closes the bracket
as a full launch would.
"""

from __future__ import annotations

import time

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.decisions.observe import observe
from remedy.decisions.plan import probes_left
from remedy.jobs import JobSnapshot, backend_for
from remedy.outlets.publish import publish_event
from remedy.records.logs import task_logger
from remedy.records.run_folder import persist
from remedy.state_schema import (
    Attempt,
    AttemptKind,
    AttemptResult,
    JobStatus,
    ProbeCandidate,
    RunSpec,
    State,
)
from remedy.state_schema.transitions import new_job_name, now
from remedy.strategies.outcomes import digest, step_losses
from remedy.strategies.probes import (
    FARTHER_ROUNDS,
    MIN_PROBE_STEPS,
    MOST_HELD,
    between,
    choose_best,
    farther,
    outpaced,
    past_a_slower_rate,
    probe_attempt,
    probe_length,
    probed_before,
    summary,
    window_loss,
    window_spread,
    with_probes,
)
from remedy.strategies.still_descending import is_question, settle
from remedy.tasks.plan import plan

JOB_NAME_LIMIT = 63  # the cloud service's, and our folder names'


def probe_job_names(state: State) -> list[str]:
    base = new_job_name(state)[: JOB_NAME_LIMIT - len("-probe-99")].rstrip("-")
    return [f"{base}-probe-{k}" for k in range(1, len(state.probes) + 1)]


def bounded(candidate: ProbeCandidate, steps: int) -> RunSpec:
    """The candidate's spec as a probe runs it: stopped by the job itself after `steps`."""
    return candidate.run_spec.model_copy(update={"max_updates": steps})


def steps_run(snapshot: JobSnapshot) -> int:
    return snapshot.progress.steps_run if snapshot.progress else 0


@task(cache_policy=NO_CACHE, task_run_name="probe-{job_name}")
def probe(
    candidate: ProbeCandidate,
    job_name: str,
    run_dir: str,
    steps: int,
    poll_interval_s: float,
    rung: int | None = None,
) -> Attempt:
    """Launch one candidate, bounded to `steps` updates (run_spec.max_updates: the job stops
    itself there, even if this flow is gone), or held at its `rung` first where the round
    has one (probe_on takes it on from there); watch it until a rule fires or it ends (or,
    from a job that keeps no bound, has run its updates: then stop it); its attempt
    record, judged by strategies/probes.py."""
    backend = backend_for(candidate.run_spec.backend, run_dir)
    attempt = probe_attempt(candidate, job_name).model_copy(
        update={"started_at": now(), "spec": bounded(candidate, steps)}
    )
    backend.launch(job_name, bounded(candidate, rung or steps))
    return watched(attempt, run_dir, rung or steps, poll_interval_s)


@task(cache_policy=NO_CACHE, task_run_name="probe-{attempt.job_name}-on")
def probe_on(attempt: Attempt, run_dir: str, steps: int, poll_interval_s: float) -> Attempt:
    """A probe held at its rung, not outpaced there: on to its `steps`, watched as before."""
    backend_for(attempt.spec.backend, run_dir).continue_job(attempt.job_name, until=steps)
    return watched(attempt, run_dir, steps, poll_interval_s)


def watched(attempt: Attempt, run_dir: str, steps: int, poll_interval_s: float) -> Attempt:
    """Watch a launched probe to `steps` updates, a finding or its end; its record then."""
    job_name = attempt.job_name
    backend = backend_for(attempt.spec.backend, run_dir)
    while True:
        snapshot = backend.describe(job_name)
        seen = observe(snapshot)
        if seen.findings or snapshot.is_final or steps_run(snapshot) >= steps:
            break
        time.sleep(poll_interval_s)
    # At its bound a job the backend can continue holds: the one kept trains on as the run.
    # Only where every probe of the plan (and a run held at half) can hold at once: a held
    # job keeps its GPUs, and a probe waiting for one would wait on the flow.
    held = (
        backend.can_continue
        and not (seen.findings or snapshot.is_final)
        and steps_run(snapshot) >= steps
        and backend.room_beside(attempt.spec, MOST_HELD)
    )
    if not snapshot.is_final and not held:
        backend.stop(job_name)
    ended = backend.describe(job_name)
    losses = step_losses(records := backend.metrics(job_name))
    attempt = attempt.model_copy(
        update={
            "findings": seen.findings,
            "steps_run": steps_run(ended),
            "start_step": ended.progress.start_step if ended.progress else 0,
            "initial_loss": losses[0] if losses else None,
            "final_loss": window_loss(losses),
            "final_loss_spread": window_spread(losses),
            "outcome": ended.status,
            "failure_reason": ended.failure_reason,
            "ended_at": ended.ended or now(),
            "curve": backend.metrics_location(job_name),
            "held": held,
        }
    )
    return attempt.model_copy(update=digest(attempt, records))


def try_probes(state: State, run_dir: str, poll_interval_s: float) -> State:
    """Run the plan's probes, keep them in the history and the best one's spec as the
    next launch's; while the best is the farthest rate of a search (strategies/probes.py,
    farther), probe further that way first, and where a decade above it was outpaced,
    its middle (between). When none trained, plan again without probes,
    with what they taught."""
    judged: list[Attempt] = []  # every round's new probes, judged
    reused: list[Attempt] = []  # earlier probes standing for a candidate
    for round_number in range(FARTHER_ROUNDS + 1):
        new, stood = run_round(state, run_dir, poll_interval_s)
        state, new = with_probes(state, new)
        judged, reused = [*judged, *new], [*reused, *stood]
        if round_number == FARTHER_ROUNDS:
            break
        further = farther(state, [*judged, *reused])
        said = "the best probe was the farthest rate: probing further that way"
        if not further:
            further = between(state, [*judged, *reused])
            said = "a decade above the best probe was outpaced: probing its middle"
        if not further or probes_left(state) < len(further):
            break
        task_logger().info(said)
        state = state.model_copy(update={"probes": further})
    # The verdict's questions are answered here: no probe that answered (a higher rate
    # that learned faster, a lower one that reached a levelled loss) ends the run clean, or
    # lets a held run go on.
    asked = is_question(state.findings)
    state = settle(state, [*judged, *reused], summary(judged, None, reused))
    if asked and not is_question(state.findings):  # withdrawn: the run ends, or goes on
        said = state.end_reason or "the held run goes on"
        task_logger().info("no probe answered the verdict's question: %s", said)
        state = stop_held(state, judged, run_dir, keep=None)
        persist(run_dir, state, "probed")
        return state
    if is_question(state.findings):  # it stands: now it is an issue (tasks/notify.announce)
        publish_event("issues_found", state, run_dir)
    state = choose_best(state, judged, reused)
    planned = state.planned_change
    state = stop_held(state, judged, run_dir, keep=planned.continue_job if planned else None)
    persist(run_dir, state, "probed")
    if state.planned_change is None:
        task_logger().info("no probe trained: planning again with what they taught")
        state = plan(state, run_dir, probing=False)
    return state


def stop_held(state: State, probes: list[Attempt], run_dir: str, keep: str | None) -> State:
    """Stop the probes that hold at their bound, but the one the next run goes on from; the
    history records how each ended (Stopped), not the InProgress it was judged in."""
    ended: dict[str, JobStatus] = {}
    for held in [p for p in probes if p.held and p.job_name != keep]:
        backend = backend_for(held.spec.backend, run_dir)
        backend.stop(held.job_name)
        ended[held.job_name] = backend.describe(held.job_name).status
    if keep is not None:
        task_logger().info("the best probe, %s, trains on as the next run", keep)
    attempts = [
        a.model_copy(update={"outcome": ended[a.job_name]})
        if a.kind is AttemptKind.probe and a.job_name in ended
        else a
        for a in state.history.attempts
    ]
    return state.model_copy(
        update={"history": state.history.model_copy(update={"attempts": attempts})}
    )


def run_round(
    state: State, run_dir: str, poll_interval_s: float
) -> tuple[list[Attempt], list[Attempt]]:
    """The state's probes run side by side: (the new probes' records, earlier probes of
    the same spec, start and bound, whose results stand). Where the round has a rung
    (rung_of), every probe holds there first; one clearly outpaced there is stopped
    (strategies/probes.py: outpaced), the others go on to their bound."""
    steps = probe_length(state)
    new, reused = [], []
    for candidate, name in zip(state.probes, probe_job_names(state), strict=True):
        earlier = probed_before(state, bounded(candidate, steps))
        if earlier is not None:
            reused.append(earlier)  # the same spec, start and bound: it would only repeat
        else:
            new.append((candidate, name))
    for candidate, name in list(new):
        if (why := past_a_slower_rate(candidate.run_spec, reused)) is not None:
            new.remove((candidate, name))
            task_logger().info("not probed: %s", why)
    before = f"{len(reused)} probed before, their results standing" if reused else ""
    if new:
        count = f"{len(new)} candidate{'s' if len(new) > 1 else ''}"
        said = ", ".join(c.reason for c, _ in new)
        task_logger().info("probing %s: %s%s", count, said, f" (and {before})" if before else "")
    else:
        task_logger().info("nothing new to probe: %s", before or "no candidate left")
    rung = rung_of(state, run_dir, steps, len(new))
    futures = [probe.submit(c, name, run_dir, steps, poll_interval_s, rung) for c, name in new]
    probes = [future.result() for future in futures]
    if rung is not None:
        probes = past_the_rung(probes, run_dir, rung, steps, poll_interval_s)
    return probes, reused


def rung_of(state: State, run_dir: str, steps: int, count: int) -> int | None:
    """Where this round's probes hold to be compared (half their updates), or None: a
    round of one probe, a rung under MIN_PROBE_STEPS, or a backend that cannot hold them
    all (every probe of the round holds there at once)."""
    rung = steps // 2
    backend = backend_for(state.run_spec.backend, run_dir)
    if count < 2 or rung < MIN_PROBE_STEPS or not backend.can_continue:
        return None
    return rung if backend.room_beside(state.run_spec, MOST_HELD) else None


def past_the_rung(
    probes: list[Attempt], run_dir: str, rung: int, steps: int, poll_interval_s: float
) -> list[Attempt]:
    """The probes held at their rung: the outpaced ones stopped there (their result says
    by whom), the others on to `steps`. A probe a rule stopped before the rung is done."""
    at_rung = {p.job_name: p for p in probes if p.held and p.steps_run >= rung}
    traces = {
        name: step_losses(backend_for(p.spec.backend, run_dir).metrics(name))[:rung]
        for name, p in at_rung.items()
    }
    lost = outpaced(list(at_rung.values()), traces)
    going_on = {
        name: probe_on.submit(p, run_dir, steps, poll_interval_s)
        for name, p in at_rung.items()
        if name not in lost
    }
    # the outpaced stopped now, not once the others are done: a held job keeps its devices
    stopped = {name: stopped_at_rung(at_rung[name], run_dir, lost[name]) for name in lost}
    return [
        going_on[p.job_name].result() if p.job_name in going_on else stopped.get(p.job_name, p)
        for p in probes
    ]


def stopped_at_rung(attempt: Attempt, run_dir: str, result: AttemptResult) -> Attempt:
    """An outpaced probe stopped where it held: not held any more, its result the rung's."""
    backend = backend_for(attempt.spec.backend, run_dir)
    backend.stop(attempt.job_name)
    ended = backend.describe(attempt.job_name)
    task_logger().info("%s: %s", attempt.job_name, result.summary)
    return attempt.model_copy(
        update={"held": False, "outcome": ended.status, "result": result, "ended_at": now()}
    )
