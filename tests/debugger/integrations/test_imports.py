"""The framework callbacks are optional: `import remedy.debugger` never loads them, and
importing one without its framework fails saying what to install."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from remedy.debugger.integrations.common import STOP_FILE_ENV_VAR
from remedy.state_schema import job_env


def test_import_remedy_debugger_loads_no_integration_and_no_framework() -> None:
    code = (
        "import sys, remedy.debugger\n"
        "loaded = [m for m in sys.modules if m.startswith(('remedy.debugger.integrations',"
        " 'lightning', 'pytorch_lightning', 'transformers', 'accelerate'))]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize(
    ("module", "frameworks", "extra"),
    [
        ("lightning", ["lightning", "lightning.pytorch", "pytorch_lightning"], "lightning"),
        ("transformers", ["transformers"], "transformers"),
    ],
)
def test_an_integration_without_its_framework_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, frameworks: list[str], extra: str
) -> None:
    name = f"remedy.debugger.integrations.{module}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    for framework in frameworks:
        monkeypatch.setitem(sys.modules, framework, None)  # import raises ImportError
    with pytest.raises(ImportError, match=rf"pip install 'remedy-train\[{extra}\]'"):
        importlib.import_module(name)


def test_the_stop_file_variable_is_the_job_contracts() -> None:
    assert STOP_FILE_ENV_VAR == job_env.STOP_FILE_ENV
