"""notify: send a message through apprise (Slack, email, webhooks, ...).

Targets come from REMEDY_NOTIFY_URLS (space or comma separated apprise URLs) and/or an
apprise configuration file. They are secrets: never logged, never put in parameters that
show in the UI. A failing target is logged and never fails the flow.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import apprise
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.logs import task_logger

NOTIFY_URLS_ENV = "REMEDY_NOTIFY_URLS"


def notifier(config_path: str | None = None) -> apprise.Apprise | None:
    """An Apprise object with every configured target, or None when there is none."""
    targets = apprise.Apprise()
    urls = [u for u in re.split(r"[\s,]+", os.environ.get(NOTIFY_URLS_ENV, "")) if u]
    for url in urls:
        if not targets.add(url):
            # Name the position, not the URL: the URL holds the secret.
            raise ValueError(
                f"{NOTIFY_URLS_ENV}: entry {urls.index(url) + 1} is not a URL apprise understands"
            )
    if config_path:
        if not Path(config_path).is_file():
            raise ValueError(f"notification config {config_path}: no such file")
        config = apprise.AppriseConfig()
        config.add(config_path)
        targets.add(config)
    return targets if len(targets) or config_path else None


@task(cache_policy=NO_CACHE)
def notify(title: str, body: str, config_path: str | None = None) -> bool:
    """Send one message; returns whether every target accepted it."""
    logger = task_logger()
    try:
        targets = notifier(config_path)
        if targets is None:
            return False
        delivered = bool(targets.notify(title=title, body=body))
    except Exception as error:  # a notification must never fail the flow
        logger.warning("notification failed: %s", type(error).__name__)
        return False
    if not delivered:
        logger.warning("a notification target did not accept %r", title)
    return delivered
