"""train: launch the job that run_spec describes (the first launch and every relaunch)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.jobs import backend_for
from remedy.records.asked_early import (
    ASKED_ONLY_AT_END,
    epochs_to_hold_by,
    hold_point,
    next_hold_point,
)
from remedy.records.logs import task_logger
from remedy.records.run_folder import job_run_dir, persist, state_path
from remedy.records.verdict import accuracy_unread, run_flaw
from remedy.state_schema import AttemptKind, NextAction, RunSpec, State, load_state
from remedy.state_schema.config_keys import ConfigKeyError, leaves, load_config, named_files
from remedy.state_schema.private import reveal_private
from remedy.state_schema.roles import LENGTH_ROLE
from remedy.state_schema.transitions import (
    begin_attempt,
    end,
    new_job_name,
    retraining_budget_spent,
    update_current_attempt,
)
from remedy.strategies.policies import get_policy
from remedy.tasks.allowed_code import check_allowed, check_run_dir
from remedy.tasks.preflight import preflight
from remedy.tasks.retry import BACKEND_RETRIES


@task(cache_policy=NO_CACHE)
def check_spec(state: State, run_dir: str | None, flow_run_name: str) -> None:
    """The preflight (tasks/preflight.py) of the run_spec a new run will use, before
    anything is created: a run started from the UI, the API or a deployment is refused as
    `remedy run` refuses it, naming the field (the flow run ends Failed). The
    spec is the one open_run will keep: hidden or empty private fields taken from this
    machine's environment. A run folder that holds a state already is a resume or a retry,
    or a start written before the flow (remedy run's, after its preflight; a search's
    candidate, checked before its folder): its spec was checked then. Whatever the way in,
    the run's code and run_dir must be ones this machine allows (allowed_code.py): the given
    state's, and a saved one's it would resume."""
    check_run_dir(run_dir)
    check_allowed(state.run_spec, state.policy)
    saved = state_path(run_dir or job_run_dir(state.run_spec.base_job_name, flow_run_name))
    if saved.exists():
        resumed = load_state(saved)
        check_allowed(resumed.run_spec, resumed.policy)
        return
    preflight(reveal_private(state).run_spec)


@task(cache_policy=NO_CACHE, **BACKEND_RETRIES)
def launch_job(run_dir: str, job_name: str, run_spec: RunSpec) -> None:
    """The backend's launch of a reserved job name; a launch is idempotent per name, so an
    outage retried never starts a second job."""
    backend_for(run_spec.backend, run_dir).launch(job_name, run_spec)


@task(cache_policy=NO_CACHE, **BACKEND_RETRIES)
def continue_job(run_dir: str, job_name: str, run_spec: RunSpec, until: int | None) -> None:
    """The backend's go-on for a probe held at its bound, to its end or to hold again after
    `until` updates (idempotent, as a launch is)."""
    backend_for(run_spec.backend, run_dir).continue_job(job_name, until=until)


def start_job(run_dir: str, state: State) -> None:
    """The current attempt's job: launched, or a held probe's job continued (to the run's
    next hold point where it has one: Attempt.hold_at)."""
    attempt = state.current_attempt
    assert attempt is not None
    if attempt.continues:
        continue_job(run_dir, attempt.job_name, state.run_spec, attempt.hold_at)
    else:
        launch_job(run_dir, attempt.job_name, launched_spec(state))


def launched_spec(state: State) -> RunSpec:
    """The spec the current attempt's job is launched with: the run's, bounded at its hold
    point where it has one (the job holds there, as a probe at its bound, till the flow
    lets it go on or stops it), or told to hold by its epochs once it measured one."""
    attempt = state.current_attempt
    if attempt is not None and attempt.hold_at is not None:
        return state.run_spec.model_copy(update={"max_updates": attempt.hold_at})
    if attempt is not None and attempt.holds_by_its_epochs:
        epochs = epochs_to_hold_by(state.run_spec)
        return state.run_spec.model_copy(update={"hold_by_epochs": epochs})
    return state.run_spec


def hold_for_question(state: State, run_dir: str) -> dict[str, Any]:
    """Where a new launch first holds to be asked whether its model has begun to learn
    (records/asked_early.py): at hold_point where its length is known before it runs (an
    eighth, a quarter or half of it; let go on, it holds at the next: tasks/stop.py),
    else, once its job measured an epoch, at the first of these points past it
    (epochs_to_hold_by); where it can hold at all (can_hold). The attempt's fields: none
    where it does not hold."""
    spec = state.run_spec
    if not can_hold(state, run_dir):
        return {}
    if (point := hold_point(spec)) is not None:
        return {"hold_at": point}
    return {"holds_by_its_epochs": True} if epochs_to_hold_by(spec) is not None else {}


def hold_after_probe(state: State, run_dir: str, probe_job: str) -> dict[str, Any]:
    """Where a probe's job that goes on as the run holds to be asked, as a launch of its
    spec would: at the run's next hold point past the probe's updates (a cold start's
    eighth, quarter or half: next_hold_point). A probe from a checkpoint is a warm start,
    never held; nor is one whose length is counted in epochs only its job measures (a
    probe records no epoch: Attempt.epoch_updates is a held launch's). The attempt's
    fields: none where it does not hold (past half, or a length not known)."""
    probe = next(
        (
            a
            for a in reversed(state.history.attempts)
            if a.kind is AttemptKind.probe and a.job_name == probe_job
        ),
        None,
    )
    if probe is None or not can_hold(state, run_dir):
        return {}
    point = next_hold_point(state.run_spec, probe.steps_run, probe.epoch_updates)
    return {"hold_at": point} if point is not None else {}


def can_hold(state: State, run_dir: str) -> bool:
    """A launch of the run may hold to be asked: its policy probes, the run may spend
    probes, and its backend can continue a held job and has room for a probe beside it
    (JobBackend.room_beside: probes that cannot all hold stop at their bound, so one at a
    time gets through)."""
    if not get_policy(state.policy).probes or state.budgets.probe_steps <= 0:
        return False
    backend = backend_for(state.run_spec.backend, run_dir)
    return backend.can_continue and backend.room_beside(state.run_spec, 1)


@task(cache_policy=NO_CACHE)
def train(state: State, run_dir: str) -> State:
    logger = task_logger()
    held = state.planned_change.continue_job if state.planned_change else None
    if retraining_budget_spent(state):
        if held:  # the probe that would have gone on as the run
            backend_for(state.run_spec.backend, run_dir).stop(held)
        spent = f"max_num_retraining ({state.budgets.max_num_retraining}) reached"
        flaw = run_flaw(state) if state.current_attempt else None  # what it left unrepaired
        return end(state, f"{spent}; the last attempt: {flaw}" if flaw else spent)
    job_name = held or new_job_name(state)
    state = begin_attempt(state, job_name)
    if held:  # a probe's job goes on as the run: asked at its next hold as a launch is
        state = update_current_attempt(state, **hold_after_probe(state, run_dir, held))
    else:
        state = update_current_attempt(state, **hold_for_question(state, run_dir))
    # Persist the reservation before launching: a resumed flow then adopts this job
    # (launch is idempotent per name) instead of launching a second one.
    persist(run_dir, state, "launching")
    start_job(run_dir, state)
    attempt = state.current_attempt
    why = f" ({attempt.strategy})" if attempt and attempt.strategy else ""
    how = "went on from the probe's job" if held else "launched"
    logger.info("%s for attempt %d%s: job %s", how, state.history.num_retraining, why, job_name)
    if state.history.num_retraining == 1:
        spec = state.run_spec
        warnings = (shared_outputs(spec), accuracy_unread(spec), unknown_length(spec))
        for said in (*warnings, unmapped_rate(spec)):
            if said is not None:
                logger.warning(said)
    return state


def shared_outputs(spec: RunSpec) -> str | None:
    """What the first attempt's log says of a script that gets no folder of its own."""
    if spec.writes_into_job_folder:
        return None
    return (
        "outputs may be shared: the script gets no output_dir role, so whatever it writes "
        "outside SM_MODEL_DIR / REMEDY_OUTPUT_DIR (e.g. its own --out-dir) every attempt "
        "writes to the same place, a later one over an earlier one's; map the flag of its "
        'output folder: "hyperparameter_roles": {"output_dir": "<flag>"} (docs/job-contract.md)'
    )


LENGTH_WORDS = ("step", "iter", "epoch")  # in the names of flags that set a job's length


def unknown_length(spec: RunSpec) -> str | None:
    """What the first attempt's log says of a script whose length remedy cannot know: it
    is asked whether its model learns only at its end, not at an eighth, a quarter and
    half of it (a rate far too small costs a whole launch). Names the flags that look
    like a length."""
    roles = spec.hyperparameter_roles
    if spec.job.reads_fields or LENGTH_ROLE in roles or "num_epochs" in roles:
        return None
    likely = [
        flag
        for flag, value in settings_in_sight(spec).items()
        if isinstance(value, int)
        and not isinstance(value, bool)  # a switch such as "log_steps": true
        and any(word in flag.lower() for word in LENGTH_WORDS)
    ]
    hint = f" ({', '.join(likely)}?)" if likely else ""
    epochs = bool(likely) and all("epoch" in flag.lower() for flag in likely)
    role = "num_epochs" if epochs else LENGTH_ROLE
    return (
        "its length is unknown: no flag is mapped to the max_steps role (the updates it "
        f"runs) or num_epochs, so {ASKED_ONLY_AT_END}; map the flag{hint}: "
        f'"hyperparameter_roles": {{"{role}": "<flag>"}} (docs/job-contract.md, "Roles")'
    )


def looks_like_a_rate(flag: str) -> bool:
    """A flag named like a learning rate: lr, max-lr, learning_rate, LearningRate."""
    words = re.split(r"[-_.]", flag.lower())
    return "lr" in words or "learning" in flag.lower()


def unmapped_rate(spec: RunSpec) -> str | None:
    """What the first attempt's log says of a script that maps no flag to the
    learning_rate role: the repairs of a divergence, a stall and a plateau begin by
    searching the rate, so a finding would end the run with little or nothing tried (a
    script taking its rate from a config file alone ended "no strategy left" after its
    first launch). Names the flags that look like a rate."""
    if spec.job.reads_fields or "learning_rate" in spec.hyperparameter_roles:
        return None
    mapped = ", ".join(sorted(spec.hyperparameter_roles)) or "none"
    likely = [
        flag
        for flag, value in settings_in_sight(spec).items()
        if isinstance(value, int | float)
        and not isinstance(value, bool)
        and looks_like_a_rate(flag)
    ]
    hint = f" ({', '.join(likely)}?)" if likely else ""
    return (
        "no flag plays the learning_rate role: the repairs of a divergence, a stall and a "
        "plateau begin by searching the rate, so a finding may end the run with little or "
        f"nothing tried (roles mapped: {mapped}); map the flag of its rate{hint}: "
        '"hyperparameter_roles": {"learning_rate": "<flag>"}, or the key of a config file '
        'the command line names, as FILE:key (docs/job-contract.md, "Keys of a config file")'
    )


def settings_in_sight(spec: RunSpec) -> dict[str, object]:
    """Where a hint looks for the setting of a rate or a length: the script's flags, then
    the settings of the config files its command line names, as FILE:key (files that
    cannot be read are passed over: the hint is no check)."""
    found: dict[str, object] = dict(spec.script_hyperparameters)
    values = [value for value in spec.script_hyperparameters.values() if isinstance(value, str)]
    code_dir = Path(spec.source_dir or ".")
    for file in named_files([*spec.arguments, *values]):
        try:
            tree = load_config(code_dir / file)
        except ConfigKeyError:
            continue
        for key, value in leaves(tree):
            found.setdefault(f"{file}:{key}", value)
    return found


@task(cache_policy=NO_CACHE)
def ensure_launched(state: State, run_dir: str) -> State:
    """On resume: launch the reserved job only if the crash came before its launch."""
    job_name = state.history.latest_job_name
    if state.next_action is NextAction.monitor and job_name:
        backend = backend_for(state.run_spec.backend, run_dir)
        attempt = state.current_attempt
        if attempt is not None and attempt.continues:
            continue_job(run_dir, job_name, state.run_spec, attempt.hold_at)  # said once more
        elif not backend.exists(job_name):
            task_logger().info("resuming: job %s was reserved, launching it now", job_name)
            launch_job(run_dir, job_name, launched_spec(state))
    return state
