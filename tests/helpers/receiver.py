"""A real HTTP receiver on loopback for notifications (apprise's json:// target)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver(BaseHTTPRequestHandler):
    received: list[dict] = []
    refuse: dict[str, int] = {}  # path -> requests still to answer 503 (an outage)

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if Receiver.refuse.get(self.path, 0) > 0:
            Receiver.refuse[self.path] -= 1
            self.send_response(503)
            self.end_headers()
            return
        Receiver.received.append(json.loads(body) | {"path": self.path})
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.received = []
    Receiver.refuse = {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"json://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
