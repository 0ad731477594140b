#!/usr/bin/env python3
"""Times one drain for scripts/peers/debezium/run: starts a relay process (Kafka Connect or
handoff), watches the topic's end offsets until they sum to N, reads CPU, stops the process.

    measure.py --bootstrap H:P --topic T --partitions 3 --n N --pg-data DIR --log FILE
               [--delivered 'psql ARGS...'] -- COMMAND ARGS...

Prints one line of JSON: wall seconds from the process start to the N-th message (`total_s`)
and from the first message seen to the N-th (`steady_s`, with the count already stored at the
first look), the process's and the private Postgres's CPU ticks (utime+stime from /proc, in
CLK_TCK) at start, at the first message and at the end. With --delivered, the end also waits
until that psql command prints N (handoff: rows marked DELIVERED).

Offsets come from ListOffsets requests (v1, latest) on one socket kept open, every 20 ms, in
this process: a Kafka CLI JVM per poll would cost seconds of CPU on a 2-core machine and be
counted nowhere. Python's own CPU is reported too (`watcher_ticks`) to show it stays small.
"""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kafka"))
from probe import exchange  # noqa: E402  (scripts/kafka/probe.py: one framed Kafka request)

TICK = os.sysconf("SC_CLK_TCK")


class Offsets:
    """The sum of a topic's partitions' end offsets, asked of one broker (a single-node cluster:
    it leads every partition)."""

    def __init__(self, bootstrap, topic, partitions):
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.topic, self.partitions, self.correlation = topic.encode(), partitions, 0

    def total(self):
        self.correlation += 1
        client = b"peers-measure"
        # Header v1: api key 2 (ListOffsets), version 1, correlation id, client id. Body v1:
        # replica_id -1, one topic with every partition at timestamp -1 (latest).
        body = struct.pack(">hhih", 2, 1, self.correlation, len(client)) + client
        body += struct.pack(">iih", -1, 1, len(self.topic)) + self.topic
        body += struct.pack(">i", self.partitions)
        for p in range(self.partitions):
            body += struct.pack(">iq", p, -1)
        data = exchange(self.sock, body)
        correlation, topics = struct.unpack_from(">ii", data, 0)
        assert correlation == self.correlation and topics == 1
        (nlen,) = struct.unpack_from(">h", data, 8)
        at = 10 + nlen
        (count,) = struct.unpack_from(">i", data, at)
        at += 4
        total = 0
        for _ in range(count):
            _partition, error, _ts, offset = struct.unpack_from(">ihqq", data, at)
            at += 22
            if error == 3:  # UNKNOWN_TOPIC_OR_PARTITION: not created yet
                return 0
            if error:
                raise RuntimeError(f"ListOffsets error {error}")
            total += offset
        return total


def ticks(pid):
    """utime+stime, and cutime+cstime (reaped children), of one process, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0, 0, None
    # After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14]), int(fields[1])


def postgres_ticks(data_dir):
    """CPU ticks of one Postgres cluster: the postmaster (with the backends it reaped) and every
    live child (backends, walsenders, checkpointer, autovacuum...)."""
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        pm = int(f.readline())
    own, reaped, _ = ticks(pm)
    total = own + reaped
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pm:
            own, _, ppid = ticks(int(entry))
            if ppid == pm:
                total += own
    return total


def snapshot(pid, pg_data):
    own, _, _ = ticks(pid)
    return {"t": time.monotonic(), "proc": own, "pg": postgres_ticks(pg_data), "watcher": ticks(os.getpid())[0]}


def wait(bootstrap, topic, partitions, count, timeout):
    """`measure.py wait H:P TOPIC PARTITIONS COUNT TIMEOUT`: until the topic holds COUNT."""
    offsets, deadline = Offsets(bootstrap, topic, int(partitions)), time.monotonic() + float(timeout)
    while offsets.total() < int(count):
        if time.monotonic() > deadline:
            raise SystemExit(f"measure.py: {topic} did not reach {count} messages in {timeout}s")
        time.sleep(0.1)


def main():
    if sys.argv[1:2] == ["wait"]:
        return wait(*sys.argv[2:7])
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--pg-data", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--delivered", help="a shell command printing the DELIVERED count")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command and a.command[0] == "--" else a.command

    offsets = Offsets(a.bootstrap, a.topic, a.partitions)
    assert offsets.total() == 0, f"topic {a.topic} is not empty"
    with open(a.log, "ab") as log:
        # Snapshot just before the start: the process's own ticks are 0 then.
        start = snapshot(os.getpid(), a.pg_data)
        start["proc"] = 0
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    first = end = None
    first_count = 0
    try:
        while True:
            if child.poll() is not None:
                raise SystemExit(f"measure.py: {cmd[0]} exited ({child.returncode}) early; see {a.log}")
            stored = offsets.total()
            if first is None and stored > 0:
                first, first_count = snapshot(child.pid, a.pg_data), stored
            if stored >= a.n:
                if a.delivered:
                    out = subprocess.run(a.delivered, shell=True, capture_output=True, text=True).stdout.strip()
                    if int(out or 0) < a.n:
                        time.sleep(0.02)
                        continue
                end = snapshot(child.pid, a.pg_data)
                break
            if time.monotonic() - start["t"] > a.timeout:
                raise SystemExit(f"measure.py: only {stored} of {a.n} messages after {a.timeout}s")
            time.sleep(0.02)
    finally:
        # SIGTERM: Connect's shutdown hook stops the task and commits its offsets; handoff
        # finishes its batch and exits.
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    final = offsets.total()
    print(json.dumps({
        "n": a.n,
        "stored_at_end": final,
        "total_s": end["t"] - start["t"],
        "startup_s": first["t"] - start["t"],
        "steady_s": end["t"] - first["t"],
        "first_count": first_count,
        "proc_ticks": end["proc"] - start["proc"],
        "proc_ticks_steady": end["proc"] - first["proc"],
        "pg_ticks": end["pg"] - start["pg"],
        "pg_ticks_steady": end["pg"] - first["pg"],
        "watcher_ticks": end["watcher"] - start["watcher"],
        "clk_tck": TICK,
    }))


if __name__ == "__main__":
    main()
