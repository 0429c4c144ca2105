"""The import contracts of pyproject.toml ([tool.importlinter]: DESIGN.md's house table, no
cycles inside a package) hold: lint-imports, run as CI runs it (.ci/lint_imports.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "lint_imports.py"), "--no-logo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"
    assert "kept, 0 broken." in result.stdout, result.stdout
