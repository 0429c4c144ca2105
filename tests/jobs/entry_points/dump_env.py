"""Writes what it was started with to $REMEDY_OUTPUT_DIR/dump.json: argv, working
directory, import path and environment. Runs as a script (source_dir = this folder) or as
the module tests.jobs.entry_points.dump_env."""

import json
import os
import sys
from pathlib import Path

out = Path(os.environ["REMEDY_OUTPUT_DIR"])
record = {
    "argv": sys.argv,
    "cwd": os.getcwd(),
    "sys_path_0": sys.path[0],
    "env": dict(os.environ),
    "checkpoints": sorted(p.name for p in Path(os.environ["REMEDY_CHECKPOINT_DIR"]).iterdir()),
}
(out / "dump.json").write_text(json.dumps(record, indent=2))
