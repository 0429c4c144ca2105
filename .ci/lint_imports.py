"""Check the import contracts ([tool.importlinter] in pyproject.toml) on the `remedy` namespace.

import-linter (grimp) finds a package's modules by walking its folder. In this repository
the folder remedy/ holds only the CLI: setup.py maps the other top-level folders into the
namespace (debugger/ -> remedy.debugger, ...), so `.venv/bin/lint-imports` alone would see
remedy.cli and none of remedy.debugger, remedy.tasks, ... This script lays out the
namespace as the wheel does, as a temporary tree of symbolic links to the real files
(remedy/<CLI files>, remedy/debugger -> <repo>/debugger, ...), puts it first on the path and
runs `.venv/bin/lint-imports` on it. Module names and line numbers in its report are those of
the repository's files.

    .venv/bin/python .ci/lint_imports.py [lint-imports options, e.g. --verbose]

The folders mapped are the ones the installed `remedy` maps (importlib finds
remedy.<folder> in <repo>/<folder>), so this runs in the venv that `./bootstrap.sh` made.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def mapped_folders() -> list[str]:
    """Top-level folders of the repository that the installed package maps to remedy.<folder>."""
    folders = []
    for path in sorted(REPO.iterdir()):
        if not (path / "__init__.py").is_file() or path.name == "remedy":
            continue
        spec = importlib.util.find_spec(f"remedy.{path.name}")
        if spec is not None and spec.origin and Path(spec.origin).resolve().parent == path:
            folders.append(path.name)
    if not folders:
        sys.exit("lint_imports: no remedy.<folder> is installed; run ./bootstrap.sh --dev first")
    return folders


def link_tree(root: Path) -> None:
    """root/remedy: links to remedy/'s entries and to each mapped folder, as in the wheel."""
    package = root / "remedy"
    package.mkdir()
    for entry in (REPO / "remedy").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder in mapped_folders():
        (package / folder).symlink_to(REPO / folder, target_is_directory=True)


def main(argv: list[str]) -> int:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    with tempfile.TemporaryDirectory(prefix="remedy-import-graph-") as tmp:
        link_tree(Path(tmp))
        path = os.pathsep.join(p for p in (tmp, os.environ.get("PYTHONPATH")) if p)
        env = os.environ | {"PYTHONPATH": path}
        # lint-imports puts its working directory first on the path: run it in the tree, not
        # in the repository (whose remedy/ would win). --no-cache: nothing to keep in a tmp dir.
        command = [str(lint_imports), "--config", str(REPO / "pyproject.toml"), "--no-cache"]
        return subprocess.run([*command, *argv], cwd=tmp, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
