"""Only code the serving machine allows runs: flow runs created through the real Prefect API
against `remedy serve` (tasks/allowed_code.py). The test session's machine allows this
checkout and the session's temporary folders (tests/conftest.py: this_machine_allows);
each case names code or a folder outside them and must be refused before anything is
imported or launched, naming the field."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.client.schemas.objects import StateType
from prefect.deployments import run_deployment

from tests.conftest import Served


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside everything the test machine allows, with a script and a rule file
    that would leave a marker file if they ever ran."""
    folder = Path(tempfile.mkdtemp(prefix="remedy-not-allowed-"))
    marker = folder / "ran"
    code = f"open({str(marker)!r}, 'w').write('ran')\n"
    (folder / "evil.py").write_text(code)
    (folder / "evil_rule.py").write_text(code)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def cases(outside: Path, allowed: Path) -> dict[str, tuple[dict, str]]:
    """Case -> (the flow run's parameters, the start of its refusal: the field named)."""
    marker = outside / "ran"
    link_dir = allowed / "linked"
    link_dir.mkdir(exist_ok=True)
    link = link_dir / "train.py"
    if not link.is_symlink():
        link.symlink_to(outside / "evil.py")
    return {
        # the report: a module on the worker, its code in a hyperparameter
        "installed module": (
            {"run_spec": {"entry_point": "timeit", "rules": [],
                          "hyperparameters": {"s": f"open({str(marker)!r}, 'w')"}}},
            "run_spec.entry_point: no module named 'timeit' in",
        ),
        "source_dir /": (
            {"run_spec": {"entry_point": str(outside / "evil.py")[1:], "source_dir": "/",
                          "rules": []}},
            "run_spec.source_dir: / is not under an allowed source dir",
        ),
        "absolute script": (
            {"run_spec": {"entry_point": str(outside / "evil.py"), "rules": []}},
            f"run_spec.entry_point: {outside / 'evil.py'} is not under an allowed source dir",
        ),
        "symlinked script": (
            {"run_spec": {"entry_point": "train.py", "source_dir": str(link_dir), "rules": []}},
            f"run_spec.entry_point: 'train.py' resolves to {outside / 'evil.py'}, outside",
        ),
        "rule file": (
            {"run_spec": {"entry_point": "tests.jobs.entry_points.quick", "rules": [
                {"name": "Evil", "rule": "Evil", "rule_file": str(outside / "evil_rule.py")}]}},
            f"run_spec.rules[0].rule_file: {outside / 'evil_rule.py'} is not under",
        ),
        # any module on the serving machine's import path (the payload's policy is free text)
        "policy module": (
            {"state": {"run_spec": {"entry_point": "tests.jobs.entry_points.quick", "rules": []},
                       "policy": "json:JSONDecoder", "history": {},
                       "next_action": "launch_new"}},
            "policy: ",
        ),
        "run_dir": (
            {"run_spec": {"entry_point": "tests.jobs.entry_points.quick", "rules": []},
             "run_dir": str(outside / "run")},
            f"run_dir: {outside / 'run'} is not under this machine's runs root",
        ),
    }  # fmt: skip


CASES = [
    "installed module",
    "source_dir /",
    "absolute script",
    "symlinked script",
    "rule file",
    "policy module",
    "run_dir",
]


@pytest.mark.slow
@pytest.mark.adversarial("secrets and access", fails_as="leaked")
@pytest.mark.parametrize("case", CASES)
def test_a_flow_run_from_the_api_runs_only_allowed_code(
    served: Served, outside: Path, tmp_path: Path, case: str
) -> None:
    parameters, refusal = cases(outside, tmp_path)[case]
    run_dir = tmp_path / "run"
    parameters = {"run_dir": str(run_dir), "settings": {"poll_interval_s": 0.3}} | parameters
    flow_run = run_deployment("remediate/remediate", parameters=parameters, timeout=180)
    assert flow_run.state.type is StateType.FAILED, flow_run.state
    message = flow_run.state.message or ""
    assert refusal in message, message
    if case == "policy module":
        assert "is not under an allowed source dir" in message, message
    assert not (outside / "ran").exists()  # nothing of it ran
    assert not (run_dir / "jobs").exists() and not (outside / "run").exists()  # nor launched
