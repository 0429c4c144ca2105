"""Notifications through apprise (Slack, email, webhooks, ...).

Targets come from REMEDY_NOTIFY_URLS (space or comma separated apprise URLs), a Prefect
Secret block named by REMEDY_NOTIFY_SECRET (same format), and/or an apprise configuration
file. They are secrets: never logged, never put in parameters that
show in the UI (a target is named by its position). A failing target is logged and never
fails the flow. Each target gets the body format it shows (apprise's notify_format): plain
text, or markdown, which apprise turns into HTML for targets that take HTML (mail). A mail's
plain-text part is the message's own text (a line per attempt, link URLs written out), not
apprise's conversion of the HTML (a line per table cell, links without their URL).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import apprise
from apprise.plugins.email import NotifyEmail

from remedy.outlets.messages import Message

NOTIFY_URLS_ENV = "REMEDY_NOTIFY_URLS"
NOTIFY_SECRET_ENV = "REMEDY_NOTIFY_SECRET"


def configured_urls(secret_block: str | None = None) -> list[tuple[str, str]]:
    """(where it came from, URL) for every target in the environment or the Secret block
    (`secret_block`, else the one REMEDY_NOTIFY_SECRET names)."""
    found = [
        (f"{NOTIFY_URLS_ENV} entry {i}", url)
        for i, url in enumerate(split_urls(os.environ.get(NOTIFY_URLS_ENV, "")), start=1)
    ]
    block = secret_block or os.environ.get(NOTIFY_SECRET_ENV)
    if block:
        from prefect.blocks.system import Secret

        try:
            secret = Secret.load(block)
            assert isinstance(secret, Secret)  # called from sync code: not a coroutine
            value = str(secret.get())
        except ValueError as error:
            raise ValueError(f"Secret block {block!r}: {error}") from None
        found += [
            (f"Secret block {block!r} entry {i}", url)
            for i, url in enumerate(split_urls(value), start=1)
        ]
    return found


def split_urls(text: str) -> list[str]:
    return [url for url in re.split(r"[\s,]+", text) if url]


def notifier(
    config_path: str | None = None, secret_block: str | None = None
) -> apprise.Apprise | None:
    """An Apprise object with every configured target, or None when there is none."""
    targets = apprise.Apprise()
    for where, url in configured_urls(secret_block):
        if not targets.add(url):
            # Name the position, not the URL: the URL holds the secret.
            raise ValueError(f"{where} is not a URL apprise understands")
    if config_path:
        if not Path(config_path).is_file():
            raise ValueError(f"notification config {config_path}: no such file")
        config = apprise.AppriseConfig()
        config.add(config_path)
        targets.add(config)
    return targets if len(targets) or config_path else None


class NotDelivered(RuntimeError):
    """A target refused or could not be reached."""


def deliver(
    message: Message,
    target: int,
    config_path: str | None = None,
    secret_block: str | None = None,
) -> None:
    """Send `message` to the target at position `target` (from 0) in the form it shows;
    NotDelivered when it does not accept it (its position is named, never its URL)."""
    targets = notifier(config_path, secret_block)
    if targets is None or target >= len(targets):
        raise NotDelivered(f"no notification target {target + 1}")
    server = targets[target]
    one = apprise.Apprise()
    one.add(server)
    if server.notify_format == apprise.NotifyFormat.TEXT:
        body, body_format = message.text(), apprise.NotifyFormat.TEXT
    else:  # markdown, or HTML converted from it by apprise
        body, body_format = message.markdown(), apprise.NotifyFormat.MARKDOWN
    is_mail = isinstance(server, NotifyEmail) and body_format != apprise.NotifyFormat.TEXT
    with plain_part(message.text()) if is_mail else nullcontext():
        accepted = one.notify(title=message.title, body=body, body_format=body_format)
    if not accepted:
        raise NotDelivered(f"notification target {target + 1} did not accept {message.title!r}")


# apprise's mail plugin writes a mail's text/plain part by converting its HTML part at send
# time, through the module's convert_between; one send at a time swaps in our own text.
_plain_part_lock = threading.Lock()


@contextmanager
def plain_part(text: str) -> Iterator[None]:
    """While a mail is sent, its plain-text alternative is `text`."""
    from apprise.plugins.email import base

    original: Callable[..., Any] = base.convert_between

    def convert(from_format: str, to_format: str, content: str) -> str:
        if (from_format, to_format) == (apprise.NotifyFormat.HTML, apprise.NotifyFormat.TEXT):
            return text
        return original(from_format, to_format, content)

    with _plain_part_lock:
        base.convert_between = convert
        try:
            yield
        finally:
            base.convert_between = original
