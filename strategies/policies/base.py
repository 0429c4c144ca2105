"""A policy picks the next strategy for the findings that ended an attempt.

Policies are registered by name. A user's own Python class is selected with the name
"package.module:ClassName": the module is imported when the policy is first used
(registering it is optional). Before that, check_policy_name() accepts such a name by
reading the module's source only (its file must define the class on a ...Policy base), so
checking a payload never runs a module's code.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from remedy.state_schema import Finding, State
from remedy.strategies.base import Strategy
from remedy.strategies.made_worse import Undo
from remedy.strategies.warm_start import Checkpoint

POLICIES: dict[str, type[Policy]] = {}


@dataclass(frozen=True)
class Decision:
    """A policy's answer for the findings that ended an attempt: the strategy to apply next,
    or none (the run ends, saying `why_none`). `probe`: candidates to try briefly side by side
    before the full relaunch (the rate's bracket), the strategy among them; fewer than two,
    no probes. `undo`: a change of the last launch to set back first (strategies/made_worse.py);
    the strategy and the probes apply to the spec it leaves."""

    strategy: Strategy | None
    why_none: str = ""
    probe: tuple[Strategy, ...] = ()
    undo: Undo | None = None

    @classmethod
    def nothing_left(cls, why: str) -> Decision:
        return cls(None, why_none=why)


class Policy:
    name: ClassVar[str]
    description: ClassVar[str] = ""
    # True: when the chosen strategy keeps the weights, the relaunch starts from the last
    # checkpoint taken before the problem began instead of from scratch.
    warm_start: ClassVar[bool] = False
    # True: it may offer probes (Decision.probe), so it can answer the verdict's open
    # question (STILL_DESCENDING); a run under it holds at half its length to be asked.
    probes: ClassVar[bool] = False

    def decide(
        self, state: State, findings: list[Finding], clean_checkpoint: Checkpoint | None
    ) -> Decision:
        """What to do about `findings`. `clean_checkpoint`: the checkpoint a strategy that
        keeps the weights would start from (None: every strategy starts from scratch; always
        None unless the policy sets warm_start)."""
        raise NotImplementedError


def nothing_for(policy: Policy, findings: list[Finding]) -> str:
    """The end reason of a policy that gave no reason of its own."""
    found = ", ".join(sorted({f.rule for f in findings})) or "no finding"
    return f"policy {policy.name!r} has no strategy left for {found}"


def register_policy(cls: type[Policy]) -> type[Policy]:
    if cls.name in POLICIES:
        raise ValueError(f"policy {cls.name!r} is registered twice")
    POLICIES[cls.name] = cls
    return cls


def _import_policy(path: str) -> type[Policy]:
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import policy {path!r}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Policy)):
        raise ValueError(f"{path!r} is not a Policy subclass")
    return cls


_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
MAX_POLICY_SOURCE_BYTES = 10 * 1024 * 1024


def policy_source(module_name: str) -> Path | None:
    """The file of a module as the import system would find it on sys.path (a .py file or
    a package's __init__.py), found without importing it or its packages."""
    parts = module_name.split(".")
    for entry in sys.path:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def check_policy_name(name: str) -> None:
    """ValueError unless `name` is a registered policy, or "package.module:ClassName" whose
    module file on sys.path defines ClassName with a base named ...Policy. Nothing is
    imported: a module's code runs only once a run uses its policy."""
    if ":" not in name:
        get_policy(name)
        return
    module_name, _, class_name = name.partition(":")
    if not _DOTTED.match(module_name) or not class_name.isidentifier():
        raise ValueError(f"{name!r} is not package.module:ClassName")
    source = policy_source(module_name)
    if source is None:
        raise ValueError(f"cannot find policy module {module_name!r} on the import path")
    try:
        if source.stat().st_size > MAX_POLICY_SOURCE_BYTES:
            raise ValueError(f"{source}: larger than {MAX_POLICY_SOURCE_BYTES} bytes")
        tree = ast.parse(source.read_bytes(), filename=str(source))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"policy {name!r}: cannot read {source}: {exc}") from None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            bases = [ast.unparse(base) for base in node.bases]
            if any(base.rsplit(".", 1)[-1].endswith("Policy") for base in bases):
                return
            raise ValueError(
                f"policy {name!r}: class {class_name} in {source} does not derive from "
                "Policy (its bases: " + (", ".join(bases) or "none") + ")"
            )
    raise ValueError(f"policy {name!r}: {source} defines no class {class_name}")


def get_policy(name: str) -> Policy:
    if ":" in name:
        return _import_policy(name)()
    try:
        return POLICIES[name]()
    except KeyError:
        known = ", ".join(sorted(POLICIES))
        raise ValueError(
            f"unknown policy {name!r}; known: {known} (or package.module:ClassName)"
        ) from None
