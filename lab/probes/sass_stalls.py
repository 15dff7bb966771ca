"""python3 scripts/gpu_calls/sass_stalls.py FILE.sass.csv [N]: where a kernel's warps stall, from
ncu's per-SASS-instruction sampling (`ncu --import R --page source --csv --print-source sass`):
the stall reasons summed by opcode, then the N hottest instructions with their main reasons."""
import csv
import gzip
import sys
from collections import defaultdict


def read_rows(path):
    """An ncu CSV export's rows, plain or gzipped (docs/ncu keeps them as .gz)."""
    return list(csv.reader((gzip.open if path.endswith(".gz") else open)(path, "rt")))


def main(path, n=30):
    rows = read_rows(path)
    hdr = rows[1]
    ix = {h: k for k, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    insts = []
    for r in rows[2:]:
        if len(r) != len(hdr):
            continue
        src = r[ix["Source"]].strip()
        st = {h: int(r[ix[h]] or 0) for h in reasons}
        insts.append((int(r[ix["Warp Stall Sampling (All Samples)"]] or 0), r[ix["Address"]], src, st))
    total = sum(s for s, *_ in insts)
    by_op = defaultdict(lambda: defaultdict(int))
    for s, _, src, st in insts:
        op = src.split()[0] if not src.startswith("@") else src.split()[1]
        op = op.split(".")[0]
        for h, v in st.items():
            by_op[op][h] += v
        by_op[op]["all"] += s
    print(f"{total} samples, {len(insts)} instructions")
    print("by opcode (share of samples; main reasons):")
    for op, d in sorted(by_op.items(), key=lambda kv: -kv[1]["all"])[:18]:
        top = sorted(((v, h) for h, v in d.items() if h != "all"), reverse=True)[:3]
        print(f"  {op:10s} {100 * d['all'] / total:5.1f}%  " +
              ", ".join(f"{h[6:]} {100 * v / total:.1f}" for v, h in top if v))
    print(f"the {n} hottest instructions:")
    for k, (s, addr, src, st) in enumerate(insts):
        pass
    order = sorted(range(len(insts)), key=lambda k: -insts[k][0])[:n]
    for k in sorted(order):
        s, addr, src, st = insts[k]
        top = sorted(((v, h) for h, v in st.items()), reverse=True)[:2]
        print(f"  #{k:5d} {100 * s / total:5.2f}% {src[:60]:60s} " +
              ", ".join(f"{h[6:]} {v}" for v, h in top if v))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30)
