"""Modes a training job runs in; each has its own step counter."""

from __future__ import annotations

from enum import StrEnum


class ModeKeys(StrEnum):
    """TRAIN/EVAL/PREDICT steps are counted separately; GLOBAL counts every step.

    A StrEnum so that the value is the on-disk spelling (`steps/TRAIN/...`, "mode": "TRAIN").
    """

    TRAIN = "TRAIN"
    EVAL = "EVAL"
    PREDICT = "PREDICT"
    GLOBAL = "GLOBAL"

    @classmethod
    def parse(cls, value: ModeKeys | str) -> ModeKeys:
        """Accept a member or its name in any case ("train" -> TRAIN)."""
        if isinstance(value, ModeKeys):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown mode {value!r}; expected one of {names}") from None


# Modes that own step files on disk; GLOBAL is a view over all of them.
STEP_MODES: tuple[ModeKeys, ...] = (ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT)
