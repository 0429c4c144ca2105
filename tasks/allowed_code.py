"""Who may run what: the code a run names (entry point, source_dir, rule files, a policy
module) and the run directory it writes, checked against what this machine allows.

Whoever can create a flow run (the UI, the API, a deployment, a search's candidate, a flow
called from Python) chooses its run_spec, and the run's code runs as this machine's user.
So a run runs only:
- the built-in entry point (remedy.training.train);
- scripts and modules under a source dir this machine allows: REMEDY_ALLOWED_SOURCE_DIRS
  (folders separated by os.pathsep), which `remedy serve --allow-source DIR` extends;
- rule files and policy modules (package.module:ClassName) under those same folders;
and writes its run directory under the machine's runs root (REMEDY_RUNS_DIR, else ./runs).

A person who starts `remedy run` or `remedy resume` at their own shell allows their spec's
own source dir (its working directory when it has none) and any run directory: the CLI says
so in-process (allow_for_this_shell), never through a flow parameter an API caller could set.

Every path is resolved (symlinks followed) before it is compared; nothing is imported here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from remedy.debugger.rule_check import rule_file_path
from remedy.records.run_folder import runs_root
from remedy.state_schema import RunSpec
from remedy.strategies.policies.base import policy_source

ALLOWED_SOURCE_DIRS_ENV = "REMEDY_ALLOWED_SOURCE_DIRS"


class CodeNotAllowed(ValueError):
    """A run names code or a folder this machine does not allow; the message names the field."""


@dataclass
class ShellAllowance:
    """What a person at their own shell allowed for this process (remedy run/resume)."""

    source_dirs: list[Path] = field(default_factory=list)
    any_run_dir: bool = False


SHELL = ShellAllowance()  # set by the CLI only; a flow parameter cannot reach it


def allow_for_this_shell(spec: RunSpec) -> None:
    """`remedy run`/`remedy resume`: the person's spec's own source dir (else the working
    directory, where its module or script is looked for) and any run directory."""
    SHELL.source_dirs.append(code_dir(spec))
    SHELL.any_run_dir = True


def allowed_source_dirs() -> list[Path]:
    """The machine's allow-list, then what a person at this shell allowed; resolved."""
    listed = os.environ.get(ALLOWED_SOURCE_DIRS_ENV, "")
    dirs = [Path(part).expanduser().resolve() for part in listed.split(os.pathsep) if part]
    return dirs + [d.resolve() for d in SHELL.source_dirs]


def code_dir(spec: RunSpec) -> Path:
    """Where the job's code is looked for: source_dir, else the current directory."""
    return Path(spec.source_dir or ".").expanduser().resolve()


def within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_allowed(spec: RunSpec, policy: str | None = None) -> None:
    """CodeNotAllowed naming the field, unless every piece of code the run names (its
    spec's, and its policy's module if it names one) lies under an allowed source dir.
    The built-in entry point always may run."""
    allowed = allowed_source_dirs()
    where = (
        f"this machine allows {', '.join(map(str, allowed))}"
        if allowed
        else f"this machine allows no source dir (set {ALLOWED_SOURCE_DIRS_ENV} or "
        "`remedy serve --allow-source DIR`)"
    )

    def refuse_outside(field_name: str, path: Path) -> None:
        if not any(within(path, folder) for folder in allowed):
            raise CodeNotAllowed(
                f"{field_name}: {path} is not under an allowed source dir ({where})"
            )

    base = code_dir(spec)
    if spec.source_dir is not None or not spec.job.ours:
        refuse_outside("run_spec.source_dir" if spec.source_dir else "run_spec.entry_point", base)
    if spec.is_script:
        script = (base / spec.entry_point).resolve()  # an absolute entry_point stays itself
        if spec.source_dir is not None and not within(script, base):
            raise CodeNotAllowed(
                f"run_spec.entry_point: {spec.entry_point!r} resolves to {script}, outside "
                f"run_spec.source_dir ({base}): a script may not leave it"
            )
        refuse_outside("run_spec.entry_point", script)
    elif not spec.job.ours:
        found = module_file(spec.entry_point, base)
        if found is None:
            where = "run_spec.source_dir" if spec.source_dir else "the current directory"
            raise CodeNotAllowed(
                f"run_spec.entry_point: no module named {spec.entry_point!r} in {where} "
                f"({base}); a module other than the built-in job runs only from there, "
                "never from the installed packages"
            )
        refuse_outside("run_spec.entry_point", found)
    for index, rule in enumerate(spec.rules):
        if rule.rule_file:
            path = rule_file_path(rule.rule_file, spec.source_dir).resolve()
            refuse_outside(f"run_spec.rules[{index}].rule_file", path)
    if policy is not None and ":" in policy:
        module_name = policy.partition(":")[0]
        source = policy_source(module_name)
        if source is None:
            raise CodeNotAllowed(f"policy: cannot find module {module_name!r} on the import path")
        refuse_outside("policy", source.resolve())


def check_run_dir(run_dir: str | None) -> None:
    """A flow run's run_dir stays under the machine's runs root (a person's own shell may
    choose any)."""
    if run_dir is None or SHELL.any_run_dir:
        return
    root = runs_root().expanduser().resolve()
    path = Path(run_dir).expanduser().resolve()
    if not within(path, root) or path == root:
        raise CodeNotAllowed(
            f"run_dir: {run_dir} is not under this machine's runs root {root} (REMEDY_RUNS_DIR)"
        )


def module_file(name: str, folder: Path) -> Path | None:
    """The resolved file `python -m name`, started in folder, runs from there (a module's
    .py, a package's __main__.py), found on disk without importing; None if not there."""
    *packages, last = name.split(".")
    base = folder.joinpath(*packages)
    for candidate in (base / f"{last}.py", base / last / "__main__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None
