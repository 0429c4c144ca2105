from pathlib import Path

import pytest

from remedy.state_schema import RuleSpec, RunSpec
from remedy.tasks.preflight import PreflightError, preflight
from tests.helpers.cifar import write_tiny_cifar10


def test_real_entry_point_and_cifar_folder_pass(tmp_path: Path) -> None:
    folder = write_tiny_cifar10(tmp_path / "cifar")
    preflight(RunSpec(dataset="cifar10", data_path=str(folder)))


@pytest.mark.parametrize("entry_point", ["no_such_module", "no_such_package.train"])
def test_missing_entry_point_is_named(entry_point: str) -> None:
    with pytest.raises(
        PreflightError, match=f"run_spec.entry_point: no module named '{entry_point}'"
    ):
        preflight(RunSpec(entry_point=entry_point))


def test_missing_or_broken_cifar_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match="run_spec.data_path: .*folder not found"):
        preflight(RunSpec(dataset="cifar10", data_path=str(tmp_path / "nope")))
    folder = write_tiny_cifar10(tmp_path / "cifar")
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(PreflightError, match="test_batch"):
        preflight(RunSpec(dataset="cifar10", data_path=str(folder)))


def write_package(root: Path, name: str, files: dict[str, str]) -> Path:
    package = root / name
    package.mkdir(parents=True)
    for file, text in files.items():
        (package / file).write_text(text)
    return root


def test_a_script_is_looked_for_in_source_dir(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('hi')\n")
    preflight(RunSpec(source_dir=str(tmp_path), entry_point="src/main.py"))
    with pytest.raises(
        PreflightError,
        match=f"run_spec.entry_point: no script 'train.py' in run_spec.source_dir \\({tmp_path}\\)",
    ):
        preflight(RunSpec(source_dir=str(tmp_path), entry_point="train.py"))


def test_a_missing_source_dir_is_named(tmp_path: Path) -> None:
    with pytest.raises(PreflightError, match=f"run_spec.source_dir: no folder {tmp_path}/nope"):
        preflight(RunSpec(source_dir=str(tmp_path / "nope"), entry_point="main.py"))


def test_a_module_is_found_in_source_dir_without_importing_it(tmp_path: Path) -> None:
    # the package's __init__ would end the process if preflight imported it
    code = write_package(
        tmp_path, "wordlm", {"__init__.py": "raise SystemExit(3)\n", "main.py": ""}
    )
    preflight(RunSpec(source_dir=str(code), entry_point="wordlm.main"))
    with pytest.raises(
        PreflightError,
        match=f"no module named 'wordlm.train' in run_spec.source_dir \\({code}\\)",
    ):
        preflight(RunSpec(source_dir=str(code), entry_point="wordlm.train"))


def test_without_source_dir_a_module_is_looked_for_where_the_job_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The job starts in the current directory, which `python -m` puts first on its path;
    # the `remedy` command's own import path does not have it.
    write_package(tmp_path, "lm", {"__init__.py": "", "train.py": ""})
    monkeypatch.chdir(tmp_path)
    preflight(RunSpec(entry_point="lm.train"))
    with pytest.raises(PreflightError, match="in the current directory"):
        preflight(RunSpec(entry_point="lm.nope"))


def test_a_package_runs_its_main_module(tmp_path: Path) -> None:
    code = write_package(tmp_path, "app", {"__init__.py": "", "__main__.py": ""})
    preflight(RunSpec(source_dir=str(code), entry_point="app"))
    write_package(tmp_path, "lib", {"__init__.py": ""})
    with pytest.raises(PreflightError, match="no module named 'lib'"):
        preflight(RunSpec(source_dir=str(code), entry_point="lib"))


def test_the_built_in_job_is_found_from_the_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    # The checkout's remedy/ folder (the CLI) is first on the job's path there.
    monkeypatch.chdir(Path(__file__).parents[2])
    preflight(RunSpec())


# -- rules (issue 12): nothing launches with a rule the evaluator could not build -----------


def rules_spec(*rules: dict[str, object], **fields: object) -> RunSpec:
    return RunSpec(rules=list(rules), **fields)


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"name": "E", "rule": "ExplodingTensr"},
            r"rules\[0\] \(E\): unknown rule 'ExplodingTensr'; did you mean ExplodingTensor\?",
        ),
        (
            {"name": "D", "rule": "DeadRelu", "parameters": {"threshold": 3.0}},
            r"DeadRelu: unknown parameter 'threshold'; did you mean 'threshold_layer'\?",
        ),
        (
            {"name": "D", "rule": "DeadRelu", "parameters": {"threshold_layer": "50"}},
            r"DeadRelu: parameter 'threshold_layer' must be float, got '50'",
        ),
        (
            {"name": "D", "rule": "DeadRelu", "parameters": {"tensor_regex": "(relu"}},
            r"DeadRelu: parameter 'tensor_regex' is not a valid regex",
        ),
        (
            {"name": "T", "rule": "TensorVariance"},
            r"TensorVariance: set 'max_threshold' or 'min_threshold'",
        ),
    ],
)
def test_a_rule_the_evaluator_could_not_build_is_refused(
    rule: dict[str, object], message: str
) -> None:
    spec = rules_spec({"name": "ExplodingTensor", "rule": "ExplodingTensor"}, rule)
    with pytest.raises(PreflightError, match=message.replace("rules\\[0\\]", "rules\\[1\\]")):
        preflight(spec)


