"""The wheel as a user gets it: one import package, `remedy`, that works from anywhere.

Every test runs the fresh venv of `installed` (tests/packaging/conftest.py) from a folder
outside the repository, so nothing of the checkout can stand in for what the wheel lacks.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from remedy.state_schema import JobStatus, NextAction, load_state
from tests.flows.specs import tiny_spec
from tests.packaging.conftest import Installed, clean_env, run

pytestmark = pytest.mark.slow

# The repository's top-level folders that install as remedy.<folder>: remedy/<folder> links
# to each (setup.py).
REPO = Path(__file__).resolve().parents[2]
FOLDERS = tuple(sorted(link.name for link in (REPO / "remedy").iterdir() if link.is_symlink()))
assert "debugger" in FOLDERS and "flows" in FOLDERS, FOLDERS


def test_wheel_holds_one_import_package_remedy(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        (dist_info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        record = wheel.read(f"{dist_info}/RECORD").decode()
        top_level = f"{dist_info}/top_level.txt"
        if top_level in names:
            assert wheel.read(top_level).decode().split() == ["remedy"]
    recorded = [line.split(",")[0] for line in record.splitlines() if line]
    assert sorted(recorded) == sorted(names)
    assert {n.split("/")[0] for n in names} == {"remedy", dist_info}, sorted(names)
    for folder in FOLDERS:
        assert f"remedy/{folder}/__init__.py" in names, folder
    assert "remedy/cli/main.py" in names
    assert "remedy/state_schema/state.schema.json" in names
    assert "remedy/cli/automations/gave_up.yaml" in names  # `remedy automation`'s default


INSTALLED_NAMESPACE = f"""
import importlib, importlib.resources, json, pkgutil, sys
for name in {FOLDERS!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        continue
    raise AssertionError(f"import {{name}} works: {{sys.modules[name].__file__}}")
import remedy
assert remedy.__file__.startswith(sys.prefix), remedy.__file__
from remedy.debugger import Hook
schema = importlib.resources.files("remedy.state_schema") / "state.schema.json"
assert json.loads(schema.read_text())["title"], "state.schema.json has no title"
automation = importlib.resources.files("remedy.cli") / "automations" / "gave_up.yaml"
assert "remedy.gave_up" in automation.read_text(), "the automation file names no event"
# Every module imports from the wheel alone (none names a bare folder or the checkout).
modules = [m.name for m in pkgutil.walk_packages(remedy.__path__, "remedy.")]
for name in modules:
    try:
        importlib.import_module(name)
    except ImportError as error:  # a framework callback without its extra says how to get it
        if not name.startswith("remedy.debugger.integrations."):
            raise
        assert "pip install 'remedy-train[" in str(error), error
print(len(modules), "modules")
"""


def test_installed_namespace_works_from_outside_the_repository(
    installed: Installed, tmp_path: Path
) -> None:
    out = run(
        installed.python, "-c", INSTALLED_NAMESPACE, timeout=300, cwd=tmp_path, env=clean_env()
    )
    assert "modules" in out.stdout


def test_demo_runs_to_its_end(installed: Installed, tmp_path: Path) -> None:
    """`remedy demo` as the README runs it, on Prefect's temporary server (about 2 minutes)."""
    env = clean_env(PREFECT_HOME=str(tmp_path / "prefect-home"))
    env.pop("PREFECT_API_URL", None)
    out = run(
        installed.remedy, "demo", "--run-dir", tmp_path / "run",
        "--state-out", tmp_path / "final.json",
        timeout=540, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert "ended: completed" in out.stdout, out.stdout[-3000:]
    final = load_state(tmp_path / "final.json")
    assert final.next_action is NextAction.end
    assert final.job_status is JobStatus.Completed
    assert final.history.attempts[-1].outcome is JobStatus.Completed


SHADOWING_PACKAGE = """
from pathlib import Path

Path(__file__).parents[1].joinpath("imported.txt").open("a").write(__name__ + "\\n")
raise ImportError("the user's own {name}/ package was imported in place of remedy.{name}")
"""


def test_run_in_a_user_project_with_packages_named_like_ours(
    installed: Installed, tmp_path: Path, prefect_api_url: str
) -> None:
    """A user's project with its own models/, tasks/, ... (the reported bug: every job failed
    with `cannot import name 'ResNetConfig' from 'models'`). `python -m remedy` from the
    project puts the project first on the path, of the flow and of its jobs alike."""
    project = tmp_path / "project"
    for name in FOLDERS:
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text(SHADOWING_PACKAGE.format(name=name))
    spec = project / "spec.json"
    spec.write_text(tiny_spec(add_batch_norm=1, num_epochs=1).model_dump_json())
    run_dir = project / "run"
    env = clean_env(PREFECT_API_URL=prefect_api_url)
    out = run(
        installed.python, "-m", "remedy", "run", spec, "--run-dir", run_dir,
        "--poll-interval", "0.5",
        timeout=300, cwd=project, env=env,
    )  # fmt: skip
    assert not (project / "imported.txt").exists(), (project / "imported.txt").read_text()
    final = load_state(run_dir / "state.json")
    assert final.job_status is JobStatus.Completed, out.stdout[-3000:]
    assert [a.outcome for a in final.history.attempts] == [JobStatus.Completed]
    assert json.loads((run_dir / "state.json").read_text())["state"]["next_action"] == "end"
