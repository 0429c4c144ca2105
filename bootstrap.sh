#!/usr/bin/env bash
# Set up .venv with remedy and everything it needs.
#   ./bootstrap.sh          runtime only
#   ./bootstrap.sh --dev    plus the test and lint tools
# TORCH_SPEC chooses the torch build (default torch==2.13.0); it is installed first so
# that no other requirement can pull a different (several-GB CUDA) build.
set -euo pipefail
cd "$(dirname "$0")"

python=${PYTHON:-python3}
torch_spec=${TORCH_SPEC:-torch==2.13.0}
extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

[ -x .venv/bin/python ] || "$python" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    echo "bootstrap: installing $torch_spec"
    pip install "$torch_spec"
fi
echo "bootstrap: installing remedy$extras"
pip install -e ".$extras"

echo "bootstrap: ready (.venv/bin/remedy)"
