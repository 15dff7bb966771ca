#!/usr/bin/env bash
# k3diff as people install and run it: the wheel from an empty folder, and the oldest pytest declared.
# The two checks share nothing (each its own temporary folder and venv) and each mostly waits on one
# process at a time (pip, a venv, one pytest and its candidate child), so they run side by side on
# CI's 2 cores; each one's output is printed whole when both are done, in a fixed order.
set -uo pipefail
cd "$(dirname "$0")" || exit 1
status=0
L=$(mktemp -d); trap 'rm -rf "$L"' EXIT
bash ./wheel_check.sh > "$L/wheel" 2>&1 & wheel=$!
bash ./pytest8_check.sh > "$L/pytest8" 2>&1 & pytest8=$!
wait $wheel; wheel_rc=$?
wait $pytest8; pytest8_rc=$?
cat "$L/wheel"
[ "$wheel_rc" -eq 0 ] || { echo "FAILED ($wheel_rc): scripts/wheel_check.sh"; status=1; }
cat "$L/pytest8"
[ "$pytest8_rc" -eq 0 ] || { echo "FAILED ($pytest8_rc): scripts/pytest8_check.sh"; status=1; }
exit $status
