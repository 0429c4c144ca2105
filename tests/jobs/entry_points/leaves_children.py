"""Starts a grandchild in its own process group and one in its own session (setsid),
writes their pids to children.json, then ends (or, with --wait, waits to be stopped)."""

import json
import subprocess
import time

from tests.jobs.entry_points.common import parse, report_step

params, out = parse()
forked = subprocess.Popen(["sleep", "600"])
setsid = subprocess.Popen(["sleep", "600"], start_new_session=True)
(out / "children.json").write_text(json.dumps([forked.pid, setsid.pid]))
report_step(out, 1)
while params.get("wait"):
    time.sleep(0.1)
(out / "result.json").write_text(json.dumps({"status": "Completed", "steps": 1}))
