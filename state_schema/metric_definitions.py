"""A job's own metrics, found in its log: the cloud service's MetricDefinitions.

A script prints what it measures (`valid ppl 148.4`, `test accuracy 0.91`); a metric
definition names one such figure and gives the regular expression that finds it, as
CreateTrainingJob's AlgorithmSpecification.MetricDefinitions does ({"Name", "Regex"}, with the
service's limits: a name of 1-255 and a regex of 1-500 characters, at most 40 definitions).
Every log line the regex matches is one value of the metric (its first match on the line); the
last value is the job's final value of that metric. A figure printed as a percentage is
read as a fraction where its definition says `"percent": true` (ours; not sent to the
service, whose figures are divided where they are read back).
"""

from __future__ import annotations

import math
import re

import regex as timed_re  # re's syntax, with a time limit on a match
from pydantic import Field, field_validator

from remedy.state_schema.base import Strict

MAX_METRIC_DEFINITIONS = 40  # the service's MetricDefinitionList limit
MATCH_TIMEOUT_S = 0.1  # longest one regex may take on one log line (lines are capped, 4 KiB)


class MetricDefinition(Strict):
    """One metric of the job's log: its name and the regex with one group for its value."""

    name: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[^\r\n]+$",
        description="The metric's name, e.g. test:perplexity (what success_criteria and the "
        "reports call it).",
    )
    regex: str = Field(
        min_length=1,
        max_length=500,
        description="A Python regular expression with exactly one capture group, the value, "
        "matched against each line of the job's log, "
        r'e.g. "test ppl\s+([0-9.eE+-]+)" (in JSON: "test ppl\\s+([0-9.eE+-]+)").',
    )

    percent: bool = Field(
        False,
        exclude_if=lambda value: not value,
        description="The value is printed as a percentage (`Accuracy: 9812/10000 (98%)`): "
        "divided by 100 where it is read, so an accuracy is a fraction, as the verdict "
        "compares it with chance and success_criteria state it (test:accuracy >= 0.9).",
    )

    @field_validator("regex")
    @classmethod
    def _one_group(cls, regex: str) -> str:
        if "\n" in regex or "\r" in regex:
            raise ValueError("is matched against one log line: it cannot contain a line break")
        try:
            compiled = re.compile(regex)
        except re.error as error:
            raise ValueError(f"is not a valid regular expression: {error}") from None
        if compiled.groups != 1:
            raise ValueError(
                f"must have exactly one capture group, the metric's value; it has "
                f"{compiled.groups} (write other groups as (?:...))"
            )
        return regex

    def value_in(self, line: str, timeout_s: float = MATCH_TIMEOUT_S) -> float | None:
        """The metric's value on this log line; None when the line does not give one.
        A non-finite value (nan, inf) is returned as it is: the job reported it.
        TimeoutError when matching takes longer than timeout_s: a regex that backtracks
        catastrophically ((a+)+$) must not hang whoever reads the log."""
        found = timed_re.search(self.regex, line, timeout=timeout_s)  # the pattern is cached
        if found is None or found.group(1) is None:
            return None
        try:
            value = float(found.group(1))
        except ValueError:
            return None  # matched text that is not a number, e.g. "..." or "-"
        return value / 100 if self.percent else value


def is_finite(value: object) -> bool:
    """A metric value fit for final metrics: a real, finite number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
