"""One wheel of the working tree, installed as a user installs it, shared by the session.

The wheel is built non-editably from a clean copy of the working tree (no build/ left over
from an earlier build can leak stale modules into it), then installed into a fresh venv:
torch first (TORCH_SPEC, as bootstrap.sh does, so that no requirement pulls another build),
then the wheel with its dependencies from the registry, torch held to the build just
installed. The venv is removed at the end of the session (it holds a copy of torch).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0")
# What a clean checkout would not hold: local environments, caches, outputs of builds and runs.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".*_cache",
    "runs",
    ".remedy",
)


@dataclass
class Installed:
    wheel: Path
    venv: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def remedy(self) -> Path:
        return self.venv / "bin" / "remedy"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: nothing pointing into this checkout or its venv."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    return env | extra


def run(*command: str | Path, timeout: float, **kwargs: object) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )
    assert result.returncode == 0, (
        f"{' '.join(map(str, command))} exited {result.returncode}:\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("packaging")
    timings: dict[str, float] = {}

    start = time.monotonic()
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE, symlinks=True)
    dist = root / "dist"
    run(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "--wheel-dir", dist, source,
        timeout=300, cwd=root,
    )  # fmt: skip
    (wheel,) = dist.glob("remedy_train-*.whl")
    shutil.rmtree(source)
    timings["build wheel"] = time.monotonic() - start

    venv = root / "venv"
    installed = Installed(wheel=wheel, venv=venv, timings=timings)
    pip = (installed.python, "-m", "pip", "install", "-q", "--no-compile")
    try:
        start = time.monotonic()
        run(sys.executable, "-m", "venv", venv, timeout=120, cwd=root)
        run(*pip, TORCH_SPEC, timeout=600, cwd=root, env=clean_env())
        torch = run(
            installed.python, "-c", "import importlib.metadata as m; print(m.version('torch'))",
            timeout=60, cwd=root, env=clean_env(),
        ).stdout.strip()  # fmt: skip
        timings["venv + torch"] = time.monotonic() - start

        start = time.monotonic()
        constraints = root / "constraints.txt"
        constraints.write_text(f"torch=={torch}\n")  # nothing may replace this torch
        run(*pip, "--constraint", constraints, wheel, timeout=900, cwd=root, env=clean_env())
        timings["wheel + dependencies"] = time.monotonic() - start

        yield installed
    finally:
        print(
            "\npackaging: "
            + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in timings.items()),
            file=sys.stderr,
        )
        shutil.rmtree(venv, ignore_errors=True)
