"""run_spec.metric_definitions: the cloud service's MetricDefinitions, checked before launch."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from remedy.state_schema import MetricDefinition, RunSpec

PPL = r"test ppl\s+([0-9.eE+-]+)"


def script(**fields: object) -> RunSpec:
    return RunSpec.model_validate({"source_dir": ".", "entry_point": "main.py", **fields})


def refusal(definitions: list[dict[str, str]]) -> str:
    with pytest.raises(ValidationError) as refused:
        script(metric_definitions=definitions)
    return str(refused.value)


def test_a_definition_reads_the_number_its_group_captures() -> None:
    ppl = MetricDefinition(name="test:perplexity", regex=PPL)
    assert ppl.value_in("| End of training | test loss  5.00 | test ppl   148.42") == 148.42
    assert ppl.value_in("test ppl 1.5e+03, valid ppl 2") == 1500.0
    assert ppl.value_in("valid ppl 148.42") is None  # no match
    assert ppl.value_in("test ppl ...") is None  # a match that is no number
    assert math.isnan(MetricDefinition(name="x", regex=r"x=(\S+)").value_in("x=nan"))


def test_a_percentage_is_read_as_a_fraction_where_its_definition_says_so() -> None:
    """PyTorch's MNIST example prints `Accuracy: 9812/10000 (98%)`: read as 0.98, the
    fraction the verdict compares with chance; left out of a payload where not said."""
    regex = r"Accuracy: \d+/\d+ \(([0-9.]+)%\)"
    line = "Test set: Average loss: 0.0301, Accuracy: 9812/10000 (98%)"
    assert MetricDefinition(name="test:accuracy", regex=regex, percent=True).value_in(line) == 0.98
    plain = MetricDefinition(name="test:accuracy", regex=regex)
    assert plain.value_in(line) == 98.0 and "percent" not in plain.model_dump()
    # a criterion stated in percent on a metric read as a fraction could never be met:
    # refused before launch, naming it
    percent = [{"name": "test:accuracy", "regex": regex, "percent": True}]
    fraction = [{"metric": "test:accuracy", "op": ">=", "value": 0.9}]
    script(metric_definitions=percent, success_criteria=fraction)
    with pytest.raises(ValidationError) as refused:
        script(metric_definitions=percent, success_criteria=[fraction[0] | {"value": 90}])
    assert "success_criteria.0" in str(refused.value)
    assert "90 is never between 0 and 1; state it as one (e.g. 0.9)" in str(refused.value)


def test_a_run_spec_keeps_its_definitions_in_order() -> None:
    spec = script(
        metric_definitions=[
            {"name": "test:perplexity", "regex": PPL},
            {"name": "valid:loss", "regex": r"valid loss (?:is )?([0-9.]+)"},  # (?:) is no group
        ]
    )
    assert [d.name for d in spec.metric_definitions] == ["test:perplexity", "valid:loss"]
    assert RunSpec.model_validate_json(spec.model_dump_json()) == spec
    assert RunSpec().metric_definitions == []  # none unless defined


@pytest.mark.parametrize(
    ("regex", "why"),
    [
        ("test ppl [0-9.]+", "exactly one capture group, the metric's value; it has 0"),
        (r"(test) ppl ([0-9.]+)", "it has 2"),
        ("test ppl ([0-9.]+", "not a valid regular expression"),
        ("test\nppl ([0-9.]+)", "cannot contain a line break"),
        ("", "at least 1 character"),
        ("(" + "x" * 500 + ")", "at most 500 characters"),
    ],
)
def test_a_bad_regex_is_refused_naming_the_field(regex: str, why: str) -> None:
    message = refusal([{"name": "test:perplexity", "regex": PPL}, {"name": "b", "regex": regex}])
    assert "metric_definitions.1.regex" in message and why in message


def test_names_are_the_services_and_unique() -> None:
    assert "metric_definitions.0.name" in refusal([{"name": "", "regex": PPL}])
    assert "at most 255 characters" in refusal([{"name": "n" * 256, "regex": PPL}])
    twice = refusal([{"name": "ppl", "regex": PPL}, {"name": "ppl", "regex": r"ppl (\d+)"}])
    assert "defined twice: ppl" in twice
    many = [{"name": f"m{i}", "regex": PPL} for i in range(41)]
    assert "at most 40 items" in refusal(many)
    assert len(script(metric_definitions=many[:40]).metric_definitions) == 40
