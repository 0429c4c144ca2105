"""remedy run of a user's spec from a folder of the user's own, as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def remedy_run(spec: dict, tmp_path: Path, api_url: str, *options: str) -> tuple[int, str, Path]:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(  # a relative run dir, as the default runs/<name> is
        [sys.executable, "-m", "remedy", "run", "spec.json", "--run-dir", "run", *options],
        cwd=tmp_path,  # a user's own folder, not the checkout
        env={**os.environ, "PREFECT_API_URL": api_url},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.returncode, done.stdout + done.stderr, tmp_path / "run"
