#!/usr/bin/env python3
"""Top SASS instructions by warp-stall samples from `ncu --page source --csv --print-source sass` output
(bench/device.sh full91|full73 writes it as sass_<block>.csv), with the opcode totals.
Usage: python3 bench/sass_top.py sass_kb2-91.csv [rows]"""
import csv
import sys
from collections import Counter


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path, rows = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # ncu prints its own messages before the table
    head = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), 0)  # after a "Kernel Name" line
    lines = lines[head:]
    table = list(csv.DictReader(lines))
    if not table:
        sys.exit(f"{path}: no table")
    cols = list(table[0].keys())
    stall = next(c for c in cols if c and c.startswith("Warp Stall Sampling (All"))
    src = next(c for c in cols if c == "Source")
    execd = next((c for c in cols if c and c.startswith("Instructions Executed")), None)
    total = sum(num(r[stall]) for r in table) or 1.0
    print(f"{len(table)} instructions, {total:.0f} stall samples ({stall})")
    ops, op_exec = Counter(), Counter()
    for r in table:
        op = r[src].split()[0] if r[src].split() else "?"
        if op.startswith("@"):
            op = r[src].split()[1] if len(r[src].split()) > 1 else op
        op = op.split(".")[0]
        ops[op] += num(r[stall])
        if execd:
            op_exec[op] += num(r[execd])
    print("by opcode (stall %, executed warp instructions):")
    for op, v in ops.most_common(20):
        print(f"  {op:12s} {100 * v / total:5.1f}%  {op_exec[op]:.3g}")
    print(f"top {rows} instructions:")
    for r in sorted(table, key=lambda r: -num(r[stall]))[:rows]:
        print(f"  {r.get('Address', ''):>8s} {100 * num(r[stall]) / total:5.2f}%  {r[src][:90]}")


if __name__ == "__main__":
    main()
