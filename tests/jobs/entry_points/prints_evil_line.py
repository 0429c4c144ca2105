"""Prints a line that makes the regex (a+)+$ backtrack catastrophically, then a metric."""

import json

from tests.jobs.entry_points.common import parse, report_step

params, out = parse()
print("a" * 34 + "!", flush=True)
report_step(out, 3)
print("valid ppl 12.5", flush=True)
(out / "result.json").write_text(json.dumps({"status": "Completed", "steps": 3}))
