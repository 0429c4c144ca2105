#!/usr/bin/env bash
# Set up .venv with remedy and everything it needs.
#   ./bootstrap.sh          runtime only
#   ./bootstrap.sh --dev    plus the test and lint tools, and the Debian packages the
#                           end-to-end tests start for real (chromium, postgresql, and
#                           slurm-wlm + munge for the Slurm backend's one-node test cluster)
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
if [ -n "$extras" ]; then
    # The UI test drives a real headless Chromium; the database test starts a real PostgreSQL;
    # the Slurm backend's tests start a real one-node cluster (slurmctld, slurmd, munged).
    missing=""
    for package in chromium postgresql slurm-wlm munge; do
        dpkg -s "$package" >/dev/null 2>&1 || missing="$missing $package"
    done
    if [ -n "$missing" ]; then
        echo "bootstrap: installing Debian packages:$missing"
        sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
fi
echo "bootstrap: installing remedy$extras"
# Every later requirement (the dev extra's lightning and transformers too) must take the
# torch installed above: pinned to its exact version, no resolution can swap the build.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
.venv/bin/python -c "import torch; print('torch==' + torch.__version__)" >"$constraints"
pip install -c "$constraints" -e ".$extras"

echo "bootstrap: ready (.venv/bin/remedy)"
