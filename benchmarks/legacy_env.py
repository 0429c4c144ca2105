"""The legacy debugger library's own virtual environment, built from PyPI when absent.

    python benchmarks/legacy_env.py DIR      # prints DIR/bin/python once it is ready

smdebug 1.0.34 needs numpy<2, which remedy's environment cannot hold, so the side-by-side
benchmarks run its half (debugger_legacy_bench.py) in an interpreter of its own, with the
same torch as ours (so the model's step costs the same). remedy itself is not installed
there. Building it takes a few minutes (torch is the bulk); a DIR that already holds
smdebug is used as it is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# As tests/debugger/fixtures/legacy/make_fixtures.py installs it: smdebug imports these
# without declaring them all.
LEGACY_REQUIREMENTS = [
    "numpy<2", "smdebug==1.0.34", "requests", "pandas<2.3", "psutil", "pyinstrument"
]  # fmt: skip


def legacy_python(env_dir: str | Path, torch_version: str) -> Path:
    """DIR/bin/python of an environment holding smdebug and torch==torch_version;
    creates it when it does not hold smdebug yet. Raises CalledProcessError on failure."""
    env = Path(env_dir)
    python = env / "bin" / "python"
    if python.exists() and _imports(python, "smdebug"):
        return python
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    torch_spec = f"torch=={torch_version.split('+')[0]}"
    subprocess.run([*pip, torch_spec], check=True)  # first: nothing may pull another build
    subprocess.run([*pip, torch_spec, *LEGACY_REQUIREMENTS], check=True)
    if not _imports(python, "smdebug.pytorch"):
        raise RuntimeError(f"{env}: smdebug was installed but does not import")
    return python


def _imports(python: Path, module: str) -> bool:
    done = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True)
    return done.returncode == 0


if __name__ == "__main__":
    from importlib.metadata import version

    print(legacy_python(sys.argv[1], version("torch")))
