#!/usr/bin/env bash
# The floors pyproject.toml declares (torch, numpy, pytest, Hypothesis: each `>=X` in
# [project].dependencies) installed exactly, into a bare venv, and a short part of the suite run
# under them: a floor that no job installs is a guess, and an old GPU stack that meets it would
# get a k3diff that does not work.
#
# torch's floor comes from its CPU wheel index (TORCH_INDEX) where that answers; where it does not
# (no route to it), from PyPI: the same version, PyPI's build, which is the CUDA one (gigabytes of
# NVIDIA libraries that `import torch` loads even on a CPU, a few minutes of download), and one
# line says so. Either way the version is the floor exactly. Where the floors cannot be installed
# at all (no wheel for this Python, no route to PyPI either), one line says so, and the exit is 0
# unless K3DIFF_MIN_VERSIONS_REQUIRED=1 (the CI job sets it): then 1.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
unset PYTEST_ADDOPTS

# the floors, read from pyproject.toml (the one place they are declared)
mapfile -t FLOORS < <("$PY" - "$ROOT/pyproject.toml" <<'PYEOF'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
for dep in deps:
    m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", dep)
    if m and m.group(1).lower() in ("torch", "numpy", "pytest", "hypothesis"):
        v = m.group(2) + (".0" if m.group(2).count(".") == 1 else "")      # 2.4 -> 2.4.0
        print(f"{m.group(1)}=={v}")
PYEOF
)
[ "${#FLOORS[@]}" -eq 4 ] || { echo "FAILED: pyproject.toml declares ${#FLOORS[@]} of the 4 floors (torch, numpy, pytest, hypothesis)"; exit 1; }

why() {   # pip's reason, in a few words
  if grep -qE 'NewConnectionError|Failed to establish|Name or service not known|Temporary failure in name' "$W/pip.log"; then
    echo "no route to the index"
  else
    grep '^ERROR' "$W/pip.log" | tail -n 1 | cut -c1-200
  fi
}

cannot() {
  echo "min versions: not checked: $1"
  [ "${K3DIFF_MIN_VERSIONS_REQUIRED:-0}" = 1 ] && exit 1
  exit 0
}

"$PY" -m venv "$W/venv" || cannot "no venv for $PY"
VPY="$W/venv/bin/python"
TORCH=""; OTHERS=()
for f in "${FLOORS[@]}"; do case "$f" in torch==*) TORCH=$f ;; *) OTHERS+=("$f") ;; esac; done
# the listed floors exactly; what they need (sympy, filelock, pluggy, ...) at its newest
# torch from that index alone (its dependencies are mirrored there); PyPI's CUDA build of the same
# version only where that index cannot be reached
if ! "$VPY" -m pip install -q --disable-pip-version-check --timeout 30 --retries 1 --index-url "$TORCH_INDEX" \
  "$TORCH" >"$W/pip.log" 2>&1; then
  reason=$(why)
  [ "$reason" = "no route to the index" ] || cannot "$TORCH from $TORCH_INDEX: $reason"
  echo "+ $TORCH: $TORCH_INDEX unreachable, PyPI's build of $TORCH instead (CUDA libraries, unused on a CPU)"
  "$VPY" -m pip install -q --disable-pip-version-check --timeout 60 --retries 2 "$TORCH" >"$W/pip.log" 2>&1 \
    || cannot "$TORCH from PyPI: $(why)"
fi
"$VPY" -m pip install -q --disable-pip-version-check --timeout 30 --retries 1 "${OTHERS[@]}" >>"$W/pip.log" 2>&1 \
  || cannot "${OTHERS[*]}: $(why)"

cd "$ROOT"
export PYTHONPATH=$ROOT
GOT=$("$VPY" -c "import torch, numpy, pytest, hypothesis; print(' '.join(f'{m.__name__}=={m.__version__.split(\"+\")[0]}' for m in (torch, numpy, pytest, hypothesis)))")
for f in "${FLOORS[@]}"; do
  case " $GOT " in *" $f "*) ;; *) echo "FAILED: the venv has $GOT, not the floor $f"; exit 1 ;; esac
done
echo "+ floors: $GOT"
status=0
# the plugin's own handling of pytest's API, then a short differential run (fuzz and seeds of one stage);
# k3diff is not installed in this venv (the floors alone are), so its pytest11 entry point is absent
# and the plugin is named with -p
"$VPY" -m pytest -q -p no:cacheprovider tests/k3diff/test_rerun.py -k "seed_pinned or cli_line" || status=1
"$VPY" -m pytest -q -p no:cacheprovider -p k3diff.plugin --k3diff -k "moe and (fuzz or seed)" tests/differential || status=1
[ $status = 0 ] && echo "min versions: the suite passes at the floors ($GOT)" || echo "FAILED: the suite at the floors ($GOT)"
exit $status
