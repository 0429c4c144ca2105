"""Leave out training samples that the NaN guard traced a repeated failure to."""

from __future__ import annotations

from collections.abc import Iterable

from remedy.state_schema import Finding, RunSpec
from remedy.strategies.base import Strategy, register_strategy


@register_strategy
class DropBadSamples(Strategy):
    """Add the samples of a finding's data problem to run_spec.exclude_samples.

    The samples come from the findings, which apply() does not see: a policy builds it with
    DropBadSamples.for_findings(findings). Built without samples (get_strategy) it never
    applies.
    """

    name = "drop_bad_samples"
    changes = ("exclude_samples",)
    explanation = "Leave out the training samples that failed repeatedly (bad records)"

    def __init__(self, samples: Iterable[int] = ()) -> None:
        self.samples = sorted(set(samples))

    @classmethod
    def for_findings(cls, findings: Iterable[Finding]) -> DropBadSamples:
        """The samples of every finding that the monitor traced to the data."""
        return cls(i for f in findings if f.data_problem for i in f.data_problem.samples)

    def applies(self, spec: RunSpec) -> bool:
        return bool(set(self.samples) - set(spec.role("exclude_samples")))

    def apply(self, spec: RunSpec) -> RunSpec:
        excluded = sorted(set(spec.role("exclude_samples")) | set(self.samples))
        return spec.with_roles({"exclude_samples": excluded})
