import copy
import json
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from remedy.debugger import DebuggerWarning, Hook, ModeKeys, SaveConfig, create_trial, store
from remedy.debugger.exceptions import StoreWriteError
from remedy.debugger.writer import StepRecord, StoreWriter
from tests.debugger.helpers import REPO, batched_from_the_first_step, train


def test_losses_every_step_gradients_every_n_match_the_real_training(tmp_path: Path) -> None:
    hook = Hook(
        tmp_path / "store",
        collections={
            "losses": SaveConfig(save_interval=1),
            "gradients": SaveConfig(save_interval=3),
            "weights": SaveConfig(save_interval=3),
            "biases": SaveConfig(save_interval=3),
        },
    )
    log = train(hook, steps=8)
    hook.close()

    trial = create_trial(tmp_path / "store")
    assert trial.has_ended
    assert trial.steps() == list(range(8))
    assert trial.tensor_names(collection="losses") == ["loss"]
    params = ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert trial.tensor_names(collection="gradients") == [f"gradient/{p}" for p in params]
    assert trial.tensor_names(collection="weights") == ["0.weight", "2.weight"]
    assert trial.tensor_names(collection="biases") == ["0.bias", "2.bias"]

    for step, loss in enumerate(log.losses):
        value = trial.tensor("loss").value(step)
        assert value.shape == ()
        assert float(value) == pytest.approx(loss, rel=1e-6)
    for name in params:
        assert trial.tensor(f"gradient/{name}").steps() == [0, 3, 6]
        assert trial.tensor(name).steps() == [0, 3, 6]
        for step in (0, 3, 6):
            grad = trial.tensor(f"gradient/{name}").value(step)
            np.testing.assert_array_equal(grad, log.grads[step][name])
            # weights are taken just before the update: the ones this step's forward used
            weight = trial.tensor(name).value(step)
            np.testing.assert_array_equal(weight, log.weights_before[step][name])
    assert trial.step_header(3).tensor_names == tuple(
        sorted(["loss", *params, *(f"gradient/{p}" for p in params)])
    )

    collections = json.loads((tmp_path / "store" / "collections.json").read_text())
    assert collections["gradients"]["save_config"]["save_interval"] == 3
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    assert (meta["format"], meta["version"], meta["framework"]) == (
        "remedy-debugger",
        store.FORMAT_VERSION,
        "pytorch",
    )


def test_default_saves_losses_only(tmp_path: Path) -> None:
    hook = Hook(tmp_path, save_config=SaveConfig(save_interval=2))
    train(hook, steps=5)
    hook.close()
    trial = create_trial(tmp_path)
    assert trial.tensor_names() == ["loss"]
    assert trial.steps() == [0, 2, 4]


def test_modes_keep_their_own_step_counters(tmp_path: Path) -> None:
    every = SaveConfig(save_interval=1)
    hook = Hook(tmp_path, collections={"losses": every, "predictions": every})
    log = train(hook, steps=3, eval_steps=2)  # model.eval() -> EVAL steps, inferred
    hook.set_mode(ModeKeys.PREDICT)  # explicit mode wins over model.training
    model = torch.nn.Linear(2, 1)
    hook.register_module(model)
    model(torch.ones(1, 2))
    hook.save_tensor("prediction", model(torch.ones(1, 2)), collection="predictions")
    hook.close()

    trial = create_trial(tmp_path)
    assert trial.steps(ModeKeys.TRAIN) == [0, 1, 2]
    assert trial.steps(ModeKeys.EVAL) == [0, 1]
    assert trial.steps(ModeKeys.PREDICT) == [1]  # step 0 saved nothing: no file
    assert trial.steps(ModeKeys.GLOBAL) == [0, 1, 2, 3, 4, 6]
    assert float(trial.tensor("loss").value(1, ModeKeys.EVAL)) == pytest.approx(
        log.eval_losses[1], rel=1e-6
    )
    # the global view of the same step
    assert trial.step_header(4, ModeKeys.GLOBAL).mode_step == 1
    assert trial.tensor_names(collection="predictions") == ["prediction"]
    end = json.loads((tmp_path / "end.json").read_text())
    assert end["last_step"] == {"TRAIN": 2, "EVAL": 1, "PREDICT": 1}
    assert end["global_step"] == 6


