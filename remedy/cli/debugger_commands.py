"""remedy rules / trial / check: the tensor debugger from the command line.

    remedy rules [--json]                       built-in rules, parameters and defaults
    remedy trial PATH [--json]                  what a store holds: modes, steps, tensors
    remedy check PATH --rule NAME [--param k=v] [--rule-file FILE] [--follow]
    remedy check PATH --rules-json RULES.json   evaluate rules offline, print statuses

PATH is a store folder or an s3:// URI. `check` evaluates what is written (a running store
included; --follow waits for its end). --param applies to every --rule given; prefix it with
the rule name to aim it at one (--param DeadRelu.threshold_layer=30). Values are JSON when
they parse as JSON (numbers, true, lists), else strings. --rules-json reads a job's
RULES.json (presets such as {"preset": "recommended"} included), beside any --rule.
Exit status of check: 0 no issues, 1 issues found or a rule error, 2 bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import threading
import typing
from pathlib import Path
from typing import Any

from remedy.cli.errors import UsageError

EXIT_OK, EXIT_ISSUES = 0, 1


def cmd_rules(args: argparse.Namespace) -> int:
    from remedy.debugger import RULES

    rules = {name: _describe_rule(cls) for name, cls in sorted(RULES.items())}
    if args.json:
        print(json.dumps(rules, indent=2, default=str))
        return EXIT_OK
    for name, info in rules.items():
        print(f"{name}: {info['summary']}")
        for param, spec in info["parameters"].items():
            default = "(required)" if "default" not in spec else f"= {spec['default']!r}"
            print(f"    {param}: {spec['type']} {default}")
    return EXIT_OK


def _describe_rule(cls: Any) -> dict[str, Any]:
    doc = " ".join((cls.__doc__ or "").split())
    defaults = cls.defaults()
    parameters: dict[str, Any] = {}
    for param, hint in cls.parameter_types().items():
        plain = isinstance(hint, type) and not typing.get_args(hint)
        spec: dict[str, Any] = {"type": hint.__name__ if plain else str(hint)}
        if param in defaults:
            spec["default"] = defaults[param]
        parameters[param] = spec
    summary = doc.split(". ")[0].rstrip(".") + "." if doc else ""
    return {"summary": summary, "parameters": parameters}


def cmd_trial(args: argparse.Namespace) -> int:
    from remedy.debugger import DebuggerError, ModeKeys
    from remedy.debugger.modes import STEP_MODES

    trial = _open_trial(args.path)
    try:
        summary: dict[str, Any] = {
            "path": args.path,
            "ended": trial.has_ended,
            "modes": {},
            "collections": {c: trial.tensor_names(collection=c) for c in trial.collection_names()},
            "tensors": {},
        }
        for mode in STEP_MODES:
            steps = trial.steps(mode)
            if steps:
                summary["modes"][mode.value] = {
                    "steps": len(steps),
                    "first": steps[0],
                    "last": steps[-1],
                }
        for name in trial.tensor_names():
            view = trial.tensor(name)
            summary["tensors"][name] = {
                m.value: len(view.steps(m)) for m in STEP_MODES if view.steps(m)
            }
        summary["global_steps"] = len(trial.steps(ModeKeys.GLOBAL))
    except DebuggerError as error:
        raise UsageError(f"{args.path}: {error}") from None
    if args.json:
        print(json.dumps(summary, indent=2))
        return EXIT_OK
    state = "ended" if summary["ended"] else "running (no end marker yet)"
    print(f"store {args.path}: {state}, {summary['global_steps']} steps in all")
    for mode, info in summary["modes"].items():
        print(f"  {mode:8s} {info['steps']:6d} steps  ({info['first']}..{info['last']})")
    print(f"collections: {len(summary['collections'])}")
    for collection, names in summary["collections"].items():
        print(f"  {collection}: {len(names)} tensors")
    print(f"tensors: {len(summary['tensors'])}")
    for name, per_mode in summary["tensors"].items():
        counts = ", ".join(f"{m} {n}" for m, n in per_mode.items())
        print(f"  {name}  [{counts}]")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from remedy.debugger import RuleStatus
    from remedy.debugger.evaluator import RuleEvaluator
    from remedy.debugger.rule_config import RuleConfig, RuleConfigError, load_rule_configs

    rules = args.rule or []
    if not rules and not args.rules_json:
        raise UsageError("check: name the rules: --rule NAME (repeatable) or --rules-json FILE")
    trial = _open_trial(args.path)
    params = _parse_params(args.param or [], rules)
    custom = _custom_rules(args.rule_file, rules)
    configs = [
        RuleConfig(
            name=rule,
            rule=rule,
            parameters=params.get(rule, {}),
            rule_file=args.rule_file if rule in custom else None,
        )
        for rule in rules
    ]
    if args.rules_json:
        if not Path(args.rules_json).is_file():
            raise UsageError(f"--rules-json {args.rules_json}: no such file")
        try:
            configs += load_rule_configs(args.rules_json)
        except RuleConfigError as error:
            raise UsageError(f"--rules-json {args.rules_json}: {error}") from None
    with contextlib.ExitStack() as scratch:  # without --status-dir: removed once judged
        status_dir = Path(
            args.status_dir
            or scratch.enter_context(tempfile.TemporaryDirectory(prefix="remedy-check-"))
        )
        try:
            evaluator = RuleEvaluator(trial, configs, status_dir, log=lambda line: None)
        except RuleConfigError as error:
            raise UsageError(str(error)) from None
        evaluator.start()
        if args.follow:
            evaluator.run(args.poll_interval, threading.Event())
        else:
            evaluator.poll()
    worst = EXIT_OK
    for name, record in evaluator.statuses.items():
        where = ""
        if record.step is not None and record.mode is not None:
            where = f" at {record.mode.value} step {record.step}"
        print(f"{name}: {record.status.value}{where} ({record.steps_evaluated} steps)")
        print(f"    {record.details}")
        if record.status in (RuleStatus.ISSUES_FOUND, RuleStatus.ERROR):
            worst = EXIT_ISSUES
    return worst


def _open_trial(path: str) -> Any:
    from remedy.debugger import DebuggerError, create_trial

    if not path.startswith("s3://") and not Path(path).is_dir():
        raise UsageError(f"{path}: no such store folder")
    try:
        return create_trial(path)
    except DebuggerError as error:
        raise UsageError(f"{path}: {error}") from None


def _parse_params(items: list[str], rules: list[str]) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {rule: {} for rule in rules}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param {item!r}: expected KEY=VALUE or RULE.KEY=VALUE")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        target, dot, name = key.partition(".")
        if dot and target in params:
            params[target][name] = value
        elif dot:
            raise UsageError(f"--param {item!r}: {target!r} is not one of the --rule names")
        else:
            for rule in rules:
                params[rule][key] = value
    return params


def _custom_rules(rule_file: str | None, rules: list[str]) -> set[str]:
    """The --rule names defined in --rule-file (the others are built-ins)."""
    from remedy.debugger.rules import load_rule_file

    if rule_file is None:
        return set()
    found = set()
    for rule in rules:
        try:
            load_rule_file(rule_file, rule)
        except ValueError as error:
            if "has no Rule subclass" not in str(error):
                raise UsageError(str(error)) from None
            continue
        found.add(rule)
    if not found:
        raise UsageError(f"--rule-file {rule_file}: defines none of {rules}")
    return found


def register(commands: Any) -> None:
    rules = commands.add_parser("rules", help="list the debugger's rules and their parameters")
    rules.add_argument("--json", action="store_true", help="machine-readable output")
    rules.set_defaults(handler=cmd_rules)

    trial = commands.add_parser("trial", help="summarise a debugger store (tensors, steps)")
    trial.add_argument("path", help="store folder or s3:// URI")
    trial.add_argument("--json", action="store_true", help="machine-readable output")
    trial.set_defaults(handler=cmd_trial)

    check = commands.add_parser("check", help="evaluate debugger rules over a store offline")
    check.add_argument("path", help="store folder or s3:// URI")
    check.add_argument("--rule", action="append", help="rule name (repeatable)")
    check.add_argument("--rules-json", help="a RULES.json of rules and presets to evaluate")
    check.add_argument("--param", action="append", help="KEY=VALUE or RULE.KEY=VALUE (repeatable)")
    check.add_argument("--rule-file", help="Python file defining the (custom) --rule classes")
    check.add_argument("--follow", action="store_true", help="wait until the job has ended")
    check.add_argument("--poll-interval", type=float, default=1.0, help="seconds (--follow)")
    check.add_argument("--status-dir", help="also keep the status files here")
    check.set_defaults(handler=cmd_check)
