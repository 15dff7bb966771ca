#!/usr/bin/env bash
# The floors pyproject.toml declares (torch, numpy, pytest, Hypothesis: each `>=X` in
# [project].dependencies) installed exactly, into a bare venv, and a short part of the suite run
# under them: a floor that no job installs is a guess, and an old GPU stack that meets it would
# get a k3diff that does not work.
#
# torch's floor comes from its CPU wheel index (TORCH_INDEX): PyPI's torch is the CUDA build,
# gigabytes of NVIDIA libraries that `import torch` needs even on a CPU. Where the floors cannot
# be installed (no route to that index, no wheel for this Python), one line says so, and the exit
# is 0 unless K3DIFF_MIN_VERSIONS_REQUIRED=1 (the CI job that can reach the index sets it): then 1.
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
# torch from that index alone (its dependencies are mirrored there): never PyPI's CUDA build
"$VPY" -m pip install -q --disable-pip-version-check --timeout 30 --retries 1 --index-url "$TORCH_INDEX" \
  "$TORCH" >"$W/pip.log" 2>&1 || cannot "$TORCH from $TORCH_INDEX: $(why)"
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
# the plugin's own handling of pytest's API, then a short differential run (fuzz and seeds of one stage)
"$VPY" -m pytest -q -p no:cacheprovider tests/k3diff/test_rerun.py -k "seed_pinned or cli_line" || status=1
"$VPY" -m pytest -q -p no:cacheprovider --k3diff -k "moe and (fuzz or seed)" tests/differential || status=1
[ $status = 0 ] && echo "min versions: the suite passes at the floors ($GOT)" || echo "FAILED: the suite at the floors ($GOT)"
exit $status
