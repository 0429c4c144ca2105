"""Ignores stop requests and SIGTERM: only SIGKILL ends it."""

import signal
import time

from tests.jobs.entry_points.common import parse

parse()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(0.1)
