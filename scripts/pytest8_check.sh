#!/usr/bin/env bash
# The plugin under the oldest pytest that pyproject.toml declares (8.4): a venv over this machine's
# packages (torch, Hypothesis, xdist) with pytest 8.4.2 installed into it, then the plugin's tests
# that exercise pytest's API (options, the rootdir refusal, the default suite, the JUnit fields,
# the rerun line) and a short differential run. pytest 9 is what every other step runs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
unset PYTEST_ADDOPTS
# --without-pip: ensurepip cost ~5 s of CPU; the machine's pip, seen through the system site
# packages, installs into the venv all the same
"$PY" -m venv --system-site-packages --without-pip "$W/venv"
"$W/venv/bin/python" -m pip install -q --no-deps "pytest==8.4.2"
cd "$ROOT"
export PYTHONPATH=$ROOT
V=$("$W/venv/bin/python" -c "import pytest; print(pytest.__version__)")
[ "${V%%.*}" = 8 ] || { echo "FAILED: the venv runs pytest $V, not 8"; exit 1; }
echo "+ pytest $V: the plugin's tests"
"$W/venv/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly tests/k3diff/test_rerun.py tests/k3diff/test_plugin.py \
  -k "seed_pinned or cli_line or skipped_without or bad_options or junit or rootdir"
echo "+ pytest $V: a short differential run"
"$W/venv/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly --k3diff -k "fuzz and moe" | tail -n 2
