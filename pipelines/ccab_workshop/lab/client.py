"""The lab's traffic client, run inside the client namespace:

    ip netns exec NS python -m ccab_workshop.lab.client PLAN.json OUT.jsonl

PLAN: {"t0": unix seconds, "seed": int, "flows": [{"id", "kind", "url", "start_s", "duration_s",
"size_bytes", "rate_per_s"}]}. Stdlib only (it starts fast and needs no venv imports).

- ``stream``: one HTTP/1.1 GET of /stream, read until ``start_s + duration_s``, then closed.
  Writes {"type": "stream", "id", "t_start", "t_end", "bytes", "progress": [[t, bytes], ...]}.
- ``requests``: Poisson arrivals (seeded), one new connection per request, the rate stepping
  through ``rate_per_s`` in equal phases. One line per request: {"type": "request", "id",
  "size", "t_start", "latency_ms", "ttfb_ms", "bytes", "ok", "phase", "rate_per_s"}.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import threading
import time
from urllib.parse import urlparse

PROGRESS_EVERY_S = 0.25


def _request(url: str) -> tuple[socket.socket, bytes]:
    u = urlparse(url)
    s = socket.create_connection((u.hostname, u.port or 80), timeout=30)
    s.sendall(f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}\r\nConnection: close\r\n\r\n".encode())
    return s, b""


def _read_header(s: socket.socket) -> tuple[int, int, bytes]:
    """(status, content_length, body bytes already read)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the header")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = -1
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    return status, length, rest


def stream(flow: dict, t0: float, out: list, lock: threading.Lock) -> None:
    start = t0 + flow["start_s"]
    end = start + flow["duration_s"]
    time.sleep(max(0.0, start - time.time()))
    rec = {"type": "stream", "id": flow["id"], "t_start": time.time(), "bytes": 0, "progress": [], "error": None}
    try:
        s, _ = _request(flow["url"])
        s.settimeout(1.0)
        _status, _length, body = _read_header(s)
        n = len(body)
        next_mark = time.time() + PROGRESS_EVERY_S
        while True:
            now = time.time()
            if now >= end:
                break
            try:
                chunk = s.recv(262144)
            except socket.timeout:
                continue  # nothing within 1 s (collapsed flow): keep waiting until the end
            if not chunk:
                break
            n += len(chunk)
            if now >= next_mark:
                rec["progress"].append([round(now, 3), n])
                next_mark += PROGRESS_EVERY_S
        rec["bytes"] = n
        s.close()
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    rec["t_end"] = time.time()
    with lock:
        out.append(rec)


def one_request(flow: dict, phase: int, rate: float, out: list, lock: threading.Lock) -> None:
    t = time.time()
    rec = {"type": "request", "id": flow["id"], "size": flow["size_bytes"], "t_start": round(t, 4), "phase": phase,
           "rate_per_s": rate, "ok": False, "bytes": 0, "latency_ms": None, "ttfb_ms": None}
    try:
        s, _ = _request(flow["url"])
        status, length, body = _read_header(s)
        rec["ttfb_ms"] = round((time.time() - t) * 1000, 3)
        n = len(body)
        while length < 0 or n < length:
            chunk = s.recv(262144)
            if not chunk:
                break
            n += len(chunk)
        s.close()
        rec["latency_ms"] = round((time.time() - t) * 1000, 3)
        rec["bytes"] = n
        rec["ok"] = status == 200 and n == length
    except OSError as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
    with lock:
        out.append(rec)


def requests(flow: dict, t0: float, rng: random.Random, out: list, lock: threading.Lock) -> None:
    start = t0 + flow["start_s"]
    rates = flow["rate_per_s"]
    phase_len = flow["duration_s"] / len(rates)
    threads = []
    t = start
    for phase, rate in enumerate(rates):
        phase_end = start + (phase + 1) * phase_len
        while True:
            t += rng.expovariate(rate)
            if t >= phase_end:
                t = phase_end
                break
            time.sleep(max(0.0, t - time.time()))
            th = threading.Thread(target=one_request, args=(flow, phase, rate, out, lock), daemon=True)
            th.start()
            threads.append(th)
    for th in threads:
        th.join(timeout=60)


def main(argv: list[str]) -> int:
    plan = json.load(open(argv[0]))
    out: list = []
    lock = threading.Lock()
    threads = []
    for i, flow in enumerate(plan["flows"]):
        if flow["kind"] == "stream":
            th = threading.Thread(target=stream, args=(flow, plan["t0"], out, lock), daemon=True)
        else:
            rng = random.Random(f"{plan['seed']}/{flow['id']}/{i}")
            th = threading.Thread(target=requests, args=(flow, plan["t0"], rng, out, lock), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    with open(argv[1], "w") as f:
        for rec in out:
            f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
