"""benchmarks/repair_quality.py's verdict per case: a fault the flow called clean as typed
(no finding, one launch) is counted as missed, not repaired, unless it ended within the
quality goal of its intended run (the char transformer at 100x its rate once ended clean at
1.622 against the intended 1.371 and was counted as repaired at 1.00x)."""

from __future__ import annotations

from typing import Any

from tests.debugger.helpers import load_benchmark

benchmark = load_benchmark("repair_quality")


def figures(runs: int, findings: int, clean: bool = True) -> Any:
    return benchmark.Figures(
        clean=clean, findings=findings, runs=runs, probes=0, total=400, final=400,
        quality=None, end="",
    )  # fmt: skip


def case(needs_repair: bool = True) -> Any:
    return benchmark.Case("char_transformer:hot100", {}, {}, "val:loss", True, needs_repair)


def test_a_fault_called_clean_as_typed_far_below_its_intended_run_is_missed() -> None:
    share = benchmark.versus_intended(case(), 1.622, 1.371)
    assert round(share, 3) == 0.845
    assert benchmark.missed(case(), figures(runs=1, findings=0), share)


def test_a_fault_called_clean_as_typed_within_the_goal_is_not_missed() -> None:
    share = benchmark.versus_intended(case(), 1.38, 1.371)
    assert not benchmark.missed(case(), figures(runs=1, findings=0), share)


def test_a_fault_with_no_quality_read_called_clean_as_typed_is_missed() -> None:
    assert benchmark.missed(case(), figures(runs=1, findings=0), None)


def test_a_repair_and_a_fault_meant_to_train_as_typed_are_not_missed() -> None:
    share = benchmark.versus_intended(case(), 1.622, 1.371)
    assert not benchmark.missed(case(), figures(runs=2, findings=1), share)
    assert not benchmark.missed(case(needs_repair=False), figures(runs=1, findings=0), share)


def test_higher_is_better_quality_is_a_share_the_other_way() -> None:
    accuracy = benchmark.Case("builtin:chance", {}, {}, "test:accuracy", False)
    assert round(benchmark.versus_intended(accuracy, 0.768, 0.968), 3) == 0.793
