#!/usr/bin/env bash
# k3diff as a user installs it: the wheel built from this checkout, installed into a venv, run from
# an empty folder (never the checkout): the README's first command (`pytest --k3diff`) runs the
# suite, the regression corpus shipped inside the package is replayed, a failing run's rerun line
# reruns it, and `k3diff report` without matplotlib is one line and exit 11.
# The suite's venv uses --system-site-packages: torch (and pytest, Hypothesis) come from the
# machine, installing torch a second time is minutes; k3diff itself comes from the wheel alone
# (checked). The report's venv is bare: `k3diff report` needs neither torch nor matplotlib to refuse.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
unset PYTHONPATH PYTEST_ADDOPTS
step() { echo "+ wheel: $*"; }

step "build"
# from a copy: an in-tree build keeps build/lib, whose stale files (deleted here since) would ship
mkdir "$W/src"
cp -a "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/k3diff" "$ROOT/reference" "$ROOT/megakernel" "$W/src/"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$W/dist" "$W/src" >/dev/null
WHEEL=$(ls "$W"/dist/k3diff-*.whl)
"$PY" -c "import sys, zipfile
n = sum(f.startswith('k3diff/corpora/regressions/') and f.endswith('.json') for f in zipfile.ZipFile(sys.argv[1]).namelist())
sys.exit(None if n else 'FAILED: the wheel holds no regression seeds (k3diff/corpora/regressions)')" "$WHEEL"

step "install into a venv (system site packages for torch)"
# --without-pip: ensurepip cost ~5 s of CPU a venv; the machine's pip (a system-site venv sees it,
# `pip --python` serves the bare one) installs into the venv all the same
"$PY" -m venv --system-site-packages --without-pip "$W/venv"
"$W/venv/bin/python" -m pip install -q --no-deps --no-index --force-reinstall "$WHEEL" 2>&1 | grep -v "outside environment" || true
mkdir "$W/empty"; cd "$W/empty"
export PATH="$W/venv/bin:$PATH"
python -c "import k3diff, sys; p = k3diff.__file__
sys.exit(None if p.startswith('$W/venv/') else 'FAILED: k3diff imported from ' + p + ', not the wheel')"

step "pytest --k3diff from an empty folder (the README's first command; -k: the seeds and moe, for time)"
# one run, its seeds counted from its own -rp lines (PASSED ...): a separate --co run only to count them cost
# CI an interpreter with torch and a collection (7 s of CPU); a failing run shows its tail and fails here
run=$(python -m pytest --k3diff -k "test_seed or moe" -q -rp -p no:cacheprovider -p no:randomly) ||
  { printf '%s\n' "$run" | grep -v "^PASSED " | tail -n 30; echo "FAILED: pytest --k3diff from $W/empty"; exit 1; }
printf '%s\n' "$run" | grep -v -e "^PASSED " -e "short test summary info" | tail -n 2
seeds=$(printf '%s\n' "$run" | grep -c "^PASSED .*test_seed\[" || true)
[ "$seeds" -ge 1 ] || { echo "FAILED: no shipped regression seed replayed from $W/empty"; printf '%s\n' "$run" | tail -n 20; exit 1; }
echo "  ($seeds shipped regression seeds replayed and passed)"

step "a failing run's rerun line reruns it"
cat > mycand.py <<'PYEOF'
from k3diff.mutants import BY_NAME, MutantBackend


class Broken(MutantBackend):
    def __init__(self):
        super().__init__(BY_NAME["bias_in_weights"])
        self.name = "mycand:Broken"
PYEOF
first=$(PYTHONPATH=$PWD python -m pytest --k3diff --k3diff-backend mycand:Broken -k "fuzz and moe" -q \
  -p no:cacheprovider -p no:randomly --k3diff-save=seeds || true)
line=$(printf '%s\n' "$first" | sed -n 's/^next: .*rerun with `\([^`]*\)`.*/\1/p')
[ -n "$line" ] || { echo "FAILED: no rerun line"; printf '%s\n' "$first" | tail -n 20; exit 1; }
echo "  rerun: $line"
second=$(PYTHONPATH=$PWD bash -c "$line" || true)
a=$(printf '%s\n' "$first" | grep "^FAILED " | sort); b=$(printf '%s\n' "$second" | grep "^FAILED " | sort)
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAILED: the rerun judged otherwise"; echo "$a"; echo "$b"; exit 1; }
echo "  same failure: $(printf '%s\n' "$a" | head -n 1)"

step "k3diff report without matplotlib (a bare venv)"
"$PY" -m venv --without-pip "$W/bare"
"$PY" -m pip --python "$W/bare/bin/python" install -q --no-deps --no-index "$WHEEL"
echo '{"kind": "run"}' > r.jsonl
set +e
msg=$("$W/bare/bin/k3diff" report r.jsonl 2>&1); rc=$?
set -e
echo "  exit $rc: $msg"
[ "$rc" -eq 11 ] && [ "$(printf '%s\n' "$msg" | wc -l)" -eq 1 ] || { echo "FAILED: expected one line and exit 11"; exit 1; }
echo "wheel: ok"
