#!/usr/bin/env bash
# The plugin under the oldest pytest that pyproject.toml declares (8.4): a venv over this machine's
# packages (torch, Hypothesis, xdist) with pytest 8.4.2 installed into it, then the plugin's tests
# that exercise pytest's API (options, the rootdir refusal, the default suite, the JUnit fields,
# the rerun line) and a short differential run. pytest 9 is what every other step runs.
# PYTEST_VERSION=9.0.3 runs the same under another pin (the premerge workflow's pytest matrix).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
unset PYTEST_ADDOPTS
# --without-pip: ensurepip cost ~5 s of CPU; the machine's pip, seen through the system site
# packages, installs into the venv all the same
"$PY" -m venv --system-site-packages --without-pip "$W/venv"
PIN=${PYTEST_VERSION:-8.4.2}
"$W/venv/bin/python" -m pip install -q --no-deps "pytest==$PIN"
cd "$ROOT"
export PYTHONPATH=$ROOT
V=$("$W/venv/bin/python" -c "import pytest; print(pytest.__version__)")
[ "$V" = "$PIN" ] || { echo "FAILED: the venv runs pytest $V, not $PIN"; exit 1; }
echo "+ pytest $V: the plugin's tests"
"$W/venv/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly tests/k3diff/test_rerun.py tests/k3diff/test_plugin.py \
  -k "seed_pinned or cli_line or skipped_without or bad_options or junit or rootdir"
echo "+ pytest $V: a short differential run"
"$W/venv/bin/python" -m pytest -q -p no:cacheprovider -p no:randomly --k3diff -k "fuzz and moe" | tail -n 2
