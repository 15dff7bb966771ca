#!/usr/bin/env bash
# Point the code's citations at the documents now in the repository (issue 30):
#   K3_SPEC §N, K3_SPEC N, K3_SPEC.md, K3_SPEC  ->  docs/k3-decode.md §N, docs/k3-decode.md
#   DESIGN.md                                   ->  docs/design.md
#   megakernel/NOTES.md, NOTES.md               ->  docs/megakernel-notes.md
# and first correct the three KDA citations that name the wrong section of the spec (the conv is
# §4.3, the gates and delta rule §4.4-4.5, the gated norm §4.6).
#
# Comments and docstrings only change; one string changes what a command prints: the reason of the
# default budget (k3diff/budgets.py, shown by `k3diff budgets`), no verdict. Run it once from the
# repository root after the branches are merged, on a clean tree, then review `git diff` and set
# RENAMED = True in tests/test_citations.py. Running it twice changes nothing. `--dry-run` lists
# the files it would change.
set -euo pipefail
cd "$(dirname "$0")/.."

# every tracked .py and .md file, except the cited documents themselves, this script and its test
mapfile -t files < <(git ls-files -- '*.py' '*.md' | grep -v -e '^docs/k3-decode\.md$' \
  -e '^docs/design\.md$' -e '^docs/megakernel-notes\.md$' -e '^tests/test_citations\.py$')

spec='(K3_SPEC|docs/k3-decode\.md) ?§?'
sed_args=(
  # the three wrong sections, matched by the sentence around them (idempotent)
  -e "s#(the short causal conv \()${spec}4\.2\)#\1K3_SPEC 4.3)#"
  -e "s#(the gated RMSNorm per head \()${spec}4\.5\)#\1K3_SPEC 4.6)#"
  -e "s#(the recurrent core \()${spec}4\.3-4\.4\)#\1K3_SPEC 4.4-4.5)#"
  # the spec
  -e 's#K3_SPEC\.md#docs/k3-decode.md#g'
  -e 's#K3_SPEC §#docs/k3-decode.md §#g'
  -e 's#K3_SPEC ([0-9])#docs/k3-decode.md §\1#g'
  -e 's#K3_SPEC#docs/k3-decode.md#g'
  # the design notes
  -e 's#DESIGN\.md#docs/design.md#g'
  # the megakernel's lab log (not CUTEDSL_NOTES, not a path that already names docs/)
  -e 's#megakernel/NOTES\.md#docs/megakernel-notes.md#g'
  -e 's#(^|[^A-Za-z0-9_/.-])NOTES\.md#\1docs/megakernel-notes.md#g'
)

changed=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  if ! sed -E "${sed_args[@]}" "$f" | cmp -s - "$f"; then changed+=("$f"); fi
done
if [ "${1:-}" = "--dry-run" ]; then
  printf '%s\n' "${changed[@]}"
  exit 0
fi
for f in "${changed[@]}"; do sed -E -i "${sed_args[@]}" "$f"; done
echo "cite_rename: ${#changed[@]} files changed"
left=$(git grep -n -e 'K3_SPEC' -e 'DESIGN\.md' -- '*.py' | grep -v '^tests/test_citations\.py:' || true)
if [ -n "$left" ]; then echo "still citing the old names:"; echo "$left"; exit 1; fi
