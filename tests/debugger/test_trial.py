import threading
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import (
    CorruptStepFile,
    ModeKeys,
    SaveConfig,
    StepNotYetAvailable,
    StepUnavailable,
    StoreFormatError,
    TensorUnavailable,
    TensorUnavailableForStep,
    create_trial,
    store,
)
from remedy.debugger.readers import LocalStoreReader
from remedy.debugger.trial import Trial
from tests.debugger.helpers import every_step_hook, new_store, train, write_step


class CountingReader(LocalStoreReader):
    """Counts header reads, to check that refresh() only opens new step files."""

    def __init__(self, location: Path) -> None:
        super().__init__(location)
        self.headers_read: list[tuple[ModeKeys, int]] = []

    def read_header(self, mode: ModeKeys, mode_step: int) -> store.StepHeader:
        self.headers_read.append((mode, mode_step))
        return super().read_header(mode, mode_step)


def test_refresh_reads_only_new_step_files(tmp_path: Path) -> None:
    new_store(tmp_path, {"losses": ["loss"]})
    for step in range(3):
        write_step(tmp_path, step, {"loss": np.array(float(step))})
    reader = CountingReader(tmp_path)
    trial = Trial(reader)
    assert trial.steps() == [0, 1, 2]
    assert reader.headers_read == [(ModeKeys.TRAIN, s) for s in range(3)]

    reader.headers_read.clear()
    assert trial.refresh() == 0
    assert reader.headers_read == []

    write_step(tmp_path, 3, {"loss": np.array(3.0)})
    write_step(tmp_path, 0, {"loss": np.array(9.0)}, mode=ModeKeys.EVAL, global_step=4)
    assert trial.refresh() == 2
    assert sorted(reader.headers_read) == sorted([(ModeKeys.TRAIN, 3), (ModeKeys.EVAL, 0)])
    assert trial.steps() == [0, 1, 2, 3]
    assert trial.steps(ModeKeys.EVAL) == [0]
    assert float(trial.tensor("loss").value(0, ModeKeys.EVAL)) == 9.0


def test_trial_follows_a_real_training_job_step_by_step(tmp_path: Path) -> None:
    import torch

    out = tmp_path / "store"
    trial = create_trial(out)  # before the job starts: no folder yet
    assert trial.steps() == [] and not trial.has_ended

    hook = every_step_hook(out)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_module(model)
    hook.register_optimizer(optimizer)
    for step in range(4):
        optimizer.zero_grad()
        loss = model(torch.ones(2, 3)).pow(2).mean()
        hook.save_tensor("loss", loss, collection="losses")
        loss.backward()
        expected_grad = model.weight.grad.clone().numpy()
        optimizer.step()
        hook.flush()  # the step was handed over at optimizer.step(); wait until on disk
        assert trial.refresh() == 1
        assert trial.steps() == list(range(step + 1))
        np.testing.assert_array_equal(trial.tensor("gradient/weight").value(step), expected_grad)
        assert not trial.has_ended
    hook.close()
    trial.refresh()
    assert trial.has_ended
    assert trial.last_step() == 3


def test_step_not_yet_available_vs_unavailable(tmp_path: Path) -> None:
    out = tmp_path / "store"
    hook = every_step_hook(out, interval=5)
    train(hook, steps=7)  # gradients at 0 and 5; losses every step
    hook.flush()
    trial = create_trial(out)
    gradient = trial.tensor("gradient/0.weight")
    assert gradient.steps() == [0, 5]

    with pytest.raises(StepNotYetAvailable):
        gradient.value(50)  # the job may still get there
    with pytest.raises(TensorUnavailableForStep):
        gradient.value(3)  # step 3 exists, without gradients
    with pytest.raises(StepNotYetAvailable):
        trial.tensor("loss").value(0, ModeKeys.EVAL)  # no EVAL step yet
    with pytest.raises(TensorUnavailable):
        trial.tensor("no/such/tensor")

    hook.close()
    with pytest.raises(StepUnavailable):
        gradient.value(50)  # the lookup refreshes, sees end.json: never coming


def test_skipped_step_below_the_last_written_is_unavailable_while_running(
    tmp_path: Path,
) -> None:
    new_store(tmp_path)
    write_step(tmp_path, 0, {"loss": np.array(1.0)})
    write_step(tmp_path, 10, {"loss": np.array(1.0)})
    trial = create_trial(tmp_path)
    with pytest.raises(StepUnavailable):
        trial.tensor("loss").value(5)  # steps are written in order: 5 will never come
    with pytest.raises(StepNotYetAvailable):
        trial.tensor("loss").value(11)


