"""A corpus of bad run specs and payloads, each refused before launch with a clear error
naming the file or field: the checks `remedy run` makes (payload validation, the policy,
the preflight), never a traceback. Prints its counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy.cli.errors import UsageError
from remedy.cli.main import check_policy
from remedy.state_schema import PayloadError, load_state
from remedy.tasks.allowed_code import SHELL, allow_for_this_shell
from remedy.tasks.preflight import PreflightError, preflight
from tests import adversarial

SCRIPT = '"source_dir": ".", "entry_point": "x.py"'
DIGITS = "1" * 5000
# name -> (file content, what the error must say)
CORPUS: dict[str, tuple[str | bytes, str]] = {
    "infinite rate": ('{"learning_rate": Infinity}', "learning_rate: Input should be a finite"),
    "infinite rate as text": ('{"learning_rate": "Infinity"}', "learning_rate: Input should be"),
    "NaN grace": ('{"stop_grace_s": NaN}', "stop_grace_s: Input should be a finite"),
    "infinite criterion": (
        '{"success_criteria": [{"metric": "m", "op": ">", "value": Infinity}]}',
        "success_criteria.0.value",
    ),
    "1e30 samples": ('{"train_samples": 1e30}', "train_samples:"),
    "huge test samples": ('{"test_samples": 1' + "0" * 30 + "}", "test_samples:"),
    "huge epochs": ('{"num_epochs": 1000000000000}', "num_epochs:"),
    "huge batch": ('{"batch_size": 1000000000000}', "batch_size:"),
    "huge width": ('{"width": 10000000}', "width:"),
    "huge depth": ('{"depth": 6000002}', "depth:"),
    "huge seed": ('{"seed": 1' + "0" * 25 + "}", "seed:"),
    "negative seed": ('{"seed": -1}', "seed:"),
    "huge excluded id": ('{"exclude_samples": [1' + "0" * 25 + "]}", "exclude_samples.0"),
    "negative excluded id": ('{"exclude_samples": [-1]}', "exclude_samples.0"),
    "an epoch without epochs": (
        f'{{{SCRIPT}, "updates_per_epoch": 45}}',
        "updates_per_epoch: the updates of an epoch say nothing without the epochs",
    ),
    "an epoch of no updates": (f'{{{SCRIPT}, "updates_per_epoch": 0}}', "updates_per_epoch:"),
    "the built-in job's epoch": ('{"updates_per_epoch": 45}', "updates_per_epoch: the built-in"),
    "huge save interval": ('{"debugger_save_interval": 1' + "0" * 15 + "}", "debugger_save"),
    "huge budget": (
        '{"state": {"budgets": {"max_num_retraining": 1000000000000}, "run_spec": {}}}',
        "budgets.max_num_retraining",
    ),
    "checkpoint in /etc": ('{"init_checkpoint": "/etc"}', "/etc is not a checkpoint"),
    "missing checkpoint": ('{"init_checkpoint": "/nonexistent"}', "no checkpoint folder"),
    "job name leaving the run": (
        '{"state": {"history": {"latest_job_name": "../../../x"}, "run_spec": {}}}',
        "history.latest_job_name: String should match pattern",
    ),
    "attempt name leaving the run": (
        '{"state": {"history": {"attempts": [{"job_name": "../x", "spec": {}}]}, "run_spec": {}}}',
        "history.attempts.0.job_name",
    ),
    "base job name with a path": ('{"base_job_name": "../x"}', "base_job_name"),
    "script outside source_dir": (f'{{{SCRIPT[:-6]}"../../x.py"}}', "entry_point"),
    "source_dir a file": ('{"source_dir": "/etc/passwd", "entry_point": "x.py"}', "no folder"),
    "missing script": (f"{{{SCRIPT}}}", "no script 'x.py'"),
    "unknown policy": ('{"state": {"policy": "fastest", "run_spec": {}}}', "unknown policy"),
    "not a policy class": ('{"state": {"policy": "os:system", "run_spec": {}}}', "no class system"),
    "a class, not a policy": (
        '{"state": {"policy": "argparse:ArgumentParser", "run_spec": {}}}',
        "does not derive from Policy",
    ),
    "no such policy module": ('{"state": {"policy": "no_such_mod:P", "run_spec": {}}}', "find"),
    "deeply nested": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "5000-digit number": (f'{{"learning_rate": {DIGITS}}}', "a value cannot be read"),
    "binary garbage": (b"\x00\x01\xff", "not UTF-8 text"),
    "empty file": ("", "not valid JSON"),
    "a list": ("[1, 2]", "expected a JSON object"),
    "text for a number": ('{"learning_rate": "fast"}', "learning_rate:"),
    "unknown field": ('{"learning_rat": 0.1}', "learning_rat: Extra inputs are not permitted"),
    "flag of another job": (f'{{{SCRIPT}, "learning_rate": 0.5}}', "learning_rate: a field"),
    "unmapped role": (
        f'{{{SCRIPT}, "hyperparameter_roles": {{"learning_rate": "lr"}}}}',
        "hyperparameter_roles.learning_rate",
    ),
    "a config key of a file never named": (
        f'{{{SCRIPT}, "hyperparameters": {{"c.yaml:lr": 1}}}}',
        "hyperparameters.c.yaml:lr: the job is never told of c.yaml",
    ),
    "a config key of a missing file": (
        f'{{{SCRIPT}, "arguments": ["c.yaml"], "hyperparameters": {{"c.yaml:lr": 1}}}}',
        "run_spec.hyperparameters.c.yaml:lr: ",
    ),
    "misspelled rule class": (
        '{"rules": [{"name": "Guard", "rule": "ExplodingTenser"}]}',
        "ExplodingTensor",
    ),
    "invalid tensor_regex": (
        '{"rules": [{"name": "Guard", "rule": "ExplodingTensor", '
        '"parameters": {"tensor_regex": "grad(ient"}}]}',
        "tensor_regex",
    ),
    "rule name with ../": ('{"rules": [{"name": "../x", "rule": "DeadRelu"}]}', "rules.0.name"),
    "duplicate rule names": (
        '{"rules": [{"name": "G", "rule": "DeadRelu"}, {"name": "G", "rule": "Overfit"}]}',
        "used twice: G",
    ),
    "zero progress timeout": ('{"progress_timeout_s": 0}', "progress_timeout_s"),
    "negative GPUs": ('{"gpus_per_job": -1}', "gpus_per_job"),
}


def checked(path: Path) -> None:
    """What `remedy run FILE` checks before it launches anything."""
    state = load_state(path)
    check_policy(state.policy)
    allow_for_this_shell(state.run_spec)  # a person at their shell runs their own code
    preflight(state.run_spec)


@pytest.fixture(scope="module")
def counts() -> dict[str, int]:
    found = {"cases": 0, "refused cleanly": 0, "accepted": 0, "crashed": 0}
    yield found
    print("\nbad-input corpus: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    outcomes = {"refused cleanly": "handled cleanly", "accepted": "silently wrong"}
    adversarial.record(
        "bad-spec corpus", {outcomes.get(k, k): v for k, v in found.items() if k != "cases"}
    )


@pytest.mark.parametrize("name", list(CORPUS))
def test_bad_input_is_refused_naming_what_is_wrong(
    name: str, tmp_path: Path, counts: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # source_dir "." holds no x.py
    monkeypatch.setattr(SHELL, "source_dirs", [])  # what this case's shell allows, only
    monkeypatch.setattr(SHELL, "any_run_dir", False)
    content, says = CORPUS[name]
    path = tmp_path / "spec.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    counts["cases"] += 1
    try:
        checked(path)
    except (PayloadError, PreflightError, UsageError) as error:
        counts["refused cleanly"] += 1
        assert says in str(error), str(error)
        return
    except BaseException:
        counts["crashed"] += 1
        raise
    counts["accepted"] += 1
    pytest.fail(f"{name}: accepted")
