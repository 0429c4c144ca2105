"""Maps the repository's top-level folders into the one import package `remedy`.

state_schema/ installs as remedy.state_schema, debugger/ as remedy.debugger, and so on;
nothing is importable by a bare folder name from an installed wheel. Metadata lives in
pyproject.toml; only the package layout is computed here.
"""

from setuptools import find_packages, setup

# The folders that become remedy.<folder> (remedy/ itself is the package root: the CLI).
FOLDERS = [
    "state_schema",
    "debugger",
    "models",
    "training",
    "jobs",
    "strategies",
    "records",
    "tasks",
    "flows",
]

package_dir = {"remedy": "remedy"}
packages = ["remedy", *(f"remedy.{p}" for p in find_packages("remedy"))]
for folder in FOLDERS:
    package_dir[f"remedy.{folder}"] = folder
    packages += [f"remedy.{folder}", *(f"remedy.{folder}.{p}" for p in find_packages(folder))]

setup(package_dir=package_dir, packages=packages)