def test_tensor_saved_after_the_step_was_written_is_dropped_with_a_warning(
    tmp_path: Path,
) -> None:
    hook = Hook(tmp_path, collections={"losses": SaveConfig(save_interval=1)})
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.register_module(model)
    hook.register_optimizer(optimizer)
    loss = model(torch.ones(1, 2)).sum()
    hook.save_tensor("loss", loss, collection="losses")
    loss.backward()
    optimizer.step()  # writes the step
    with pytest.warns(DebuggerWarning, match="after its step was written"):
        hook.save_tensor("late", torch.ones(1), collection="losses")
    hook.close()
    assert create_trial(tmp_path).tensor_names() == ["loss"]


def test_user_tensors_use_the_hook_save_config_unless_configured(tmp_path: Path) -> None:
    hook = Hook(tmp_path, save_config=SaveConfig(save_interval=2))
    model = torch.nn.Linear(2, 1)
    hook.register_module(model)
    for step in range(5):
        model(torch.ones(1, 2))
        hook.save_tensor("accuracy", np.float32(step / 10), collection="metrics")
    with pytest.raises(TypeError, match="numbers only"):
        hook.save_tensor("label", "cat", collection="metrics")
    hook.close()
    trial = create_trial(tmp_path)
    assert trial.tensor("accuracy").steps() == [0, 2, 4]
    assert float(trial.tensor("accuracy").value(4)) == pytest.approx(0.4)
    assert trial.tensor_names(collection="metrics") == ["accuracy"]


def test_refuses_an_existing_store(tmp_path: Path) -> None:
    Hook(tmp_path).close()
    with pytest.raises(FileExistsError):
        Hook(tmp_path)


def test_close_is_idempotent_and_detaches(tmp_path: Path) -> None:
    hook = Hook(tmp_path, collections={"losses": SaveConfig(save_interval=1)})
    train(hook, steps=2)
    hook.close()
    hook.close()
    assert create_trial(tmp_path).steps() == [0, 1]


def test_full_queue_blocks_the_producer_until_the_writer_catches_up(tmp_path: Path) -> None:
    release = threading.Event()

    def slow_to_numpy(value: np.ndarray) -> np.ndarray:
        release.wait()
        return value

    writer = StoreWriter(
        tmp_path, {}, SaveConfig(), slow_to_numpy, "numpy", "0", max_pending_steps=1
    )

    def record(step: int) -> StepRecord:  # 80 kB: over SMALL_STEP_BYTES, handed over at once
        return StepRecord(ModeKeys.TRAIN, step, step, 0.0, {"x": np.ones(10_000)}, {"x": "default"})

    writer.put(record(0))  # taken by the writer thread, which then waits in slow_to_numpy
    producer = threading.Thread(target=lambda: [writer.put(record(s)) for s in (1, 2)])
    producer.start()
    producer.join(timeout=0.5)
    assert producer.is_alive()  # queue of 1 is full: the producer is held back
    release.set()
    producer.join(timeout=30)
    assert not producer.is_alive()
    writer.close({ModeKeys.TRAIN: 2}, 2)
    assert create_trial(tmp_path).steps() == [0, 1, 2]


