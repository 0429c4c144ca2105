"""Checks of a job's rules before anything launches: every rule can be built as configured.

    rules = check_rules(configs, base_dir=source_dir)   # RuleConfigError naming each problem

A rule is found by its class name in the registry (a typo gets a did-you-mean) or, with
`rule_file`, in that Python file (it exists, imports, and defines the class); its parameters
are checked by the rule class itself (unknown names, types, values such as regexes), with no
trial and no setup(). The rules returned are unbound: enough to ask them what they read
(Rule.reads(), capture.py), not to evaluate them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from remedy.debugger.rule_config import RuleConfig, RuleConfigError
from remedy.debugger.rules import Rule, get_rule, load_rule_file


def rule_file_path(rule_file: str, base_dir: str | os.PathLike[str] | None) -> Path:
    """A rule file as the job will find it: relative paths from `base_dir` (the run's
    source_dir, else the current directory), as a script entry point is found."""
    path = Path(rule_file).expanduser()
    return path if path.is_absolute() else Path(base_dir or ".").resolve() / path


def rule_class(config: RuleConfig, base_dir: str | os.PathLike[str] | None = None) -> type[Rule]:
    """The class a configuration names; ValueError saying why it cannot be found."""
    if config.rule_file is None:
        return get_rule(config.rule)
    return load_rule_file(rule_file_path(config.rule_file, base_dir), config.rule)


def check_rule(config: RuleConfig, base_dir: str | os.PathLike[str] | None = None) -> Rule:
    """The unbound rule of one configuration; ValueError naming what is wrong."""
    return rule_class(config, base_dir).check_parameters(config.parameters)


def check_rules(
    configs: Sequence[RuleConfig], base_dir: str | os.PathLike[str] | None = None
) -> list[Rule]:
    """Every configuration's unbound rule; RuleConfigError naming each one that is wrong."""
    rules: list[Rule] = []
    problems: dict[str, str] = {}
    for config in configs:
        try:
            rules.append(check_rule(config, base_dir))
        except ValueError as exc:
            problems[config.name] = str(exc)
    if problems:
        message = "; ".join(f"{name}: {problem}" for name, problem in problems.items())
        raise RuleConfigError(message, problems, [c.name for c in configs])
    return rules
