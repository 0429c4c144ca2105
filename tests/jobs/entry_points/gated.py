"""Trains until <run_dir>/release exists (then completes) or a stop request arrives."""

import json
import time

from tests.jobs.entry_points.common import parse, report_step, stop_requested

_, out = parse()
release = out.parent.parent / "release"
step = 0
while not release.exists() and not stop_requested():
    step += 1
    report_step(out, step, loss=1.0)
    time.sleep(0.05)
status = "Stopped" if stop_requested() else "Completed"
(out / "result.json").write_text(json.dumps({"status": status, "steps": step}))
