from pathlib import Path

import pytest
from remedy.state_schema import RunSpec
from remedy.training.data import write_tiny_cifar10

from remedy.preflight import PreflightError, preflight


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