CUSTOM_RULE = """
from remedy.debugger import ModeKeys, Rule


class LossAbove(Rule):
    name = "LossAbove"
    limit: float

    def invoke_at_step(self, step, mode=ModeKeys.TRAIN):
        return False
"""


def test_a_custom_rule_file_is_found_from_source_dir_and_checked(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "mine.py").write_text(CUSTOM_RULE)
    (tmp_path / "train.py").write_text("print('hi')\n")
    rule = {"name": "High", "rule": "LossAbove", "rule_file": "rules/mine.py"}
    script = {"source_dir": str(tmp_path), "entry_point": "train.py"}
    preflight(rules_spec(rule | {"parameters": {"limit": 2.0}}, **script))
    with pytest.raises(PreflightError, match="LossAbove: missing required parameter 'limit'"):
        preflight(rules_spec(rule, **script))
    with pytest.raises(PreflightError, match="LossAbove: parameter 'limit' must be float"):
        preflight(rules_spec(rule | {"parameters": {"limit": "2"}}, **script))
    with pytest.raises(PreflightError, match="has no Rule subclass 'LossBelow'"):
        preflight(rules_spec(rule | {"rule": "LossBelow"}, **script))
    with pytest.raises(PreflightError, match=r"rule file '.*rules/nope.py' does not exist"):
        preflight(rules_spec(rule | {"rule_file": "rules/nope.py"}, **script))
    (tmp_path / "rules" / "broken.py").write_text("import no_such_module_here\n")
    with pytest.raises(PreflightError, match="failed to import.*no_such_module_here"):
        preflight(rules_spec(rule | {"rule_file": "rules/broken.py"}, **script))


def test_code_outside_the_allowed_source_dirs_is_refused_unless_a_person_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine allows nothing but the built-in job here; a person at their own shell
    (remedy run/resume: allow_for_this_shell) allows their spec's own source dir, and
    nothing else: a rule file outside it stays refused, before it is imported."""
    from remedy.tasks import allowed_code

    monkeypatch.setenv(allowed_code.ALLOWED_SOURCE_DIRS_ENV, "")
    monkeypatch.setattr(allowed_code, "SHELL", allowed_code.ShellAllowance())
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rule.py").write_text("raise SystemExit(3)\n")  # must never be imported
    spec = RunSpec(source_dir=str(code), entry_point="train.py", rules=[])
    with pytest.raises(PreflightError, match="run_spec.source_dir: .* is not under an allowed"):
        preflight(spec)
    preflight(RunSpec(rules=[]))  # the built-in job always may run
    allowed_code.allow_for_this_shell(spec)
    preflight(spec)
    with_rule = spec.model_copy(
        update={"rules": [RuleSpec(name="R", rule="R", rule_file=str(elsewhere / "rule.py"))]}
    )
    with pytest.raises(PreflightError, match=r"run_spec.rules\[0\].rule_file: .* not under"):
        preflight(with_rule)


def test_a_symlinked_script_may_not_leave_source_dir(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (tmp_path / "outside.py").write_text("")
    (code / "train.py").symlink_to(tmp_path / "outside.py")
    with pytest.raises(PreflightError, match="run_spec.entry_point: 'train.py' resolves to"):
        preflight(RunSpec(source_dir=str(code), entry_point="train.py", rules=[]))


def test_a_value_past_the_os_argument_limit_is_refused_before_launch(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    spec = RunSpec(
        source_dir=str(tmp_path),
        entry_point="train.py",
        rules=[],
        hyperparameters={"blob": "x" * (200 * 1024)},
    )
    with pytest.raises(PreflightError, match=r"run_spec.script_hyperparameters\['blob'\]"):
        preflight(spec)


def test_a_config_key_the_file_lacks_is_refused_naming_the_key(tmp_path: Path) -> None:
    """The launcher sets keys and never adds one: a misspelt key would change nothing."""
    (tmp_path / "fit.py").write_text("")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "fit.yaml").write_text("optim:\n  lr: 0.1\n  betas: [0.9, 0.99]\n")
    spec = {"source_dir": str(tmp_path), "entry_point": "fit.py",
            "arguments": ["--config", "conf/fit.yaml"]}  # fmt: skip
    for key in ("optim.lr", "optim.betas.1"):
        preflight(RunSpec.model_validate(spec | {"hyperparameters": {f"conf/fit.yaml:{key}": 1}}))
    typo = spec | {"hyperparameters": {"conf/fit.yaml:optim.learning_rate": 1.0}}
    with pytest.raises(PreflightError) as caught:
        preflight(RunSpec.model_validate(typo))
    assert str(caught.value) == (
        "run_spec.hyperparameters.conf/fit.yaml:optim.learning_rate: no key 'learning_rate' "
        "at optim (keys there: lr, betas)"
    )
