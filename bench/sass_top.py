#!/usr/bin/env python3
"""Where a kernel's warp-stall samples are, from `ncu --page source --csv --print-source sass` output
(bench/device.sh full91|full73 writes it as sass_<block>.csv): the stall reasons, the opcode totals, the top
instructions, and the code in windows of consecutive instructions (share of samples, top reasons, opcode mix,
highest execution count: loop bodies and per-tile code stand out by it).
Usage: python3 bench/sass_top.py sass_kb2-91.csv [rows [window]]"""
import csv
import sys
from collections import Counter

ALL = "Warp Stall Sampling (All"


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):  # predicate
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def load(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own messages before the table
    head = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), 0)  # after a "Kernel Name" line
    table = list(csv.DictReader(lines[head:]))
    if not table:
        sys.exit(f"{path}: no table")
    return table


def reasons(rows, cols, stall):
    """Samples per stall reason; samples ncu gives no reason for (wgmma waits among them) as "other"."""
    out = Counter()
    for r in rows:
        named = 0.0
        for c in cols:
            v = num(r[c])
            out[c[len("stall_"):]] += v
            named += v
        out["other"] += max(num(r[stall]) - named, 0.0)
    return out


def main():
    path = sys.argv[1]
    nrows = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    window = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    table = load(path)
    cols = list(table[0].keys())
    stall = next(c for c in cols if c and c.startswith(ALL))
    execd = next((c for c in cols if c and c.startswith("Instructions Executed")), None)
    rcols = [c for c in cols if c and c.startswith("stall_") and "Not Issued" not in c]
    total = sum(num(r[stall]) for r in table) or 1.0
    print(f"{len(table)} instructions, {total:.0f} stall samples ({stall})")
    print("reasons: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in reasons(table, rcols, stall).most_common(10)))
    ops, op_exec = Counter(), Counter()
    for r in table:
        ops[opcode(r["Source"])] += num(r[stall])
        if execd:
            op_exec[opcode(r["Source"])] += num(r[execd])
    print("by opcode (stall %, executed warp instructions):")
    for op, v in ops.most_common(20):
        print(f"  {op:12s} {100 * v / total:5.1f}%  {op_exec[op]:.3g}")
    print(f"top {nrows} instructions:")
    for r in sorted(table, key=lambda r: -num(r[stall]))[:nrows]:
        print(f"  {r.get('Address', ''):>8s} {100 * num(r[stall]) / total:5.2f}%  {r['Source'][:90]}")
    print(f"windows of {window} instructions with >= 0.5% of the samples:")
    for i in range(0, len(table), window):
        blk = table[i:i + window]
        s = sum(num(r[stall]) for r in blk)
        if s / total < 0.005:
            continue
        top = reasons(blk, rcols, stall).most_common(3)
        mix = Counter(opcode(r["Source"]) for r in blk).most_common(4)
        ex = max(num(r[execd]) for r in blk) if execd else 0
        print(f"  {blk[0].get('Address', '')[-6:]:>6s} {100 * s / total:5.1f}%  exec<={ex:<9.0f} "
              + " ".join(f"{k}:{100 * v / s:.0f}%" for k, v in top) + "  | " + " ".join(f"{k}:{v}" for k, v in mix))


if __name__ == "__main__":
    main()
