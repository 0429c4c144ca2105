"""Notifications through apprise to a real HTTP receiver on loopback."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from remedy.records.notifications import NOTIFY_SECRET_ENV, NOTIFY_URLS_ENV, notifier, send
from remedy.tasks.notify import notify


class Receiver(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"json://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_message_reaches_a_json_webhook(receiver: str, monkeypatch) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, receiver)
    assert notify.fn("remedy: retraining", "Found: ExplodingTensor") is True
    assert Receiver.received[0]["title"] == "remedy: retraining"
    assert "ExplodingTensor" in Receiver.received[0]["message"]


def test_apprise_config_file(receiver: str, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(NOTIFY_URLS_ENV, raising=False)
    config = tmp_path / "notify.txt"
    config.write_text(receiver + "\n")
    assert notify.fn("t", "b", config_path=str(config)) is True
    assert len(Receiver.received) == 1


def test_unreachable_target_is_logged_and_never_fails(monkeypatch, caplog) -> None:
    monkeypatch.setenv(NOTIFY_URLS_ENV, "json://127.0.0.1:9/nothing-listens")
    assert notify.fn("remedy: done", "b") is False
    assert "did not accept 'remedy: done'" in caplog.text


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


def test_email_reaches_a_real_smtp_server(smtp_receiver, monkeypatch) -> None:
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
    assert send("remedy: retraining", "named in the form", None, "remedy-notify-test") is True
    assert Receiver.received[-1]["message"] == "named in the form"
