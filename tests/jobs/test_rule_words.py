"""Rule status words: the debugger's vocabulary, read once at the job boundary and carried
into the payload's under the same words."""

from __future__ import annotations

from remedy.debugger.status import RuleStatus as DebuggerWord
from remedy.jobs import RuleEvaluation
from remedy.state_schema import RuleStatus as PayloadWord


def test_every_word_the_debugger_writes_is_a_payload_word() -> None:
    assert {word.value for word in DebuggerWord} <= {word.value for word in PayloadWord}


def test_a_status_read_is_a_debugger_word_and_an_unknown_one_an_error_naming_it() -> None:
    fired = RuleEvaluation.model_validate(
        {"RuleConfigurationName": "Loss", "RuleEvaluationStatus": "IssuesFound"}
    )
    assert fired.status is DebuggerWord.ISSUES_FOUND and fired.is_final
    odd = RuleEvaluation.model_validate(
        {"RuleConfigurationName": "Loss", "RuleEvaluationStatus": "Pending", "StatusDetails": "x"}
    )
    assert odd.status is DebuggerWord.ERROR and odd.is_final  # never pending for ever
    assert odd.details == "an unknown rule status word 'Pending' (x)"
    waiting = RuleEvaluation(name="Loss", status="InProgress")
    assert waiting.status is DebuggerWord.IN_PROGRESS and not waiting.is_final
