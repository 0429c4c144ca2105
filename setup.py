"""Maps the repository's top-level folders into the one import package `remedy`.

Each folder that becomes remedy.<folder> has a symbolic link remedy/<folder> -> ../<folder>,
so that static tools (type checkers, import-linter, an IDE) resolve remedy.* from a plain
checkout; those links are the list. state_schema/ installs as remedy.state_schema, debugger/
as remedy.debugger, and so on; nothing is importable by a bare folder name from an installed
wheel or an editable install. Metadata lives in pyproject.toml; only the package layout is
computed here.

The mapping is spelled out (package_dir remedy.<folder> -> <folder>) although the links
alone would let setuptools find every package: with it, an editable install maps the one
name `remedy` to this checkout through an import hook; without it, setuptools would put the
repository's root on sys.path, which makes debugger, models, training, tasks, ... importable
as top-level packages beside a user's own.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).resolve().parent
FOLDERS = sorted(link.name for link in (ROOT / "remedy").iterdir() if link.is_symlink())
for folder in FOLDERS:
    if (ROOT / "remedy" / folder).resolve() != ROOT / folder:
        raise SystemExit(f"setup.py: remedy/{folder} must link to ../{folder}")

package_dir = {"remedy": "remedy"}
# remedy/ itself is the package root (its own subpackage: the CLI, remedy/cli/); its links are
# added folder by folder below.
own = find_packages("remedy", exclude=[*FOLDERS, *(f"{folder}.*" for folder in FOLDERS)])
packages = ["remedy", *(f"remedy.{p}" for p in own)]
for folder in FOLDERS:
    package_dir[f"remedy.{folder}"] = folder
    packages += [f"remedy.{folder}", *(f"remedy.{folder}.{p}" for p in find_packages(folder))]

setup(package_dir=package_dir, packages=packages)
