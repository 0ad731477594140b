#!/usr/bin/env python3
"""Steady load for scripts/peers/debezium/steady: inserts outbox rows at a fixed rate through
one psql session, first a warm-up, then the measured window, and reads CPU and memory over that
window.

    load.py --psql 'psql ARGS...' --rate R --warm W --seconds S --relay-pid P --pg-data DIR
            [--kafka-pid K]

Every 20 ms one INSERT (its own transaction) of R/50 rows: event ids `w-…` while warming up,
`m-…` in the window; each payload carries `t`, the server's clock at the insert in ms, which
latency.py compares with the broker's append time. Prints one line of JSON: rows inserted in
the window, its length, and the CPU ticks (utime+stime) in it of the relay process, the private
Postgres (all its processes) and the Kafka broker, with the relay's peak RSS (VmHWM).
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import TICK, postgres_ticks, ticks  # noqa: E402

STEP = 0.02


def insert(prefix, first, last):
    return (
        "INSERT INTO audit_outbox (event_id, aggregate_type, aggregate_id, event_type, payload) "
        f"SELECT '{prefix}-' || g, 'user', 'user-' || (g % 1000), 'auth.mfa_policy_changed', "
        f"jsonb_build_object('auditId', '{prefix}-' || g, 'actor', 'admin@example.com', "
        "'userId', 'user-' || (g % 1000), 'policy', 'mfa_required', "
        "'t', (extract(epoch FROM clock_timestamp()) * 1000)::bigint) "
        f"FROM generate_series({first}, {last}) g;\n"
    )


def peak_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--psql", required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--warm", type=float, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--relay-pid", type=int, required=True)
    ap.add_argument("--pg-data", required=True)
    ap.add_argument("--kafka-pid", type=int)
    a = ap.parse_args()
    psql = subprocess.Popen(a.psql, shell=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    owed, rows, started = 0.0, {"w": 0, "m": 0}, time.monotonic()
    window = None
    tick = 0
    while True:
        now = time.monotonic()
        prefix = "w" if now - started < a.warm else "m"
        if prefix == "m" and window is None:
            psql.stdin.flush()
            window = {
                "t": now,
                "relay": ticks(a.relay_pid)[0],
                "pg": postgres_ticks(a.pg_data),
                "kafka": ticks(a.kafka_pid)[0] if a.kafka_pid else 0,
            }
        if now - started >= a.warm + a.seconds:
            break
        owed += a.rate * STEP
        count = int(owed)
        owed -= count
        if count:
            first = rows[prefix] + 1
            rows[prefix] += count
            psql.stdin.write(insert(prefix, first, rows[prefix]))
            psql.stdin.flush()
        tick += 1
        # Paced against the start, so a slow statement is caught up, not carried forward.
        time.sleep(max(0.0, started + tick * STEP - time.monotonic()))
    # The window ends once psql has run every statement (it echoes after the last), read while
    # its backend still lives: a backend that exited but is not yet reaped counts nowhere.
    psql.stdin.write("\\echo window-end\n")
    psql.stdin.flush()
    for line in psql.stdout:
        if line.strip() == "window-end":
            break
    end = {
        "t": time.monotonic(),
        "relay": ticks(a.relay_pid)[0],
        "pg": postgres_ticks(a.pg_data),
        "kafka": ticks(a.kafka_pid)[0] if a.kafka_pid else 0,
    }
    psql.stdin.close()
    if psql.wait() != 0:
        raise SystemExit("load.py: psql failed")
    print(json.dumps({
        "rate": a.rate,
        "warm_rows": rows["w"],
        "rows": rows["m"],
        "window_s": end["t"] - window["t"],
        "relay_ticks": end["relay"] - window["relay"],
        "pg_ticks": end["pg"] - window["pg"],
        "kafka_ticks": (end["kafka"] - window["kafka"]) if a.kafka_pid else None,
        "relay_peak_rss_kib": peak_rss_kib(a.relay_pid),
        "clk_tck": TICK,
    }))


if __name__ == "__main__":
    main()
