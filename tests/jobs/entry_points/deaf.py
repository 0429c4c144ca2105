"""Never reads the stop file (and swallows the launcher's interrupt), but ends on SIGTERM:
it writes sigterm.json (when it came) and exits 0."""

import json
import signal
import sys
import time
from types import FrameType

from tests.jobs.entry_points.common import parse

_, out = parse()


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    (out / "sigterm.json").write_text(json.dumps({"time": time.time()}))
    sys.exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
step = 0
while True:
    try:
        step += 1
        (out / "progress.json").write_text(json.dumps({"step": step, "epoch": 0, "loss": 1.0}))
        time.sleep(0.05)
    except SystemExit:
        raise
    except BaseException:  # the launcher's StopTraining: not listened to
        pass
