"""python3 scripts/gpu_calls/ncu_details.py A.details.csv [B.details.csv ...]: ncu's details page
(`ncu --import R --page details --csv`, as common.sh's ncu_experts exports it) side by side, one
column per file: every metric the first file has, in its order. With sass_stalls.py (where the
warps stall, per instruction) it gives the table of docs/megakernel-notes.md, nineteenth session."""
import sys

from sass_stalls import read_rows     # this folder is on sys.path when run as a script


def metrics(path):
    rows = read_rows(path)
    ix = {h: k for k, h in enumerate(rows[0])}
    out = {}
    for r in rows[1:]:
        if len(r) > ix["Metric Value"] and r[ix["Metric Name"]]:
            out[(r[ix["Section Name"]], r[ix["Metric Name"]])] = (r[ix["Metric Value"]], r[ix["Metric Unit"]])
    return out


def main(paths):
    cols = [metrics(p) for p in paths]
    print(f"{'section':28s} {'metric':42s} " + " ".join(f"{p.rsplit('/', 1)[-1][:14]:>14s}" for p in paths))
    for key, (_, unit) in cols[0].items():
        vals = " ".join(f"{c.get(key, ('-',))[0]:>14s}" for c in cols)
        print(f"{key[0][:28]:28s} {key[1][:42]:42s} {vals} {unit}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
