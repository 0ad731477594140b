#!/usr/bin/env python3
"""End-to-end latency of a steady run (scripts/peers/debezium/steady): reads the topic as
`kafka-console-consumer --formatter-property print.timestamp=true` prints it, on stdin, on a
topic whose timestamps are the broker's append times (`message.timestamp.type=LogAppendTime`),
and compares each measured message's append time with the `t` its payload carries (the
database's clock at the insert; one machine, one clock).

    latency.py ROWS < consumer-output

Prints one line of JSON: messages of the window seen, distinct, missing, and the latency's
p50, p90, p99 and max in ms. Only `m-…` events count (the warm-up's `w-…` do not).
"""
import json
import sys


def percentile(values, q):
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def main():
    rows = int(sys.argv[1])
    latencies, seen = [], set()
    messages = 0
    for line in sys.stdin:
        stamp, _, value = line.rstrip("\n").partition("\t")
        if not stamp.startswith("LogAppendTime:"):
            continue
        try:
            payload = json.loads(value)
        except ValueError:
            continue
        event = payload.get("auditId", "")
        if not event.startswith("m-"):
            continue
        messages += 1
        seen.add(event)
        latencies.append(int(stamp.split(":", 1)[1]) - int(payload["t"]))
    latencies.sort()
    print(json.dumps({
        "messages": messages,
        "distinct": len(seen),
        "missing": rows - len(seen),
        "p50_ms": percentile(latencies, 0.50),
        "p90_ms": percentile(latencies, 0.90),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": latencies[-1] if latencies else None,
    }))


if __name__ == "__main__":
    main()
