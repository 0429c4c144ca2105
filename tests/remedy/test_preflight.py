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
