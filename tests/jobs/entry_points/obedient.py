"""Trains "forever" but honours a stop request between steps, like remedy.training.train."""

import json
import time

from tests.jobs.entry_points.common import parse, stop_requested

_, out = parse()
step = 0
while not stop_requested():
    step += 1
    (out / "progress.json").write_text(json.dumps({"step": step, "epoch": 0, "loss": 1.0}))
    time.sleep(0.05)
(out / "result.json").write_text(json.dumps({"status": "Stopped", "steps": step}))
