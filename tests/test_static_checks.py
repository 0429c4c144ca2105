"""The static checks CI runs hold over the repository: ruff's lint rules and formatting
([tool.ruff] in pyproject.toml) and the type checker ([tool.mypy]: the package remedy,
resolved from the checkout through remedy/'s links). Each runs as a developer runs it, from
the repository's root with the venv's tools."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / command[0]), *command[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,  # under pytest-timeout's 600 s; mypy from cold takes 1-2 CPU minutes
        check=False,
    )


def test_ruff_check_passes() -> None:
    result = run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, f"ruff check:\n{result.stdout}\n{result.stderr}"
    assert "All checks passed" in result.stdout, result.stdout


def test_ruff_format_check_passes() -> None:
    result = run("ruff", "format", "--check", "--no-cache", ".")
    assert result.returncode == 0, f"ruff format --check:\n{result.stdout}\n{result.stderr}"
    assert "already formatted" in result.stdout, result.stdout


def test_mypy_passes() -> None:
    result = run("mypy")
    assert result.returncode == 0, f"mypy:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.startswith("Success: no issues found in"), result.stdout
