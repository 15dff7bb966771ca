#!/usr/bin/env bash
# k3diff as people install and run it: the wheel from an empty folder, and the oldest pytest declared.
set -uo pipefail
cd "$(dirname "$0")" || exit 1
status=0
bash ./wheel_check.sh || { echo "FAILED: scripts/wheel_check.sh"; status=1; }
bash ./pytest8_check.sh || { echo "FAILED: scripts/pytest8_check.sh"; status=1; }
exit $status
