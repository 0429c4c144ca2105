"""notify: tell people (apprise), the Prefect UI and its automations what happened to a run."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from remedy.records.messages import final_message, retraining_message
from remedy.records.notifications import send
from remedy.records.publish import publish_attempts, publish_event, publish_report
from remedy.records.verdict import run_is_clean
from remedy.state_schema import State


@task(cache_policy=NO_CACHE)
def notify(title: str, body: str, config_path: str | None = None) -> bool:
    """Send one message; returns whether every target accepted it."""
    return send(title, body, config_path)


@task(cache_policy=NO_CACHE)
def announce(
    state: State,
    run_dir: str,
    event: str,
    notify_config: str | None = None,
    notify_block: str | None = None,
) -> None:
    """An event of the run (issues_found, retraining) for automations; people hear of
    retraining."""
    publish_event(event, state, run_dir)
    if event == "retraining":
        send(*retraining_message(state), notify_config, notify_block)


@task(cache_policy=NO_CACHE)
def announce_end(
    state: State,
    run_dir: str,
    report_dir: str | None,
    notify_config: str | None = None,
    notify_block: str | None = None,
) -> None:
    """The run ended: completed (clean) or gave_up, its attempts and report, the message."""
    publish_event("completed" if run_is_clean(state) else "gave_up", state, run_dir)
    publish_attempts(state, run_dir, report_dir)
    if report_dir is not None:
        publish_report(report_dir, run_dir)
    send(*final_message(state), notify_config, notify_block)
