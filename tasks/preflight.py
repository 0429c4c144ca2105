"""Checks of a run_spec against this machine, before anything is launched: the one
pre-launch check of every way a run starts. The flow's first step runs it (tasks/train.py's
check_spec: a run from the CLI, the UI, the API, a deployment or a search candidate), and
`remedy run` runs it before it starts a server or writes the run folder.

What the payload's validation already refused (unknown or unmapped roles, a flag the
built-in job does not take, a script path leaving source_dir) never gets here: the CLI and
the flow's parameters validate it first. Here the code is looked for the way the job will
look for it: a script in source_dir, a module with source_dir (or, without one, the current
directory) first on the import path, then the installed packages.
"""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import Any

from remedy.jobs import backend_class
from remedy.outlets.report_store import reports_store
from remedy.state_schema import CHECKPOINT_META_FILE, RunSpec
from remedy.state_schema.config_keys import (
    ConfigKeyError,
    get_key,
    is_config_key,
    load_config,
    split_config_key,
)
from remedy.tasks.allowed_code import check_allowed


class PreflightError(ValueError):
    pass


def preflight(spec: RunSpec) -> None:
    """Raise PreflightError naming the field when a local job could not start, or when a
    rule could not be evaluated (whatever the backend: a job must never run unwatched), or
    when this machine's REMEDY_REPORTS_S3 is not an s3:// URI."""
    try:
        reports_store()
        check_allowed(spec)  # before anything of the spec's code is looked into
    except ValueError as error:
        raise PreflightError(str(error)) from None
    try:
        backend_class(spec.backend).check(spec)  # the backend's own (fields, allocation)
    except ValueError as error:
        raise PreflightError(str(error)) from None
    check_code(spec)
    check_rules(spec)  # last: a rule_file is imported, once every other field passed


def check_code(spec: RunSpec) -> None:
    """The job's code, found the way the job will look for it (its command line is its
    backend's check)."""
    if not backend_class(spec.backend).code_runs_here:
        check_uploaded(spec)
        return
    if spec.init_checkpoint:
        check_checkpoint(Path(spec.init_checkpoint))
    code_dir = Path(spec.source_dir or ".").resolve()
    if spec.source_dir is not None and not code_dir.is_dir():
        raise PreflightError(f"run_spec.source_dir: no folder {code_dir}")
    check_config_keys(spec, code_dir)
    if spec.is_script:
        check_script(spec.entry_point, code_dir, spec.source_dir is not None)
    elif not module_found(spec.entry_point, code_dir):
        where = "run_spec.source_dir" if spec.source_dir is not None else "the current directory"
        raise PreflightError(
            f"run_spec.entry_point: no module named {spec.entry_point!r} in {where} "
            f"({code_dir}) or the installed packages"
        )
    if spec.dataset == "cifar10" and spec.data_path:
        from remedy.training.data import CifarFormatError, check_cifar10_folder

        try:
            check_cifar10_folder(spec.data_path)
        except CifarFormatError as error:
            raise PreflightError(f"run_spec.data_path: {error}") from None


def check_uploaded(spec: RunSpec) -> None:
    """The script in the source_dir a backend uploads (a cloud job; its other fields are its
    backend's check, e.g. jobs/sagemaker/checks.py: instance type, region, image, the
    request against the service's model)."""
    code_dir = Path(spec.source_dir or ".").resolve()
    check_config_keys(spec, code_dir)
    if spec.source_dir is not None and spec.is_script:
        check_script(spec.entry_point, code_dir, True)


def check_config_keys(spec: RunSpec, code_dir: Path) -> None:
    """Each FILE:key hyperparameter names a key the file in the job's folder has (the
    launcher sets keys, it never adds one: a typo would change nothing, silently)."""
    if spec.job.reads_fields:
        return
    trees: dict[str, Any] = {}  # each file read once
    for name in filter(is_config_key, [*spec.script_hyperparameters, *spec.path_role_flags()]):
        file, key = split_config_key(name)
        try:
            if file not in trees:
                trees[file] = load_config(code_dir / file)
            get_key(trees[file], key)
        except ConfigKeyError as error:
            raise PreflightError(f"run_spec.hyperparameters.{name}: {error}") from None


def check_checkpoint(folder: Path) -> None:
    """A warm start is a checkpoint folder: one with its sidecar (what the job reads)."""
    if not folder.is_dir():
        raise PreflightError(f"run_spec.init_checkpoint: no checkpoint folder {folder}")
    if not (folder / CHECKPOINT_META_FILE).is_file():
        raise PreflightError(
            f"run_spec.init_checkpoint: {folder} is not a checkpoint (it has no "
            f"{CHECKPOINT_META_FILE})"
        )


def check_rules(spec: RunSpec) -> None:
    """Every rule is built as the evaluator will build it: its class in the registry (a
    typo gets a did-you-mean) or in its rule_file (found from source_dir, imported), its
    parameters (names, types, regexes). The evaluator would only report such a rule as
    Error once the job runs; here nothing launches."""
    from remedy.debugger.rule_check import check_rule
    from remedy.debugger.rule_config import RuleConfig
    from remedy.debugger.rule_presets import expand_entry

    names: list[str] = []
    for index, rule in enumerate(spec.rules):
        label = rule.name or f"preset {rule.preset}"
        try:
            for config in expand_entry(rule.model_dump(mode="json")):
                check_rule(RuleConfig.from_dict(config), spec.source_dir)
                names.append(config["name"])
        except ValueError as error:
            raise PreflightError(f"run_spec.rules[{index}] ({label}): {error}") from None
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise PreflightError(
            "run_spec.rules: each rule name is used once, presets expanded; used twice: "
            f"{', '.join(twice)} (name your own rule differently, or take that rule from the "
            'preset with {"name": ..., "rule": ..., "preset": ...} instead of the whole preset)'
        )


def check_script(entry_point: str, code_dir: Path, in_source_dir: bool) -> None:
    script = code_dir / entry_point  # an absolute entry_point stays itself
    if not script.is_file():
        where = "run_spec.source_dir" if in_source_dir else "the current directory"
        raise PreflightError(
            f"run_spec.entry_point: no script {entry_point!r} in {where} ({code_dir})"
        )


def module_found(name: str, code_dir: Path) -> bool:
    """True when `python -m name`, started in code_dir, would find the module: in code_dir
    (walked on disk, so nothing of the user's code is imported here), or where this
    interpreter finds it (installed packages, remedy's own)."""
    return found_on_disk(name, code_dir) or found_installed(name)


def found_on_disk(name: str, code_dir: Path) -> bool:
    parts = name.split(".")
    found: ModuleSpec | None = PathFinder.find_spec(parts[0], [str(code_dir)])
    for depth in range(1, len(parts)):
        locations = found.submodule_search_locations if found else None
        if not locations:
            return False  # not there, or a module (which has no submodules)
        found = PathFinder.find_spec(".".join(parts[: depth + 1]), list(locations))
    if found is not None and found.submodule_search_locations:
        # python -m package runs package/__main__.py
        return (
            PathFinder.find_spec(f"{name}.__main__", list(found.submodule_search_locations))
            is not None
        )
    return found is not None


def found_installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
