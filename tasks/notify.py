"""notify: tell people (apprise), the Prefect UI and its automations what happened to a run."""

from __future__ import annotations

import os

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.outlets.messages import Message, final_message, redact, retraining_message
from remedy.outlets.notifications import deliver, notifier
from remedy.outlets.publish import (
    flow_run_url,
    publish_attempts,
    publish_event,
    publish_report,
    report_url,
)
from remedy.outlets.report_store import REPORTS_S3_ENV
from remedy.records.logs import task_logger
from remedy.records.verdict import run_is_clean
from remedy.state_schema import State
from remedy.strategies.still_descending import is_question
from remedy.tasks.report_store import store_report


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 15])
def deliver_to(
    message: Message,
    target: int,
    config_path: str | None = None,
    secret_block: str | None = None,
) -> None:
    """One target, named by its position (its URL is a secret): a refusal or an outage
    raises, so Prefect retries it without sending again to the targets that accepted."""
    deliver(message, target, config_path, secret_block)


def tell(message: Message, config_path: str | None = None, secret_block: str | None = None) -> bool:
    """Send `message` to every target, each retried on its own, with a link to this flow
    run's page when the UI's URL is known; whether every target accepted it. Never raises:
    a notification must never fail the flow."""
    logger = task_logger()
    try:
        targets = notifier(config_path, secret_block)
    except Exception as error:  # names a target by position, never by URL
        logger.warning("notification failed: %s", error)
        return False
    if targets is None:
        return False
    message = message.with_links(("Flow run", flow_run_url()))
    delivered = True
    for target in range(len(targets)):
        state = deliver_to(message, target, config_path, secret_block, return_state=True)
        if not state.is_completed():
            logger.warning(
                "notification target %d did not accept %r (retried)", target + 1, message.title
            )
            delivered = False
    return delivered


@task(cache_policy=NO_CACHE)
def notify(
    title: str, body: str, config_path: str | None = None, secret_block: str | None = None
) -> bool:
    """Send one message; returns whether every target accepted it."""
    return tell(Message(title, body.splitlines()), config_path, secret_block)


@task(cache_policy=NO_CACHE)
def announce(
    state: State,
    run_dir: str,
    event: str,
    notify_config: str | None = None,
    notify_block: str | None = None,
    tell_people: bool = True,
) -> None:
    """An event of the run (issues_found, retraining) for automations; people hear of
    retraining (unless tell_people is off: a search's candidate). The verdict's open
    question is no issue until its probes confirm it: try_probes publishes it then."""
    if event == "issues_found" and is_question(state.findings):
        return
    publish_event(event, state, run_dir)
    if event == "retraining" and tell_people:
        tell(retraining_message(state), notify_config, notify_block)


@task(cache_policy=NO_CACHE)
def announce_end(
    state: State,
    run_dir: str,
    report_dir: str | None,
    notify_config: str | None = None,
    notify_block: str | None = None,
    tell_people: bool = True,
) -> None:
    """The run ended: completed (clean) or gave_up, its attempts and report, the message
    (unless tell_people is off: a search's candidate)."""
    publish_event("completed" if run_is_clean(state) else "gave_up", state, run_dir)
    report = None if report_dir is None else report_location(report_dir, run_dir)
    publish_attempts(state, run_dir, report_dir, report)
    if report_dir is not None:
        publish_report(report_dir, run_dir, report)
    if report and not report.startswith(("http://", "https://")):
        report = None  # a file:// URL opens on no phone
    if tell_people:
        message = final_message(state).with_links(("Report", report))
        tell(message, notify_config, notify_block)


def report_location(report_dir: str, run_dir: str) -> str:
    """Where the report opens: the object store's link when REMEDY_REPORTS_S3 is set and
    the upload worked (retried), else report_url (a report server's, or file://)."""
    if not os.environ.get(REPORTS_S3_ENV):
        return report_url(report_dir)
    stored = store_report(report_dir, run_dir, return_state=True)
    if not stored.is_completed():
        task_logger().warning(
            "report not uploaded to %s (%s): its path is linked instead",
            REPORTS_S3_ENV,
            redact(str(stored.message or stored.name)),
        )
        return report_url(report_dir)
    return stored.result() or report_url(report_dir)
