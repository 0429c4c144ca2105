"""Serve the runs' HTML reports over HTTP, so the report links in the Prefect UI open.

A browser will not follow a file:// link from a web page. `remedy serve` starts this server
beside its runner and sets REMEDY_REPORTS_URL for the flow runs it starts; a run whose
directory lies under the runs directory then links its report as
REMEDY_REPORTS_URL/<path under the runs directory>/report/index.html.

Only files inside some run's report/ folder are served: never tensors, checkpoints, logs or
state.
"""

from __future__ import annotations

import socket
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from remedy.records.run_folder import REPORT_DIR

REPORTS_URL_ENV = "REMEDY_REPORTS_URL"


class ReportHandler(SimpleHTTPRequestHandler):
    """GET/HEAD of files under <run>/report/; 404 for everything else."""

    def send_head(self):  # type: ignore[no-untyped-def]  (the base class's signature)
        parts = [part for part in unquote(urlsplit(self.path).path).split("/") if part]
        inside_a_report = REPORT_DIR in parts[1:-1] and ".." not in parts
        if not inside_a_report or not Path(self.translate_path(self.path)).is_file():
            self.send_error(404, "not a file of a run's report")
            return None
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # a page view is not worth a line in the runner's log


def start_report_server(runs_dir: str | Path, host: str, port: int) -> ThreadingHTTPServer:
    """Serve `runs_dir`'s reports from a daemon thread; port 0 takes any free port."""
    handler = partial(ReportHandler, directory=str(Path(runs_dir).resolve()))
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="report-server", daemon=True).start()
    return server


def reports_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    if host in ("0.0.0.0", "::"):  # every interface: name the machine instead
        host = socket.getfqdn()
    return f"http://{host}:{port}"
