#!/usr/bin/env python3
"""Prints scripts/peers/debezium/run's results (one JSON line per drain, from measure.py) as one
markdown table: every run, each side's median, and the ratio handoff / Debezium of the medians.

Columns: rows/s over the whole window (process start to the N-th message: start-up included),
rows/s from the first message seen to the N-th (start-up excluded), start-up seconds, the relay
process's CPU per event (whole window and first-to-N-th), the private Postgres's CPU per event
(whole window)."""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]


def figures(d):
    us = 1e6 / d["clk_tck"]
    steady_n = d["n"] - d["first_count"]
    return {
        "rate": d["n"] / d["total_s"],
        "rate_steady": steady_n / d["steady_s"],
        "startup": d["startup_s"],
        "cpu": d["proc_ticks"] * us / d["n"],
        "cpu_steady": d["proc_ticks_steady"] * us / steady_n,
        "pg": d["pg_ticks"] * us / d["n"],
        "pg_steady": d["pg_ticks_steady"] * us / steady_n,
    }


cols = ["rate", "rate_steady", "startup", "cpu", "cpu_steady", "pg", "pg_steady"]
fmt = {"rate": "{:,.0f}", "rate_steady": "{:,.0f}", "startup": "{:.1f}", "cpu": "{:.1f}",
       "cpu_steady": "{:.1f}", "pg": "{:.1f}", "pg_steady": "{:.1f}"}
print(f"N = {rows[0]['n']:,} rows per drain; CPU in µs per event (clock ticks of 1/{rows[0]['clk_tck']} s)\n")
print("| side | run | rows/s, start→N-th | rows/s, 1st→N-th | start-up s | relay CPU µs/ev | relay CPU µs/ev, 1st→N-th | Postgres CPU µs/ev | Postgres CPU µs/ev, 1st→N-th |")
print("|---|---|" + "---:|" * len(cols))
medians = {}
for side in ("debezium", "handoff"):
    mine = [figures(d) | {"run": d["run"]} for d in rows if d["side"] == side]
    for f in sorted(mine, key=lambda f: f["run"]):
        print(f"| {side} | r{f['run']} | " + " | ".join(fmt[c].format(f[c]) for c in cols) + " |")
    if mine:
        medians[side] = {c: statistics.median(f[c] for f in mine) for c in cols}
        print(f"| **{side}** | **median** | " + " | ".join("**" + fmt[c].format(medians[side][c]) + "**" for c in cols) + " |")
if len(medians) == 2:
    h, d = medians["handoff"], medians["debezium"]
    print("| handoff / Debezium | medians | " + " | ".join(f"{h[c] / d[c]:.3g}×" if d[c] else "–" for c in cols) + " |")
