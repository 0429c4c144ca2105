"""Reading a run's Prefect events back from the test session's server."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prefect.client.orchestration import get_client
from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

from remedy.outlets.publish import run_name


def events_of(
    resource: str,
    name: str,
    timeout: float = 30.0,
    where: Callable[[Any], bool] = lambda event: True,
) -> list:
    """The events `name` of `resource` that `where` accepts, waiting up to `timeout` for
    the first one (a resource names a run folder, which other tests' runs may share)."""
    wanted = EventFilter(
        event=EventNameFilter(name=[name]), resource=EventResourceFilter(id=[resource])
    )
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            events = [e for e in client.read_events(filter=wanted, limit=50).events if where(e)]
            if events or time.monotonic() > deadline:
                return events
            time.sleep(0.5)


def run_resource(run_dir: str) -> str:
    """The resource id a run's events name (outlets/publish.py)."""
    return f"remedy.run.{run_name(run_dir)}"
