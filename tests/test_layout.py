"""The checkout lays out the one import package as the wheel does: remedy/<folder> links to each
top-level folder (setup.py), so static tools resolve remedy.* from a plain checkout, and every
module has one name only, remedy.<folder>.<module>, never a bare <folder>.<module> as well."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "remedy"
LINKS = sorted(link.name for link in PACKAGE.iterdir() if link.is_symlink())
# Top-level folders that are not part of the package (tests import as `tests`).
NOT_PACKAGE = {"remedy", "tests"}
NOT_SOURCE = {".git", ".venv", "build", "dist", "runs", "node_modules"}


def test_each_top_level_package_folder_is_linked_into_remedy() -> None:
    folders = sorted(
        path.name
        for path in REPO.iterdir()
        if (path / "__init__.py").is_file() and path.name not in NOT_PACKAGE
    )
    assert LINKS == folders
    for name in LINKS:
        assert os.readlink(PACKAGE / name) == f"../{name}", name


def source_files() -> list[Path]:
    files = []
    for root, dirs, names in os.walk(REPO):  # does not follow remedy/'s links: each file once
        dirs[:] = [d for d in dirs if d not in NOT_SOURCE and not d.startswith(".")]
        files += [Path(root, n) for n in names if n.endswith(".py")]
    return files


def test_no_code_imports_a_folder_by_its_bare_name() -> None:
    bare = set(LINKS)
    offenders = []
    for path in source_files():
        for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [
                f"{path.relative_to(REPO)}:{node.lineno}: {name}"
                for name in names
                if name.split(".")[0] in bare
            ]
    assert len(source_files()) > 100
    assert not offenders, "import remedy.<folder>..., not <folder>...:\n" + "\n".join(offenders)


# Run by the venv's python outside the checkout: what the editable install (./bootstrap.sh)
# makes importable, as a user's project beside it sees it.
EDITABLE_NAMESPACE = f"""
import importlib, os, pkgutil, sys
for name in {LINKS!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        continue
    raise AssertionError(f"import {{name}} works: {{sys.modules[name].__file__}}")
import remedy
assert os.path.realpath(remedy.__file__) == {str(PACKAGE / "__init__.py")!r}, remedy.__file__
for info in pkgutil.walk_packages(remedy.__path__, "remedy."):
    try:
        importlib.import_module(info.name)
    except ImportError as error:  # a framework callback without its extra
        if not info.name.startswith("remedy.debugger.integrations."):
            raise
names = {{}}
for name, module in list(sys.modules.items()):
    file = getattr(module, "__file__", None)
    ours = file and os.path.realpath(file).startswith({str(REPO) + os.sep!r})
    if ours and not os.path.realpath(file).startswith(os.path.realpath(sys.prefix) + os.sep):
        names.setdefault(os.path.realpath(file), []).append(name)
twice = {{file: found for file, found in names.items() if len(found) > 1}}
assert not twice, f"imported under two names: {{twice}}"
assert len(names) > 100, sorted(names)
print(len(names), "modules")
"""


def test_the_editable_install_imports_each_module_once_as_remedy(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", EDITABLE_NAMESPACE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.endswith(" modules\n"), result.stdout
