"""The frozen-job limit learned from a job's pace (jobs/local/progress_watch.py), on given
times: a fast loop gets the floor, a slow one FACTOR times its slowest interval, the fixed
run_spec.progress_timeout_s stays above it all, and "fixed" turns learning off."""

from __future__ import annotations

import math

from remedy.jobs.local.progress_watch import FACTOR, MIN_INTERVALS, ProgressWatch


def watch_moving_every(interval: float, moves: int, **options: object) -> ProgressWatch:
    watch = ProgressWatch(0.0, **{"fixed_s": 1800.0, "adaptive": True, "floor": 300.0} | options)
    for n in range(1, moves + 1):
        watch.moved(100.0 + n * interval)  # the first move ends start-up, at 100 s
    return watch


def test_start_up_gets_the_fixed_limit() -> None:
    assert watch_moving_every(0.1, MIN_INTERVALS).limit_s() == 1800.0  # one move short


def test_a_fast_loop_gets_the_floor() -> None:
    assert watch_moving_every(0.1, 50).limit_s() == 300.0


def test_a_slow_loop_gets_factor_times_its_slowest_interval() -> None:
    watch = watch_moving_every(30.0, 10)
    watch.moved(watch.last_move + 60.0)  # one evaluation took twice as long
    assert watch.limit_s() == FACTOR * 60.0


def test_the_fixed_limit_stays_above_and_fixed_turns_learning_off() -> None:
    assert watch_moving_every(200.0, 10).limit_s() == 1800.0  # 20 x 200 s is past it
    assert watch_moving_every(0.1, 50, adaptive=False).limit_s() == 1800.0
    assert watch_moving_every(0.1, 50, fixed_s=None).limit_s() == math.inf  # null: never
