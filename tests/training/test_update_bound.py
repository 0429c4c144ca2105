"""UpdateBound (training/stopping.py): a probe's bound, held where the job can be continued."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from remedy.training.stopping import StopRequest, UpdateBound


def test_without_a_continue_file_the_bound_stops_the_job(tmp_path: Path) -> None:
    stop, said = StopRequest(tmp_path / "stop"), []
    bound = UpdateBound(3, None, stop, said.append)
    bound.reached(2)
    assert not stop.requested
    bound.reached(3)
    assert stop.reason == "REMEDY_MAX_UPDATES: 3 updates run" and said == []


def test_a_held_job_nobody_continues_stops_itself_after_the_limit(tmp_path: Path) -> None:
    """A flow that is gone never leaves a job held for ever: past limit_s it stops as a
    bounded job does, saying so; its progress was written before it began to wait."""
    stop, said, flushed = StopRequest(tmp_path / "stop"), [], []
    bound = UpdateBound(
        2, tmp_path / "continue", stop, said.append, lambda: flushed.append(1), limit_s=0.3
    )
    started = time.monotonic()
    bound.reached(2)
    assert time.monotonic() - started >= 0.3
    assert stop.reason == "REMEDY_MAX_UPDATES: 2 updates run, held 0.3 s without being continued"
    assert flushed == [1] and said[0].startswith("held at its bound (2 updates)")


def test_a_held_job_continued_trains_on_past_its_bound(tmp_path: Path) -> None:
    stop, said = StopRequest(tmp_path / "stop"), []
    go_on = tmp_path / "continue"
    bound = UpdateBound(2, go_on, stop, said.append, limit_s=30)
    threading.Timer(0.3, go_on.touch).start()
    bound.reached(2)
    assert not stop.requested and said[-1].startswith("continued after 2 updates")
    bound.reached(50)  # the bound is spent: the job trains to its own end
    assert not stop.requested


def test_a_continue_file_naming_a_further_bound_holds_there_again(tmp_path: Path) -> None:
    """{"max_updates": N}: the file taken away, the job trains on to N and holds there
    again; a bound already passed is said, and the job trains on to its end."""
    stop, said = StopRequest(tmp_path / "stop"), []
    go_on = tmp_path / "continue"
    bound = UpdateBound(2, go_on, stop, said.append, limit_s=0.3)
    go_on.write_text(json.dumps({"max_updates": 5}))
    bound.reached(2)
    assert not go_on.exists() and said[-1] == "continued after 2 updates: on to 5, to hold again"
    bound.reached(4)
    assert not stop.requested and len(said) == 2  # not at 5 yet: no hold
    go_on.write_text(json.dumps({"max_updates": 3}))  # passed already
    bound.reached(5)
    assert said[-2:] == [
        "the continue file's max_updates 3 is passed",
        "continued after 5 updates: training on to the job's end",
    ]
    bound.reached(50)
    assert not stop.requested