def test_temp_files_ignored_and_foreign_step_files_reported(tmp_path: Path) -> None:
    new_store(tmp_path)
    write_step(tmp_path, 0, {"loss": np.array(1.0)})
    write_step(tmp_path, 1, {"loss": np.array(2.0)})
    steps = tmp_path / "steps" / "TRAIN"
    good = (steps / "000000000001.safetensors").read_bytes()
    (steps / ".000000000002.safetensors.tmp").write_bytes(good[:-3])  # in-flight temp file
    assert create_trial(tmp_path).steps() == [0, 1]

    from safetensors.numpy import save_file

    bad = steps / "000000000003.safetensors"
    for damage, expected in [
        (lambda: bad.write_bytes(good[:-3]), "run past the end"),  # truncated copy
        (lambda: bad.write_bytes(b"not safetensors at all"), "not a debugger step file"),
        (lambda: save_file({"loss": np.ones(1)}, str(bad)), "mode"),  # no metadata
    ]:
        damage()
        # Never skipped silently: the trial names the file; a later refresh still does.
        with pytest.raises(CorruptStepFile, match=f"000000000003.safetensors: .*{expected}"):
            create_trial(tmp_path)
    bad.unlink()
    write_step(tmp_path, 6, {"loss": np.array(6.0)})
    trial = create_trial(tmp_path)
    assert trial.steps() == [0, 1, 6]
    with pytest.raises(StepUnavailable):
        trial.tensor("loss").value(3)


@pytest.mark.filterwarnings("error::debugger.DebuggerWarning")  # a skipped step = a torn read
def test_reader_never_sees_half_a_step_while_a_writer_runs(tmp_path: Path) -> None:
    new_store(tmp_path)
    total = 100
    shape = (512, 512)

    def writer() -> None:
        for step in range(total):
            write_step(tmp_path, step, {"w": np.full(shape, step, dtype=np.float32)})
        store.write_end(tmp_path, {ModeKeys.TRAIN: total - 1}, total - 1)

    thread = threading.Thread(target=writer)
    thread.start()
    trial = create_trial(tmp_path)
    checked = 0
    while True:
        ended = trial.has_ended
        for step in trial.steps()[checked:]:
            value = trial.tensor("w").value(step)
            assert value.shape == shape and (value == step).all()
            checked += 1
        if ended:
            break
        trial.refresh()
    thread.join()
    assert checked == total


def test_tensor_name_filters(tmp_path: Path) -> None:
    new_store(
        tmp_path,
        {"gradients": ["gradient/a.weight", "gradient/b.weight"], "losses": ["loss"]},
    )
    write_step(tmp_path, 0, {"gradient/a.weight": np.ones(2), "loss": np.array(1.0)})
    write_step(tmp_path, 1, {"gradient/b.weight": np.ones(2), "loss": np.array(1.0)})
    write_step(tmp_path, 0, {"acc": np.array(0.5)}, mode=ModeKeys.EVAL, global_step=2)
    trial = create_trial(tmp_path)
    assert trial.tensor_names() == ["acc", "gradient/a.weight", "gradient/b.weight", "loss"]
    assert trial.tensor_names(collection="gradients") == ["gradient/a.weight", "gradient/b.weight"]
    assert trial.tensor_names(collection="nope") == []
    assert trial.tensor_names(regex=".*gradient") == ["gradient/a.weight", "gradient/b.weight"]
    assert trial.tensor_names(regex="weight") == []  # re.match anchors at the start
    assert trial.tensor_names(regex=["loss", "acc"]) == ["acc", "loss"]
    assert trial.tensor_names(mode=ModeKeys.EVAL) == ["acc"]
    assert trial.tensor_names(step=1) == ["gradient/b.weight", "loss"]
    assert trial.tensor_names(collection="gradients", step=0) == ["gradient/a.weight"]
    assert trial.tensor("loss").steps(ModeKeys.GLOBAL) == [0, 1]
    assert trial.collection_names() == ["gradients", "losses"]


def test_unknown_store_format_is_refused(tmp_path: Path) -> None:
    store.write_json(tmp_path / "meta.json", {"format": "something-else", "version": 1})
    with pytest.raises(StoreFormatError):
        create_trial(tmp_path)


def test_an_s3_uri_without_a_bucket_is_refused() -> None:
    with pytest.raises(ValueError, match="without a bucket"):
        create_trial("s3:///prefix")


def test_save_config_is_recorded_per_collection(tmp_path: Path) -> None:
    hook = every_step_hook(tmp_path, interval=4)
    hook.close()
    data = store.read_json(tmp_path / "collections.json")
    assert SaveConfig.from_dict(data["gradients"]["save_config"]) == SaveConfig(save_interval=4)
