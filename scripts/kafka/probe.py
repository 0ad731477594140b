#!/usr/bin/env python3
"""Asks a Kafka bootstrap for its brokers with one Metadata request (version 4, no topics).

    probe.py HOST:PORT[,HOST:PORT...] [--brokers N] [--node ID]

Exits 0 when a bootstrap address answers and its answer lists at least N brokers (default 1)
and, with --node, the broker ID: a KRaft cluster lists only registered, unfenced brokers, so
that is "ready to take produce requests", which an open port is not. Prints the node ids found
on stdout. Exits 1 when nothing answers or too few brokers are listed, 3 when something answers
on the port but not as Kafka. scripts/services uses it to wait for a broker it started instead
of sleeping, and to tell whether a Kafka already answers; it costs milliseconds where a Kafka
tool's JVM costs seconds of CPU.
"""
import socket
import struct
import sys


def metadata(host, port, timeout=2.0):
    # Request header v1 (api key 3 = Metadata, version 4, correlation id, client id), then the
    # body: an empty topics array (no topics, just the brokers), allow_auto_topic_creation false.
    client = b"handoff-probe"
    body = struct.pack(">hhih", 3, 4, 1, len(client)) + client + struct.pack(">i?", 0, False)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        data = exchange(s, body)
    # Response v4: correlation id, throttle_time_ms, brokers [node_id, host, port, rack].
    correlation, _throttle, count = struct.unpack_from(">iii", data, 0)
    if correlation != 1 or not 0 <= count < 10000:
        raise ValueError("not a Kafka Metadata response")
    at, nodes = 12, []
    for _ in range(count):
        (node,) = struct.unpack_from(">i", data, at)
        (hlen,) = struct.unpack_from(">h", data, at + 4)
        at += 6 + hlen + 4
        (rlen,) = struct.unpack_from(">h", data, at)
        at += 2 + max(rlen, 0)
        nodes.append(node)
    return nodes


def exchange(s, body):
    """Sends one request (BODY: header and body) on socket S, size first, and returns the bytes
    of its response after the size. scripts/peers/measure.py uses it too."""
    s.sendall(struct.pack(">i", len(body)) + body)
    return read(s, struct.unpack(">i", read(s, 4))[0])


def read(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return buf


def main(argv):
    bootstrap, want, node = argv[0], 1, None
    rest = argv[1:]
    while rest:
        flag, value, rest = rest[0], int(rest[1]), rest[2:]
        if flag == "--brokers":
            want = value
        elif flag == "--node":
            node = value
        else:
            raise SystemExit(f"probe.py: unknown flag {flag}")
    foreign = False
    for address in bootstrap.split(","):
        host, _, port = address.rpartition(":")
        try:
            nodes = metadata(host, int(port))
        except (OSError, ConnectionError):
            continue
        except (ValueError, struct.error):
            foreign = True
            continue
        if len(nodes) >= want and (node is None or node in nodes):
            print(" ".join(str(n) for n in sorted(nodes)))
            return 0
    return 3 if foreign else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