def test_small_steps_go_in_batches_in_order_and_none_waits_for_the_next_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loss-sized steps wait in a batch (no thread switch per step), large ones go at once
    after it; every step is written in the order put, and a training loop that pauses
    finds its last small steps on disk without a flush: the writer takes them itself."""
    batched_from_the_first_step(monkeypatch)
    written: list[int] = []

    class Recording(StoreWriter):
        def _write_steps(self, records: list[StepRecord]) -> None:
            written.extend(record.mode_step for record in records)
            super()._write_steps(records)

    writer = Recording(tmp_path, {}, SaveConfig(), lambda v: v, "numpy", "0")
    sizes = {s: 10_000 if s in (5, 9) else 1 for s in range(12)}  # 5 and 9: 80 kB
    for step, size in sizes.items():
        tensors = {"x": np.full(size, step, dtype=np.float64)}
        writer.put(StepRecord(ModeKeys.TRAIN, step, step, 0.0, tensors, {"x": "default"}))
    deadline = time.monotonic() + 30
    while len(written) < len(sizes) and time.monotonic() < deadline:
        time.sleep(0.01)  # no put, no flush: the writer's own look takes steps 10 and 11
    assert written == list(sizes)
    # Each batch's steps in one pack; the large ones in files of their own.
    names = [p.name for p in (tmp_path / "steps" / "TRAIN").iterdir()]
    files = [f for f in map(store.parse_steps_folder_name, names) if f is not None]
    assert len(files) == len(names) and len(files) < len(sizes)
    assert {(f.first, f.last) for f in files} >= {(5, 5), (9, 9)}
    trial = create_trial(tmp_path)
    assert trial.steps() == list(sizes)
    assert [float(trial.tensor("x").value(s)[0]) for s in sizes] == [float(s) for s in sizes]
    writer.close({ModeKeys.TRAIN: 11}, 11)


def step_of(step: int, size: int) -> StepRecord:
    """A step of one tensor of `size` float64s: 10,000 (80 kB) goes to the writer at once,
    a few wait in a batch."""
    return StepRecord(ModeKeys.TRAIN, step, step, 0.0, {"x": np.ones(size)}, {"x": "c"})


def writer_racing_its_first_look(
    tmp_path: Path, race: Callable[[StoreWriter], None]
) -> StoreWriter:
    """A writer with a queue of 1 whose first look at its queue finds it empty, and runs
    `race` (what the training thread did meanwhile) before it goes on."""
    started = threading.Event()

    class Racing(StoreWriter):
        def _run(self) -> None:
            started.wait()  # until its queue's get is replaced
            super()._run()

    writer = Racing(tmp_path, {}, SaveConfig(), lambda v: v, "numpy", "0", max_pending_steps=1)
    real_get = writer._queue.get
    raced: list[bool] = []

    def get(block: bool = True, timeout: float | None = None) -> object:
        if not raced:  # as if the look timed out while the training thread ran on
            raced.append(True)
            race(writer)
            raise queue.Empty
        return real_get(block, timeout)

    writer._queue.get = get  # type: ignore[method-assign]
    started.set()
    return writer


def test_the_writers_own_look_never_waits_on_the_queue_it_alone_empties(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer finds its queue empty, then (before it takes the small steps itself) the
    training thread fills the queue and leaves a small step in a batch: the writer must
    not block handing that batch to its own full queue."""
    batched_from_the_first_step(monkeypatch)

    def fill(writer: StoreWriter) -> None:
        writer.put(step_of(0, 10_000))  # at once: fills the queue of 1
        writer.put(step_of(1, 2))  # waits in a batch

    writer = writer_racing_its_first_look(tmp_path, fill)
    steps = tmp_path / "steps" / "TRAIN"
    deadline = time.monotonic() + 30
    while len(list(steps.glob("*.safetensors")) if steps.exists() else []) < 2:
        assert time.monotonic() < deadline, "the writer is stuck"
        time.sleep(0.01)
    writer.close({ModeKeys.TRAIN: 1}, 1)
    assert create_trial(tmp_path).steps() == [0, 1]


def test_the_writers_own_look_never_waits_for_a_training_thread_held_by_a_full_queue(
    tmp_path: Path,
) -> None:
    """The writer finds its queue empty; before it looks at the batch, the training thread
    fills the queue and waits on it, holding the hand-over lock: the writer must go on
    emptying the queue, not wait for that lock."""
    trainers: list[threading.Thread] = []

    def fill_and_wait(writer: StoreWriter) -> None:
        trainer = threading.Thread(target=lambda: [writer.put(step_of(s, 10_000)) for s in (0, 1)])
        trainers.append(trainer)
        trainer.start()
        deadline = time.monotonic() + 30
        while not (writer._queue.full() and writer._hand_over_lock.locked()):
            assert time.monotonic() < deadline
            time.sleep(0.01)  # step 0 queued, step 1 waiting on the full queue

    writer = writer_racing_its_first_look(tmp_path, fill_and_wait)
    deadline = time.monotonic() + 30
    while not trainers and time.monotonic() < deadline:
        time.sleep(0.01)
    trainers[0].join(timeout=30)
    assert not trainers[0].is_alive(), "the writer and the training thread wait on each other"
    writer.close({ModeKeys.TRAIN: 1}, 1)
    assert create_trial(tmp_path).steps() == [0, 1]


