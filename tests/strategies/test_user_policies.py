"""Policies a user writes: as configuration (policy 'config') and as a Python class."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from remedy.decisions.plan import plan_next
from remedy.state_schema import Finding, NextAction, State
from remedy.state_schema.transitions import begin_attempt
from remedy.strategies import (
    POLICIES,
    Decision,
    Policy,
    check_policy_name,
    get_policy,
    get_strategy,
    register_policy,
)

FIRED = [Finding(rule="ExplodingTensor", step=5)]
CONFIG = {
    "ExplodingTensor": [
        {"strategy": "clip_gradients", "max_times": 2},
        {"strategy": "not_a_strategy"},
        {"strategy": "add_batch_norm"},
    ],
    "*": [{"strategy": "use_adam"}],
}


def ladder(state: State, findings: list[Finding]) -> tuple[list[str], State]:
    chosen = []
    state = begin_attempt(state, "job-0")
    for i in range(20):
        state = plan_next(state, findings)
        if state.next_action is NextAction.end:
            return chosen, state
        chosen.append(state.planned_change.strategy)
        state = begin_attempt(state, f"job-{i + 1}")
    raise AssertionError("the policy never ended")


def test_config_policy_follows_the_order_with_limits_and_explains_the_end() -> None:
    chosen, final = ladder(State(policy="config", policy_config=CONFIG), FIRED)
    assert chosen == ["clip_gradients", "clip_gradients", "add_batch_norm"]
    reason = final.end_reason or ""
    assert "not_a_strategy: not installed" in reason
    assert "clip_gradients: tried 2x, failed" in reason


def test_config_policy_star_covers_other_findings() -> None:
    chosen, _ = ladder(
        State(policy="config", policy_config=CONFIG), [Finding(rule="Overfit", step=9)]
    )
    assert chosen == ["use_adam"]


def test_config_policy_without_config_ends_with_the_reason() -> None:
    _, final = ladder(State(policy="config"), FIRED)
    assert "needs policy_config" in (final.end_reason or "")


def test_policy_config_can_be_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(CONFIG))
    state = State.model_validate({"policy": "config", "policy_config": str(path)})
    assert state.policy_config["ExplodingTensor"][0].max_times == 2
    with pytest.raises(ValueError, match="policy_config file"):
        State.model_validate({"policy_config": str(tmp_path / "missing.json")})


class AlwaysBatchNorm(Policy):
    name = "always_batch_norm_test"

    def decide(self, state, findings, clean_checkpoint):  # noqa: ANN001, ANN201
        strategy = get_strategy("add_batch_norm")
        return Decision(strategy if strategy.applies(state.run_spec) else None)


def test_a_registered_python_policy_is_used_by_name() -> None:
    register_policy(AlwaysBatchNorm)
    chosen, final = ladder(State(policy="always_batch_norm_test"), FIRED)
    assert chosen == ["add_batch_norm"]
    assert "always_batch_norm_test" in (final.end_reason or "")


def test_a_python_policy_by_import_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_policies.py").write_text(
        "from remedy.strategies import Decision, Policy, get_strategy\n"
        "class LrOnly(Policy):\n"
        "    name = 'lr_only'\n"
        "    def decide(self, state, findings, clean_checkpoint):\n"
        "        s = get_strategy('lower_lr_10x')\n"
        "        return Decision(s if s.applies(state.run_spec) else None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert get_policy("my_policies:LrOnly").name == "lr_only"
    chosen, _ = ladder(State(policy="my_policies:LrOnly"), FIRED)
    assert chosen and set(chosen) == {"lower_lr_10x"}
    with pytest.raises(ValueError, match="cannot import policy"):
        get_policy("my_policies:Nope")
    with pytest.raises(ValueError, match="not a Policy subclass"):
        get_policy("json:dumps")
    sys.modules.pop("my_policies", None)


@pytest.mark.adversarial("bad-spec corpus", fails_as="silently wrong")
def test_a_python_policy_is_checked_without_importing_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a payload never runs a module's code (issue 13: `policy: "module:X"` was
    imported while validating): its file is read, not imported."""
    marker = tmp_path / "imported"
    (tmp_path / "side_effects.py").write_text(
        f"open({str(marker)!r}, 'w').close()  # runs on import\n"
        "from remedy.strategies import Policy\n"
        "class Mine(Policy):\n"
        "    name = 'mine'\n"
        "class NotOne:\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    refused = {
        "side_effects:Missing": "defines no class Missing",
        "side_effects:NotOne": "does not derive from Policy",
        "side_effects:os.system": "is not package.module:ClassName",
        "no_such_module_here:Mine": "cannot find policy module",
    }
    for name, says in refused.items():
        with pytest.raises(ValueError, match=says):
            check_policy_name(name)
    check_policy_name("side_effects:Mine")  # accepted: imported when a run uses it
    assert "side_effects" not in sys.modules and not marker.exists()
    assert get_policy("side_effects:Mine").name == "mine"  # use imports it
    assert marker.exists()
    sys.modules.pop("side_effects", None)


def test_the_policy_class_of_docs_policies_md_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' example, copied as a user would: it chooses, then ends with its reason."""
    docs = (Path(__file__).parents[2] / "docs" / "policies.md").read_text()
    code = docs.split("# my_policies.py", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    (tmp_path / "docs_policies.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    check_policy_name("docs_policies:Cautious")
    chosen, final = ladder(State(policy="docs_policies:Cautious"), FIRED)
    assert chosen == ["lower_lr_10x", "add_batch_norm"]
    assert final.end_reason == "cautious: lower_lr_10x and add_batch_norm were tried"
    sys.modules.pop("docs_policies", None)
    POLICIES.pop("cautious", None)
