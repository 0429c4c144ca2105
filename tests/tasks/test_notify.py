"""Notifications through apprise to a real HTTP receiver on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tasks.notify import NOTIFY_URLS_ENV, notifier, notify


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
