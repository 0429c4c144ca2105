"""docs/extending.md stays true: the files it names exist, and each registry finds every
module of its folder, so adding a rule, a strategy or a backend is adding the files it says."""

from __future__ import annotations

import pkgutil
import re
from types import ModuleType

import remedy.debugger.rules as rules_package
import remedy.strategies as strategies_package
from remedy.debugger.rules import RULES
from remedy.jobs import backend_class, known_backends
from remedy.jobs.registry import package_backends
from remedy.state_schema import RunSpec
from remedy.strategies import STRATEGIES
from tests.conftest import REPO

DOC = REPO / "docs" / "extending.md"


def named_paths(text: str) -> set[str]:
    """The repository paths in backquotes (those with a slash), placeholders cut at their
    folder (`jobs/<name>/` -> jobs)."""
    found = set()
    for quoted in re.findall(r"`([^`\s]+)`", text):
        if "/" not in quoted:
            continue
        found.add(quoted.split("<", 1)[0].rstrip("/"))
    return found


def test_every_file_the_page_names_exists() -> None:
    paths = named_paths(DOC.read_text())
    assert {"debugger/rules", "strategies", "jobs", "state_schema/run_spec.py"} <= paths
    missing = sorted(path for path in paths if not (REPO / path).exists())
    assert missing == [], f"docs/extending.md names files that do not exist: {missing}"


def modules_without_a_class(
    package: ModuleType, infrastructure: set[str], registered: list[type]
) -> list[str]:
    """Modules of the package, outside its infrastructure, where no registered class lives."""
    homes = {cls.__module__ for cls in registered}
    return [
        module.name
        for module in pkgutil.iter_modules(package.__path__)
        if module.name not in infrastructure and f"{package.__name__}.{module.name}" not in homes
    ]


def test_every_rule_module_registers_a_rule() -> None:
    assert len(RULES) > 20
    assert (
        modules_without_a_class(rules_package, rules_package._INFRASTRUCTURE, list(RULES.values()))
        == []
    )


def test_every_strategy_module_registers_a_strategy() -> None:
    assert len(STRATEGIES) > 20
    assert (
        modules_without_a_class(
            strategies_package, strategies_package._INFRASTRUCTURE, list(STRATEGIES.values())
        )
        == []
    )


def test_every_backend_package_is_registered_under_its_name_and_in_the_run_spec() -> None:
    names = known_backends()
    assert {"local", "sagemaker", "slurm"} <= set(names)
    assert [backend_class(name).name for name in names] == names
    assert set(package_backends()) <= set(names)
    assert all(RunSpec(backend=name).backend == name for name in names)