def test_a_step_that_fails_to_write_stops_no_other_step_of_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batched_from_the_first_step(monkeypatch)

    def to_numpy(value: np.ndarray) -> np.ndarray:
        if value.dtype == np.int8:
            raise ValueError("cannot convert")
        return value

    writer = StoreWriter(tmp_path, {}, SaveConfig(), to_numpy, "numpy", "0")
    for step in range(3):
        dtype = np.int8 if step == 1 else np.float32
        record = StepRecord(ModeKeys.TRAIN, step, step, 0.0, {"x": np.ones(2, dtype)}, {"x": "c"})
        writer.put(record)
    writer.flush()
    assert [p.name for p in (tmp_path / "steps" / "TRAIN").iterdir()] == [
        store.pack_file_name(0, 2)  # step 1 left out of its batch's pack
    ]
    with pytest.raises(StoreWriteError, match="cannot convert"):
        writer.put(StepRecord(ModeKeys.TRAIN, 3, 3, 0.0, {"x": np.ones(2)}, {"x": "c"}))


def test_reader_side_imports_no_torch() -> None:
    code = (
        "import sys, remedy.debugger, remedy.debugger.evaluator, remedy.debugger.trial\n"
        "import remedy.debugger.rules\n"
        "from remedy.debugger import Hook, create_trial\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_model_and_optimizer_with_the_hook_pickle_and_copies_do_not_capture(
    tmp_path: Path,
) -> None:
    every = SaveConfig(save_interval=1)
    hook = Hook(
        tmp_path / "store",
        collections={"losses": every, "gradients": every, "activations": every},
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    criterion = torch.nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(optimizer)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def step(net: torch.nn.Module, loss_fn: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()

    for _ in range(2):
        step(model, criterion, optimizer)
    assert hook.global_step == 1

    torch.save(model, tmp_path / "model.pt")
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    copied = copy.deepcopy(model)
    copied_criterion = copy.deepcopy(criterion)
    copied_optimizer = pickle.loads(pickle.dumps(optimizer))
    for net in (loaded, copied):
        for name, value in model.state_dict().items():
            torch.testing.assert_close(net.state_dict()[name], value)

    # the copies train without touching the hook or its store
    step(loaded, copied_criterion, torch.optim.SGD(loaded.parameters(), lr=0.01))
    step(copied, copied_criterion, copied_optimizer)
    copied_optimizer.step()
    hook.flush()
    assert hook.global_step == 1
    assert len(create_trial(tmp_path / "store").steps()) == 2

    step(model, criterion, optimizer)  # the original still captures
    hook.close()
    trial = create_trial(tmp_path / "store")
    assert trial.steps() == [0, 1, 2]
    assert "loss" in trial.step_header(2).tensor_names
    assert "gradient/0.weight" in trial.step_header(2).tensor_names
    assert trial.tensor_names(collection="activations")  # the per-submodule hooks too


def test_a_caller_numbers_its_steps_and_registers_a_module_for_activations_only(
    tmp_path: Path,
) -> None:
    """What a framework callback does: steps numbered by the framework's global step (a
    resumed run starts above 0), the module's forward begins no step, its activations and
    input go into the caller's step."""
    every = SaveConfig(save_interval=1)
    hook = Hook(tmp_path, collections={"losses": every, "activations": every, "inputs": every})
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    hook.register_module(model, count_steps=False)
    x = torch.randn(2, 3)
    for step in (5, 6, 9):
        assert hook.begin_step(ModeKeys.TRAIN, step) == step
        model(x)
        model(x)  # a second micro-batch: the same step
        hook.save_tensor("loss", torch.tensor(float(step)), collection="losses")
        hook.end_step()
    assert hook.begin_step("EVAL") == 0  # a mode without a number counts from 0
    with pytest.raises(ValueError, match="TRAIN step 9 does not follow step 9"):
        hook.begin_step(ModeKeys.TRAIN, 9)
    with pytest.raises(TypeError):
        hook.begin_step(ModeKeys.TRAIN, True)  # type: ignore[arg-type]
    hook.close()

    trial = create_trial(tmp_path)
    assert trial.steps() == [5, 6, 9]
    assert {s: float(v) for s, v in trial.tensor("loss").values().items()} == {5: 5, 6: 6, 9: 9}
    assert trial.tensor_names(collection="activations") == ["1/relu_output"]
    np.testing.assert_array_equal(trial.tensor("input").value(9), x.numpy())
