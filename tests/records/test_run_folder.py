"""One run per run directory, driven by one process at a time, never overwritten."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from remedy.records.run_folder import (
    FINISHED,
    RunBusy,
    RunMismatch,
    is_finished,
    load_run,
    lock_run,
    open_run_folder,
    persist,
    unlock_run,
)
from remedy.state_schema import RunSpec, State
from remedy.state_schema.transitions import begin_attempt


def a_state(learning_rate: float = 0.1) -> State:
    return State(run_spec=RunSpec(learning_rate=learning_rate))


def test_a_new_run_starts_and_a_retry_or_resume_goes_on_from_the_saved_state(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    start = a_state()
    assert open_run_folder(run_dir, start) == start
    progressed = begin_attempt(start, "tiny-1")
    persist(run_dir, progressed, "train")
    assert open_run_folder(run_dir, start) == progressed  # a retry of the flow run
    assert open_run_folder(run_dir, progressed) == progressed  # remedy resume
    assert load_run(run_dir) == progressed


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_another_run_in_the_folder_is_refused_and_nothing_is_overwritten(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    open_run_folder(run_dir, a_state())
    persist(run_dir, begin_attempt(a_state(), "tiny-1"), "train")
    before = (run_dir / "state.json").read_bytes()
    with pytest.raises(RunMismatch, match=r"already holds another run .* `remedy resume "):
        open_run_folder(run_dir, a_state(learning_rate=0.5))
    assert (run_dir / "state.json").read_bytes() == before


def test_the_journal_says_when_a_run_is_finished(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    open_run_folder(run_dir, a_state())
    assert not is_finished(run_dir)
    persist(run_dir, a_state(), FINISHED)
    assert is_finished(run_dir)
    persist(run_dir, a_state(), "resume")  # e.g. a resume that is still reporting
    assert not is_finished(run_dir)
    lines = (run_dir / "transitions.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["start", FINISHED, "resume"]


def hold_in_another_process(run_dir: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from remedy.records.run_folder import lock_run; "
            f"lock_run({str(run_dir)!r}, 'flow run brave-otter'); print('held', flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.adversarial("fault injection", fails_as="lost")
def test_a_second_process_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    holder = hold_in_another_process(run_dir)
    try:
        with pytest.raises(RunBusy, match=rf"pid {holder.pid} on .*flow run brave-otter"):
            lock_run(run_dir, "remedy resume")
    finally:
        holder.kill()  # a crash: nothing unlocks, the kernel does
        holder.wait()
    lock_run(run_dir, "remedy resume")
    lock_run(run_dir, "the flow, in the same process")  # held already: nothing to do
    unlock_run(run_dir)
    holder = hold_in_another_process(run_dir)  # and it is free for others again
    holder.kill()
    holder.wait()
