"""RULES.json: which rules the evaluator runs, with which parameters and actions.

    [{"name": "ExplodingTensor", "rule": "ExplodingTensor",
      "parameters": {"tensor_regex": ".*gradient"}, "actions": ["StopTraining", "Notify"]}]

`name` is the RuleConfigurationName (status file name, unique); `rule` the registry key,
or, with "rule_file": "path/to/my_rule.py", the name of a Rule subclass in that file
(a custom rule, evaluated exactly like the built-ins). An entry may also be a preset,
{"preset": "recommended"}, expanded into its rules (rule_presets.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STOP_TRAINING = "StopTraining"
NOTIFY = "Notify"  # acted on by the orchestrator; the evaluator only reports it
ACTIONS = (STOP_TRAINING, NOTIFY)

# The name becomes a file name: keep it to a safe alphabet.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$")  # and no ".."


class RuleConfigError(ValueError):
    """RULES.json is invalid. `problems` maps rule configuration names to what is wrong
    with them; `names` lists every configuration name that could be read."""

    def __init__(
        self,
        message: str,
        problems: Mapping[str, str] | None = None,
        names: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.problems = dict(problems or {})
        self.names = list(self.problems) if names is None else list(names)


@dataclass(frozen=True)
class RuleConfig:
    name: str
    rule: str
    parameters: dict[str, Any] = field(default_factory=dict)
    actions: tuple[str, ...] = ()
    rule_file: str | None = None

    @classmethod
    def from_dict(cls, data: Any) -> RuleConfig:
        """Raises ValueError naming the key that is wrong."""
        if not isinstance(data, Mapping):
            raise ValueError(f"must be an object, got {type(data).__name__}")
        unknown = set(data) - {"name", "rule", "parameters", "actions", "rule_file"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        name = data.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
            raise ValueError(f"name: must match {_NAME_RE.pattern}, got {name!r}")
        rule = data.get("rule", name)
        if not isinstance(rule, str) or not rule:
            raise ValueError(f"rule: must be a rule name, got {rule!r}")
        parameters = data.get("parameters") or {}
        if not isinstance(parameters, Mapping):
            raise ValueError(f"parameters: must be an object, got {type(parameters).__name__}")
        actions = data.get("actions") or []
        if not isinstance(actions, list) or any(a not in ACTIONS for a in actions):
            raise ValueError(f"actions: must be a list drawn from {list(ACTIONS)}, got {actions!r}")
        rule_file = data.get("rule_file")
        if rule_file is not None and (not isinstance(rule_file, str) or not rule_file):
            raise ValueError(f"rule_file: must be a path to a .py file, got {rule_file!r}")
        return cls(
            name=name,
            rule=rule,
            parameters=dict(parameters),
            actions=tuple(actions),
            rule_file=rule_file,
        )


def parse_rule_configs(data: Any) -> list[RuleConfig]:
    from remedy.debugger.rule_presets import expand_presets  # the rules, only when parsing

    if not isinstance(data, list):
        raise RuleConfigError(f"RULES.json must be a list of rules, got {type(data).__name__}")
    try:
        data = expand_presets(data)
    except ValueError as exc:
        raise RuleConfigError(str(exc)) from None
    configs: list[RuleConfig] = []
    problems: dict[str, str] = {}
    names: list[str] = []
    for index, entry in enumerate(data):
        raw_name = entry.get("name") if isinstance(entry, Mapping) else None
        label = raw_name if isinstance(raw_name, str) and _NAME_RE.match(raw_name) else None
        try:
            config = RuleConfig.from_dict(entry)
        except ValueError as exc:
            problems[label or f"rules[{index}]"] = f"rules[{index}]: {exc}"
            if label:
                names.append(label)
            continue
        if config.name in names:
            problems[config.name] = f"rules[{index}]: name {config.name!r} is used twice"
            continue
        names.append(config.name)
        configs.append(config)
    if problems:
        raise RuleConfigError("; ".join(problems.values()), problems, names)
    return configs


def load_rule_configs(path: str | os.PathLike[str]) -> list[RuleConfig]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise RuleConfigError(f"{os.fspath(path)}: cannot read rules: {exc}") from None
    return parse_rule_configs(data)
