"""Notifications through apprise to a real HTTP receiver on loopback."""

from __future__ import annotations

import email
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect import flow
from prefect.runtime import flow_run

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.notifications import NOTIFY_SECRET_ENV, NOTIFY_URLS_ENV, notifier
from remedy.state_schema import (
    Budgets,
    Finding,
    JobStatus,
    Payload,
    PlannedChange,
    RunSpec,
    State,
    exploding_tensor_rule,
    save_state,
)
from remedy.state_schema.transitions import begin_attempt, end, update_current_attempt
from remedy.tasks.leaderboard import publish_leaderboard
from remedy.tasks.notify import announce, notify
from tests.flows.specs import tiny_spec
from tests.helpers.receiver import Receiver
from tests.state_schema.seed_payload import SEED_FINAL_PAYLOAD


def test_message_reaches_a_json_webhook(prefect_api_url: str, receiver: str, monkeypatch) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, receiver)
    assert notify.fn("remedy: retraining", "Found: ExplodingTensor") is True
    assert Receiver.received[0]["title"] == "remedy: retraining"
    assert "ExplodingTensor" in Receiver.received[0]["message"]


def test_apprise_config_file(prefect_api_url: str, receiver: str, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(NOTIFY_URLS_ENV, raising=False)
    config = tmp_path / "notify.txt"
    config.write_text(receiver + "\n")
    assert notify.fn("t", "b", config_path=str(config)) is True
    assert len(Receiver.received) == 1


@pytest.mark.slow
def test_unreachable_target_is_logged_and_never_fails(
    prefect_api_url: str, monkeypatch, caplog
) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, "json://127.0.0.1:9/nothing-listens")
    assert notify.fn("remedy: done", "b") is False
    assert "did not accept 'remedy: done' (retried)" in caplog.text


def test_no_targets_sends_nothing(monkeypatch) -> None:
    monkeypatch.delenv(NOTIFY_URLS_ENV, raising=False)
    assert notifier() is None
    assert notify.fn("t", "b") is False


def test_bad_url_is_named_by_position_not_content(monkeypatch) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, "json://127.0.0.1:1/ok notaurl-secret123")
    with pytest.raises(ValueError, match="entry 2") as error:
        notifier()
    assert "secret123" not in str(error.value)


@pytest.fixture
def smtp_receiver() -> Iterator[tuple[int, list[str]]]:
    from aiosmtpd.controller import Controller

    received: list[str] = []

    class Handler:
        async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802
            received.append(envelope.content.decode())
            return "250 OK"

    with socket.socket() as probe:  # a free port: the controller checks it can connect
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    yield port, received
    controller.stop()


def test_email_reaches_a_real_smtp_server(prefect_api_url: str, smtp_receiver, monkeypatch) -> None:
    port, received = smtp_receiver
    url = (
        f"mailto://remedy@example.com?smtp=127.0.0.1&port={port}&mode=insecure"
        "&from=remedy@example.com&to=ml-team@example.com"
    )
    monkeypatch.setenv(NOTIFY_URLS_ENV, url)
    assert notify.fn("remedy: run completed", "Attempts: 7; final accuracy 0.998.") is True
    assert len(received) == 1
    assert "Subject: remedy: run completed" in received[0]
    assert "ml-team@example.com" in received[0] and "final accuracy 0.998" in received[0]


def test_targets_from_a_prefect_secret_block(
    prefect_api_url: str, receiver: str, monkeypatch
) -> None:
    from prefect.blocks.system import Secret

    Secret(value=receiver).save("remedy-notify-test", overwrite=True)
    monkeypatch.delenv(NOTIFY_URLS_ENV, raising=False)
    monkeypatch.setenv(NOTIFY_SECRET_ENV, "remedy-notify-test")
    assert notify.fn("remedy: retraining", "from the block") is True
    assert Receiver.received[-1]["message"] == "from the block"
    monkeypatch.setenv(NOTIFY_SECRET_ENV, "no-such-block")
    with pytest.raises(ValueError, match="no-such-block"):
        notifier()
    # the run form's settings.notify_block names the block instead of the environment
    monkeypatch.delenv(NOTIFY_SECRET_ENV)
    assert notify.fn("remedy: retraining", "named in the form", None, "remedy-notify-test") is True
    assert Receiver.received[-1]["message"] == "named in the form"


