"""Check the import contracts ([tool.importlinter] in pyproject.toml) on the `remedy` namespace.

The checkout lays the namespace out as the wheel does (remedy/<folder> links to the top-level
<folder>; see setup.py), so this is lint-imports, run from the repository's root with the
venv that `./bootstrap.sh --dev` made, on its pyproject.toml.

    .venv/bin/python .ci/lint_imports.py [lint-imports options, e.g. --verbose]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    # lint-imports puts its working directory first on the path, so the repository's remedy/
    # is the one analysed. --no-cache: no cache folder left in the checkout.
    command = [str(lint_imports), str(REPO / "pyproject.toml"), "--no-cache"]
    return subprocess.run([*command, *argv], cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
