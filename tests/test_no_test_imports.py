"""No test module imports another test module: shared helpers live in tests/helpers/.

Importing a test module runs its module-level code and, under pytest, can collect its
tests a second time in the importer; helpers there are also hard to find.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(source: str) -> list[str]:
    """The modules named test_* that this source imports (import a.test_b, from a.test_b
    import c, from a import test_b)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [name for name in names if name.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_the_scan_finds_each_form_of_import() -> None:
    source = (
        "import tests.cli.test_cli\n"
        "from tests.jobs.test_local_backend import wait_final\n"
        "from tests.training import test_train\n"
        "from tests.helpers.cli import remedy\n"
    )
    assert imported_test_modules(source) == [
        "tests.cli.test_cli",
        "tests.jobs.test_local_backend",
        "tests.training.test_train",
    ]


def test_no_test_module_imports_another_test_module() -> None:
    offenders = {
        str(path.relative_to(TESTS)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(path.read_text()))
    }
    assert offenders == {}, f"import these from tests/helpers/ instead: {offenders}"