def test_an_outage_is_retried_without_sending_twice_to_the_others(
    prefect_api_url: str, receiver: str, monkeypatch
) -> None:
    """Two targets; the first answers 503 once: delivery to it is retried (the task's
    retries), and the second, which accepted at once, gets the message once."""
    Receiver.refuse = {"/flaky": 1}
    flaky, steady = receiver.replace("/hook", "/flaky"), receiver.replace("/hook", "/steady")
    monkeypatch.setenv(NOTIFY_URLS_ENV, f"{flaky} {steady}")
    assert notify("remedy: retraining", "ExplodingTensor found.") is True
    assert sorted(message["path"] for message in Receiver.received) == ["/flaky", "/steady"]
    assert Receiver.refuse == {"/flaky": 0}


def a_run_that_found_an_issue() -> State:
    """The seed payload's run, its latest attempt stopped by a finding without a tensor
    name (the NaN guard's), then planned."""
    state = Payload.model_validate(SEED_FINAL_PAYLOAD).state
    state = begin_attempt(state, "complex-resnet-model-2021-Jan-27-06h-45m-19")
    finding = Finding(rule="NonFiniteGradient", step=3, tensor=None)
    state = update_current_attempt(state, findings=[finding], outcome=JobStatus.Stopped)
    change = PlannedChange(strategy="lower_lr", reason="Halve the learning rate (0.1 -> 0.05)")
    return state.model_copy(update={"findings": [finding], "planned_change": change})


def test_messages_read_well_on_a_phone_and_link_the_flow_run(
    prefect_api_url: str, receiver: str, smtp_receiver, monkeypatch
) -> None:
    """A plain-text webhook gets one line per attempt, a markdown one a table, mail an HTML
    table; the first line is a complete sentence with no 'None', and the message links
    the flow run's page in the UI of the session's server."""
    port, mails = smtp_receiver
    mail = (
        f"mailto://remedy@example.com?smtp=127.0.0.1&port={port}&mode=insecure"
        "&from=remedy@example.com&to=ml-team@example.com"
    )
    text_hook = receiver.replace("/hook", "/text")
    markdown_hook = receiver.replace("/hook", "/markdown") + "?format=markdown"
    monkeypatch.setenv(NOTIFY_URLS_ENV, f"{text_hook} {markdown_hook} {mail}")
    state = a_run_that_found_an_issue()

    @flow(name="notify-probe")
    def probe() -> str:
        announce(state, "/tmp/notify-probe", "retraining")
        return str(flow_run.id)

    flow_run_id = probe()
    link = f"{prefect_api_url.removesuffix('/api')}/runs/flow-run/{flow_run_id}"
    by_path = {message["path"]: message for message in Receiver.received}

    text = by_path["/text"]["message"]
    first = text.splitlines()[0]
    assert first == (
        "Found NonFiniteGradient @ step 3 in attempt 8 of complex-resnet-model "
        "(job complex-resnet-model-2021-Jan-27-06h-45m-19)."
    )
    assert "None" not in text and "|" not in text
    assert (
        "1. initial: warmup_lr 0.003125, lr 0.1, bn 1; 0 steps; NonFiniteGradient @ step 3; Stopped"
        in text
    )
    assert text.splitlines()[-1] == f"Flow run: {link}"

    markdown = by_path["/markdown"]["message"]
    assert markdown.splitlines()[0] == first
    assert "| # | strategy | warmup_lr | lr | bn | steps | finding | outcome |" in markdown
    assert f"[Flow run]({link})" in markdown

    (mail_text,) = mails
    parts = list(email.message_from_string(mail_text).walk())
    (html,) = [
        p.get_payload(decode=True).decode() for p in parts if p.get_content_type() == "text/html"
    ]
    assert "<table>" in html and "<td>NonFiniteGradient @ step 3</td>" in html
    assert f'<a href="{link}">Flow run</a>' in html
    # the mail's plain-text part reads as the plain-text target: a line per attempt, the URL
    (plain,) = [
        p.get_payload(decode=True).decode() for p in parts if p.get_content_type() == "text/plain"
    ]
    assert plain.replace("\r\n", "\n") == text  # mail lines end in CRLF


