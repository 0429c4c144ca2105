"""Rule registry: name -> class. Rule files register themselves with @register_rule."""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TypeVar

from remedy.debugger.rules import reads
from remedy.debugger.rules.base import Rule

R = TypeVar("R", bound=type[Rule])

RULES: dict[str, type[Rule]] = {}


def register_rule(cls: R) -> R:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no `name`; set it to the rule's registry key")
    existing = RULES.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(f"rule name {cls.name!r} is already taken by {existing.__qualname__}")
    RULES[cls.name] = cls
    return cls


def rules_with_defaults() -> list[str]:
    """Registered rules that run with their defaults (no required parameter), sorted."""
    names = []
    for name, cls in sorted(RULES.items()):
        try:
            cls.check_parameters({})
        except ValueError:
            continue  # AllZero, TensorVariance, SimilarAcrossRuns: nothing to judge by default
        names.append(name)
    return names


def reads_the_loss(name: str) -> bool:
    """True for a registered rule class that reads the training loss (its READS names the
    losses): what a job of several optimizers, whose losses are no one objective, cannot be
    judged by. False for an unknown name (a custom rule's class, judged as it says)."""
    cls = RULES.get(name)
    return cls is not None and reads.LOSSES in cls.READS


def get_rule(name: str) -> type[Rule]:
    try:
        return RULES[name]
    except KeyError:
        # A typo must not leave a job unwatched: name the rule it probably meant.
        close = difflib.get_close_matches(name, list(RULES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ValueError(f"unknown rule {name!r}; {hint}known rules: {sorted(RULES)}") from None


def load_rule_file(path: str | os.PathLike[str], class_name: str) -> type[Rule]:
    """The Rule subclass `class_name` defined in the Python file at `path` (a custom rule).

    The file is imported under a private module name; it is not added to RULES, so two
    jobs' custom rules of the same name never clash. Raises ValueError when the file or
    class is missing or not a Rule.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"rule file {os.fspath(path)!r} does not exist")
    module_name = f"_remedy_custom_rule_{abs(hash(str(file.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"rule file {os.fspath(path)!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses/typing look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ValueError(f"rule file {os.fspath(path)!r} failed to import: {exc!r}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Rule) and cls is not Rule):
        raise ValueError(f"rule file {os.fspath(path)!r} has no Rule subclass {class_name!r}")
    return cls
