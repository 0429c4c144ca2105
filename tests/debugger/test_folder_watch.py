"""A busy evaluator wakes when a file lands in a local store (inotify), not at its next
poll; where inotify is missing it polls as before."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import ModeKeys, RuleStatus, create_trial
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.folder_watch import FolderWatch, store_folders
from remedy.debugger.rule_config import RuleConfig
from tests.debugger.helpers import new_store, write_pack, write_step

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")


def test_a_file_renamed_into_a_folder_that_appeared_later_wakes_the_wait(tmp_path: Path) -> None:
    root = new_store(tmp_path / "store")
    watch = FolderWatch.open()
    assert watch is not None
    try:
        watch.watch(store_folders(str(root)))
        assert not watch.wait(0.05)  # nothing yet
        write_step(root, 0, {"loss": np.array(1.0)})  # makes steps/ and steps/TRAIN
        assert watch.wait(5.0)  # steps/ appeared (and, as it is watched, nothing else yet)
        watch.watch(store_folders(str(root)))
        assert str(root / "steps" / "TRAIN") in map(str, store_folders(str(root)))
        (root / "steps" / "TRAIN" / ".tmp").write_bytes(b"x")  # a temp file is not news
        assert not watch.wait(0.05)
        write_pack(root, {1: {"loss": np.array(0.9)}, 2: {"loss": np.array(0.8)}})
        assert watch.wait(5.0)
    finally:
        watch.close()


def run_until_a_later_step_is_found(root: Path, status: Path, interval: float) -> bool:
    """An evaluator run in a thread with both intervals `interval`; once it has evaluated
    step 0, step 1 (a NaN loss) is written: whether it found it within 20 s."""
    write_step(root, 0, {"loss": np.array(1.0)})
    evaluator = RuleEvaluator(
        create_trial(root), [RuleConfig("Explode", "ExplodingTensor")], status,
        log=lambda line: None,
    )  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=evaluator.run, args=(interval, stop, interval), daemon=True)
    thread.start()
    try:
        while not evaluator.statuses["Explode"].steps_evaluated:
            assert thread.is_alive()
            stop.wait(0.01)
        write_step(root, 1, {"loss": np.array(np.nan)})
        thread.join(timeout=20)  # the finding makes every rule final: the run returns
    finally:
        stop.set()
    record = evaluator.statuses["Explode"]
    return (record.status, record.step, record.mode) == (
        RuleStatus.ISSUES_FOUND,
        1,
        ModeKeys.TRAIN,
    )


def test_a_busy_evaluator_finds_a_step_as_it_lands_not_at_its_next_poll(tmp_path: Path) -> None:
    """Both intervals 60 s: only the watch can make it see the step within the test."""
    root = new_store(tmp_path / "store")
    assert run_until_a_later_step_is_found(root, tmp_path / "status", 60.0)


def test_without_inotify_the_evaluator_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert FolderWatch.open() is None
    root = new_store(tmp_path / "store")
    assert run_until_a_later_step_is_found(root, tmp_path / "status", 0.05)


def test_a_stop_file_renamed_into_place_is_seen_at_once_not_at_the_next_poll(
    tmp_path: Path,
) -> None:
    """The launcher's stop-file watcher with a 60 s poll: only the watch can make it see
    the file within the test."""
    from remedy.debugger import store
    from remedy.training.stopping import StopRequest

    stop = StopRequest(tmp_path / "stop_request", poll_s=60.0)
    original = signal.getsignal(signal.SIGTERM)
    try:
        stop.install()
        seen = threading.Event()
        store.write_json(tmp_path / "stop_request", {"reason": "a rule fired"})
        for _ in range(2000):
            if stop.requested:
                break
            seen.wait(0.01)
        assert stop.requested, "the stop file was not seen: no wake on its folder"
        assert stop.reason == f"stop file {tmp_path / 'stop_request'}"
    finally:
        stop.close()
        signal.signal(signal.SIGTERM, original)
