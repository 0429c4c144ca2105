import os
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import ModeKeys, store
from remedy.debugger.readers import LocalStoreReader
from tests.debugger.helpers import new_store, write_step


def test_step_file_round_trip_keeps_shapes_dtypes_and_header(tmp_path: Path) -> None:
    new_store(tmp_path)
    tensors = {
        "loss": np.array(1.25, dtype=np.float32),  # 0-d must stay 0-d
        "gradient/fc.weight": np.arange(6, dtype=np.float64).reshape(2, 3).T,  # not C-contiguous
        "count": np.array([1, 2], dtype=np.int64),
    }
    write_step(tmp_path, 12, tensors, mode=ModeKeys.EVAL, global_step=40)

    assert (tmp_path / "steps" / "EVAL" / "000000000012.safetensors").is_file()
    reader = LocalStoreReader(tmp_path)
    header = reader.read_header(ModeKeys.EVAL, 12)
    assert (header.mode, header.mode_step, header.global_step) == (ModeKeys.EVAL, 12, 40)
    assert header.tensor_names == ("count", "gradient/fc.weight", "loss")
    for name, expected in tensors.items():
        value = reader.read_tensor(ModeKeys.EVAL, 12, name)
        assert value.shape == expected.shape and value.dtype == expected.dtype
        np.testing.assert_array_equal(value, expected)


def test_listing_ignores_temp_files_and_strays(tmp_path: Path) -> None:
    new_store(tmp_path)
    write_step(tmp_path, 1, {"loss": np.array(1.0)})
    steps = tmp_path / "steps" / "TRAIN"
    (steps / ".000000000002.safetensors.abc.tmp").write_bytes(b"half a step")
    (steps / "000000000003.safetensors.partial").write_bytes(b"x")
    (steps / "notes.txt").write_text("x")
    reader = LocalStoreReader(tmp_path)
    assert reader.list_steps(ModeKeys.TRAIN) == [1]
    assert reader.list_steps(ModeKeys.TRAIN, start_after=1) == []
    assert reader.list_steps(ModeKeys.EVAL) == []  # folder does not exist yet


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out.json"

    def fail(tmp: str) -> None:
        Path(tmp).write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.atomic_write(target, fail)
    assert os.listdir(tmp_path) == []


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "end.json"
    store.write_json(target, {"a": 1})
    store.write_json(target, {"b": 2})
    assert store.read_json(target) == {"b": 2}
    assert os.listdir(tmp_path) == ["end.json"]


def test_step_file_names() -> None:
    assert store.step_file_name(7) == "000000000007.safetensors"
    assert store.parse_step_file_name("000000000007.safetensors") == 7
    assert store.parse_step_file_name(".000000000007.safetensors.x.tmp") is None
    assert store.parse_step_file_name("7.safetensors") is None


def test_listing_is_a_gap_free_prefix_when_a_scan_races_a_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory scan may miss a file created during it yet return a later one.
    scans = iter([[0, 2], [0, 1, 2, 3]])
    reader = LocalStoreReader(tmp_path)
    monkeypatch.setattr(reader, "_scan", lambda mode: next(scans))
    assert reader.list_steps(ModeKeys.TRAIN) == [0, 1, 2]  # 3 waits for the next listing
