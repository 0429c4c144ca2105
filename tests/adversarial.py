"""The adversarial suite's counts (issue 13), printed at the end of every test session.

Two ways in:
- a test that is one adversarial case (a fault injected into real processes, a secret that
  must not leak) is marked `@pytest.mark.adversarial(SUITE, fails_as=OUTCOME)`: it counts
  as handled cleanly when it passes, as OUTCOME (what its failure would mean) when it fails;
- a test of many cases (the fuzzers, the bad-spec corpus) calls `record(SUITE, counts)`.

tests/conftest.py collects both and prints the table (pytest's terminal summary). Under
workers (pytest -n) a test's counts travel on its report to the main process, which tallies
them: record() only notes them where the test runs (drain() hands them to the report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

OUTCOMES = ("handled cleanly", "crashed", "hung", "silently wrong", "lost", "leaked")
COUNTS: dict[str, Counter[str]] = {}  # tallied, in the process that prints the table
PENDING: list[tuple[str, dict[str, int]]] = []  # recorded by the running test, not yet reported


def record(suite: str, counts: Mapping[str, int]) -> None:
    """A suite's cases: `counts` maps outcomes (OUTCOMES) to numbers of cases."""
    unknown = set(counts) - set(OUTCOMES) - {"cases"}
    assert not unknown, f"not an outcome: {sorted(unknown)}"
    PENDING.append((suite, dict(counts)))


def drain() -> list[tuple[str, dict[str, int]]]:
    """What the running test recorded since the last drain (for its report)."""
    found = PENDING[:]
    PENDING.clear()
    return found


def tally(suite: str, counts: Mapping[str, int]) -> None:
    """Add a suite's cases to the table."""
    table = COUNTS.setdefault(suite, Counter())
    for outcome in OUTCOMES:
        table[outcome] += counts.get(outcome, 0)
    table["cases"] += sum(counts.get(outcome, 0) for outcome in OUTCOMES)


def summary() -> list[str]:
    """The table: one line per suite, then the totals."""
    if not COUNTS:
        return []
    names = ["cases", *OUTCOMES]
    width = max(len(suite) for suite in [*COUNTS, "all"])
    header = f"{'suite':<{width}}  " + "  ".join(names)
    lines = [header]
    total: Counter[str] = Counter()
    for suite in sorted(COUNTS):
        total.update(COUNTS[suite])
        lines.append(_row(suite, COUNTS[suite], names, width))
    lines.append(_row("all", total, names, width))
    return lines


def _row(suite: str, counts: Counter[str], names: list[str], width: int) -> str:
    return f"{suite:<{width}}  " + "  ".join(f"{counts[n]:>{len(n)}}" for n in names)
