"""Serve the runs' HTML reports over HTTP, so the report links in the Prefect UI open.

A browser will not follow a file:// link from a web page. `remedy serve` starts this server
beside its runner and sets REMEDY_REPORTS_URL for the flow runs it starts; a run whose
directory lies under the runs directory then links its report as
REMEDY_REPORTS_URL/<path under the runs directory>/report/index.html.

Only regular files inside some run's report/ folder are served, reached without a symbolic
link: never tensors, checkpoints, logs or state.
"""

from __future__ import annotations

import io
import socket
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from remedy.records.run_folder import REPORT_DIR, state_path

REPORTS_URL_ENV = "REMEDY_REPORTS_URL"


class ReportHandler(SimpleHTTPRequestHandler):
    """GET/HEAD of files under <run>/report/; 404 for everything else."""

    def send_head(self) -> io.BytesIO | BinaryIO | None:  # the base class's signature
        if report_file(Path(self.directory), self.path) is None:
            self.send_error(404, "not a file of a run's report")
            return None
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # a page view is not worth a line in the runner's log


def report_file(root: Path, url_path: str) -> Path | None:
    """The file a URL path names when it is a regular file in a run's report folder
    (<run>/report/..., <run> holding state.json), reached without any symbolic link;
    None for anything else (a run directory that happens to be called "report", state,
    tensors, a link to /etc/passwd)."""
    parts = [part for part in unquote(urlsplit(url_path).path).split("/") if part]
    if any(part in (".", "..") or "\x00" in part for part in parts):
        return None
    in_report = any(
        part == REPORT_DIR and index > 0 and state_path(root.joinpath(*parts[:index])).is_file()
        for index, part in enumerate(parts[:-1])
    )
    if not in_report:
        return None
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            return None
    return path if path.is_file() else None


def start_report_server(runs_dir: str | Path, host: str, port: int) -> ThreadingHTTPServer:
    """Serve `runs_dir`'s reports from a daemon thread; port 0 takes any free port."""
    handler = partial(ReportHandler, directory=str(Path(runs_dir).resolve()))
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, name="report-server", daemon=True).start()
    return server


def reports_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    if isinstance(host, bytes):  # an AF_UNIX address; ours are AF_INET/AF_INET6 (str)
        host = host.decode()
    if host in ("0.0.0.0", "::"):  # every interface: name the machine instead
        host = socket.getfqdn()
    return f"http://{host}:{port}"
