"""Where a launch of known length is asked whether its model has begun to learn, and where
it holds to be asked (records/asked_early.py says why). One place for the flow,
which knows a length before the job runs, and the launcher, which knows a length counted
in epochs only once it measured one (training/launch.py)."""

from __future__ import annotations

EIGHTH = 0.125
QUARTER = 0.25
HALF = 0.5
# The shares of a known length at which a cold start is asked, soonest first.
ASKED_AT = (EIGHTH, QUARTER, HALF)
SHARE_WORDS = {EIGHTH: "an eighth", QUARTER: "a quarter", HALF: "half"}
# The fewest updates a share must be to be asked (two loss windows: a shorter run's first
# and last windows overlap).
ASKED_MIN_STEPS = 40


def asking_point(length: int, share: float) -> int:
    """The update at which a launch of `length` updates is asked at `share` of it."""
    return int(length * share)


def hold_points(length: int) -> list[int]:
    """Where a launch of `length` updates holds to be asked, soonest first: at each share
    of ASKED_AT long enough to be asked (ASKED_MIN_STEPS). Held, it is asked at the update
    itself, not at the monitor's next look (tens of updates later for a fast job)."""
    points = sorted({asking_point(length, share) for share in ASKED_AT})
    return [point for point in points if point >= ASKED_MIN_STEPS]


def share_at(length: int, point: int) -> str:
    """The words for the share of `length` whose asking point is `point` ("a quarter")."""
    return next(SHARE_WORDS[s] for s in ASKED_AT if asking_point(length, s) == point)


def first_hold_from(length: int, updates: int) -> int | None:
    """Where a launch of `length` updates that has run `updates` of them holds next to be
    asked: the soonest of hold_points at or past `updates` (a length counted in epochs is
    known only once its job measured the first: an eighth inside it is past, one at its
    end is where the job stands, and it holds there); None past half."""
    return next((point for point in hold_points(length) if point >= updates), None)
