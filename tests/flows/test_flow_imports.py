"""The flow process orchestrates: importing the flows, their tasks and the report never
imports torch (the job and the debugger's hook do, in their own processes)."""

from __future__ import annotations

import subprocess
import sys


def test_flows_and_tasks_import_without_torch(tmp_path) -> None:
    code = (
        "import sys\n"
        "import remedy.flows.deployments, remedy.flows.remediate, remedy.flows.search\n"
        "import remedy.tasks.report, remedy.cli\n"
        "from remedy.jobs import backend_for\n"
        "backend_for('local', '.')\n"
        "heavy = sorted(m for m in ('torch', 'remedy.training.train') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
