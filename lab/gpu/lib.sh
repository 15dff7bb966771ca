# lane runner: source from the repo root on the GPU machine after .device/env.sh
set -u
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export MEGAKERNEL_CACHE=${MEGAKERNEL_CACHE:-/tmp/mkc}
O=${OUT:-/tmp/out}; R=$O/res; mkdir -p "$R" "$MEGAKERNEL_CACHE"
END=${END:-555}; T0=$(date +%s)
MK=megakernel.backend:MegakernelBackend
P="python3 -m pytest -p k3diff.plugin tests/differential --k3diff -q -p no:cacheprovider -p no:randomly --k3diff-device cuda"
# compiled kernels carried in (.mkcache/mkc.tar.xz: built on the CPU by `python -m megakernel compile
# --arch sm_90a`, or a previous call's $OUT/mkc.tar.xz): a file that does not load is compiled again
[ -s .mkcache/mkc.tar.xz ] && tar -xJf .mkcache/mkc.tar.xz -C "$MEGAKERNEL_CACHE" 2>/dev/null
echo "kernel cache: $(find "$MEGAKERNEL_CACHE" -type f | wc -l) files"
echo "commit $(git rev-parse --short HEAD 2>/dev/null || cat lab/gpu/commit.txt 2>/dev/null) $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
python3 -c "import torch; print('torch', torch.__version__)"
# lane NAME CMD...: in the background, cut (SIGINT, so reports are closed) at END seconds from start
lane() {
  local name=$1; shift
  local left=$((END - ($(date +%s) - T0)))
  # past the deadline: not started (`timeout 0` would run it with no limit at all)
  [ "$left" -gt 0 ] || { echo "$name not started: the deadline passed" >> "$R/lanes.txt"; return; }
  echo "+ [$name] $*" >> "$R/commands.txt"
  ( timeout -s INT -k 25 "$left" "$@" > "$R/$name.txt" 2>&1; echo "$name rc=$? at $(( $(date +%s) - T0 ))s" >> "$R/lanes.txt" ) &
}
# seq_lane NAME CMD...: in the foreground, one run alone on the card, cut at END like lane
seq_lane() {
  local name=$1; shift
  local left=$((END - ($(date +%s) - T0)))
  [ "$left" -gt 0 ] || { echo "$name not started: the deadline passed" >> "$R/lanes.txt"; return; }
  echo "+ [$name] $*" >> "$R/commands.txt"
  timeout -s INT -k 25 "$left" "$@" > "$R/$name.txt" 2>&1
  echo "$name rc=$? at $(( $(date +%s) - T0 ))s" >> "$R/lanes.txt"
}
finish() {
  wait
  echo "=== lanes"; cat "$R/lanes.txt"
  for f in "$R"/*.txt; do
    case $f in */lanes.txt|*/commands.txt) continue;; esac
    echo "=== $(basename "$f")"
    grep -E "^backend|^stage|^[a-z-]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+|^time per|never crossed|refused|too large|passed|failed|error|Error|^next" "$f" | grep -v "^  " | head -30
  done
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  tar -C "$R/.." -czf "$O/res.tgz" res 2>/dev/null
  tar -C "$MEGAKERNEL_CACHE" -cJf "$O/mkc.tar.xz" . 2>/dev/null     # for the next call's .mkcache/
  echo "total $(( $(date +%s) - T0 ))s"
}