def candidate(run_dir: Path, name: str, loss: float, accuracy: float, reason: str) -> str:
    """A candidate's run folder: one attempt that completed with `loss` (from 2.3) and
    `accuracy`, and its end."""
    state = State(run_spec=RunSpec(base_job_name=name))
    state = begin_attempt(state, f"{name}-1")
    done = {"outcome": JobStatus.Completed, "steps_run": 40, "initial_loss": 2.3}
    state = update_current_attempt(state, **done, final_loss=loss, final_accuracy=accuracy)
    save_state(run_dir / "state.json", end(state, reason))
    return str(run_dir)


def test_the_search_tells_its_leaderboard_as_the_runs_tell_theirs(
    prefect_api_url: str, receiver: str, smtp_receiver, tmp_path: Path, monkeypatch
) -> None:
    """The search's end goes the remediation messages' way: a sentence first, a line per
    candidate to plain text, a table to markdown and (as HTML) to mail, a link to the
    search's flow run; a target's outage is retried."""
    port, mails = smtp_receiver
    mail = (
        f"mailto://remedy@example.com?smtp=127.0.0.1&port={port}&mode=insecure"
        "&from=remedy@example.com&to=ml-team@example.com"
    )
    text_hook = receiver.replace("/hook", "/text")
    markdown_hook = receiver.replace("/hook", "/markdown") + "?format=markdown"
    Receiver.refuse = {"/text": 1}
    monkeypatch.setenv(NOTIFY_URLS_ENV, f"{text_hook} {markdown_hook} {mail}")
    candidates = {
        1: (candidate(tmp_path / "c1", "c1", 2.29, 0.1, "max_num_retraining (0) reached"), {}),
        2: (candidate(tmp_path / "c2", "c2", 0.4, 0.875, "completed: all good"), {}),
    }

    @flow(name="search-probe")
    def probe() -> str:
        publish_leaderboard(str(tmp_path), candidates)
        return str(flow_run.id)

    link = f"{prefect_api_url.removesuffix('/api')}/runs/flow-run/{probe()}"
    by_path = {message["path"]: message for message in Receiver.received}
    assert Receiver.refuse == {"/text": 0}  # refused once, delivered on the retry

    text = by_path["/text"]["message"]
    assert by_path["/text"]["title"] == "remedy: search finished"
    assert text.splitlines()[:2] == [
        f"Search {tmp_path.name} finished: candidate 2 (elu, bn 0, depth 20) is best with "
        "accuracy 0.875.",
        "2 candidates: 1 clean, 1 failed.",
    ]
    assert "|" not in text and "Candidate 1 (failed): depth 20," in text
    assert text.splitlines()[-2].endswith("why max_num_retraining (0) reached")
    assert text.splitlines()[-1] == f"Flow run: {link}"

    markdown = by_path["/markdown"]["message"]
    assert "| candidate | depth | activation |" in markdown and f"[Flow run]({link})" in markdown

    (mail_text,) = mails
    parts = email.message_from_string(mail_text).walk()
    (html,) = [
        p.get_payload(decode=True).decode() for p in parts if p.get_content_type() == "text/html"
    ]
    assert "<table>" in html and "<td>0.875</td>" in html
    assert f'<a href="{link}">Flow run</a>' in html


@pytest.mark.slow
def test_a_spent_budget_sends_no_retraining_message(
    prefect_api_url: str, receiver: str, tmp_path: Path, monkeypatch
) -> None:
    """A real explosion with one launch allowed: the policy plans a relaunch, but nothing
    will be retrained, so people hear only that the run gave up."""
    monkeypatch.setenv(NOTIFY_URLS_ENV, receiver)
    spec = tiny_spec(
        warmup_learning_rate=0.003125, nan_guard="off", rules=[exploding_tensor_rule()]
    )
    flow_state = remediate(
        state=State(run_spec=spec, policy="seed", budgets=Budgets(max_num_retraining=1)),
        run_dir=str(tmp_path),
        settings=RemediateSettings(poll_interval_s=0.5, report=False),
        return_state=True,
    )
    final = flow_state.result(raise_on_failure=False)
    assert final.history.attempts[0].findings  # the rule fired: a relaunch was planned
    assert final.planned_change is not None
    assert final.end_reason.startswith("max_num_retraining (1) reached; the last attempt: ")
    assert [message["title"] for message in Receiver.received] == ["remedy: tiny gave up"]
