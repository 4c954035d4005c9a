"""bench/warehouse: how long a circuit breaker's query waits while the hourly cohort job runs,
through the warehouse service, in one run.

Data: `ccab sim bench/cohorts/scenario.yaml` (~1M tcp samples over 4 hours, the cohorts bench's
PoP), simulated once and loaded into a fresh embedded warehouse for each case (a chdb directory
cannot be copied: its Atomic databases link into it by absolute path).

Each case starts the warehouse service on that copy (a separate process, as deployed) and runs:
- the breaker query alone: the controller's own code (``ccab.judge.data.retrans_by_minute`` over
  the 12 minutes a 10-minute breaker reads, through ``ServerWarehouse`` at priority 1, as
  ``ccab.pipeline.controller_breakers`` does), ``ALONE_RUNS`` times;
- then the hourly cohort job over the 5 hours (``ccab cohorts run``, its own process, the way the
  Airflow task runs it) and, while it runs, the same breaker query every 0.25 s.

Cases: ``serialized`` — the service with one statement slot (``--slots 1 --reserved 0``): what one
chdb session (or a service that queues statements) gives: a breaker waits for the job's running
statement; ``service`` — the default (4 slots, 1 kept for priority statements; chdb runs
statements of different sessions in parallel). Prints per case the breaker's latency alone and
during the job (median, p95, max), the ratio during/alone, the service's own queue-wait
histogram for priority statements, and the job's time.

Usage: bench/warehouse/run.sh [--connections N]   (default 74,000 -> ~1M tcp samples)
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench" / "cohorts"))

import bench_cohorts  # noqa: E402  (the cohorts bench's simulation and loading)
from ccab.base.warehouse import ServerWarehouse  # noqa: E402
from ccab.judge.data import retrans_by_minute  # noqa: E402

ALONE_RUNS = 15
PERIOD_S = 0.25
CASES = (("serialized", 1, 0), ("service", 4, 1))
HOURS = ("2025-11-20T00:00Z", "2025-11-20T05:00Z")
#: the window a 10-minute breaker reads (longest breaker + 2 minutes), in the busiest hour
WINDOW = (datetime(2025, 11, 20, 1, 30, tzinfo=timezone.utc), datetime(2025, 11, 20, 1, 42, tzinfo=timezone.utc))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def breaker_once(wh) -> float:
    t = time.perf_counter()
    rows = retrans_by_minute(wh, "tyo1", "tyo1-bench", *WINDOW)
    assert rows, "the breaker's window holds samples"
    return time.perf_counter() - t


def priority_wait(url: str) -> str:
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    lines = [ln for ln in text.splitlines() if ln.startswith('ccab_warehouse_queue_wait_seconds_bucket{priority="priority"')]
    total = int(lines[-1].rsplit(" ", 1)[1]) if lines else 0
    within = {ln.split('le="')[1].split('"')[0]: int(ln.rsplit(" ", 1)[1]) for ln in lines}
    return f"{within.get('0.01', 0)}/{total} waited <= 10 ms, {within.get('0.1', 0)}/{total} <= 100 ms"


def run_case(name: str, slots: int, reserved: int, sim: Path, workdir: Path) -> dict:
    data = workdir / name
    wh = bench_cohorts.build_warehouse(data / "warehouse", sim, 1)
    bench_cohorts.settle_merges(wh)
    wh.close()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "CCAB_CLICKHOUSE_URL"}
    env.update(CCAB_DATA_DIR=str(data), CCAB_WAREHOUSE_PORT=str(port))
    log = open(data / "service.log", "wb")
    svc = subprocess.Popen([sys.executable, "-m", "ccab.warehouse_service", "serve", "--port", str(port),
                            "--slots", str(slots), "--reserved", str(reserved)], env=env, stdout=log,
                           stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                urllib.request.urlopen(url + "/ping", timeout=1)
                break
            except OSError:
                if svc.poll() is not None:
                    sys.exit(f"the service exited: {(data / 'service.log').read_text()[-2000:]}")
                time.sleep(0.1)
        wh = ServerWarehouse(url + "/ccab", local_path=data / "warehouse", priority=1)
        breaker_once(wh)  # warm
        alone = [breaker_once(wh) for _ in range(ALONE_RUNS)]
        t0 = time.perf_counter()
        job = subprocess.Popen([sys.executable, "-m", "ccab.cli", "cohorts", "run", "--from", HOURS[0], "--to", HOURS[1]],
                               env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        during: list[float] = []
        while job.poll() is None:
            during.append(breaker_once(wh))
            time.sleep(PERIOD_S)
        job_s = time.perf_counter() - t0
        if job.returncode != 0:
            sys.exit(f"the cohort job failed: {job.stderr.read()[-2000:]}")
        waits = priority_wait(url)
        wh.close()
    finally:
        svc.terminate()
        svc.wait(60)
        log.close()
    return {"name": name, "alone": alone, "during": during, "job_s": job_s, "waits": waits}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--connections", type=int, default=74_000)
    p.add_argument("--workdir", type=Path, default=None, help="keep the simulation here and reuse it")
    args = p.parse_args()
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ccab-bench-warehouse-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        sim = bench_cohorts.simulate(workdir, args.connections, keep=keep)
        samples = sum(1 for _ in open(sim / "ccab.tcp.v1.jsonl", "rb"))
        print(f"bench/warehouse: {samples:,} tcp samples; breaker query = retrans_by_minute over 12 minutes "
              f"(priority 1); hourly job = ccab cohorts run {HOURS[0]}..{HOURS[1]} in its own process")
        results = [run_case(n, s, r, sim, workdir) for n, s, r in CASES]
        for r in results:
            a, d = statistics.median(r["alone"]), statistics.median(r["during"])
            print(f"  {r['name']:<10} breaker alone p50 {a * 1000:7.1f} ms | during the job ({len(r['during'])} runs) "
                  f"p50 {d * 1000:7.1f} ms  p95 {pct(r['during'], 0.95) * 1000:7.1f} ms  max {max(r['during']) * 1000:7.1f} ms"
                  f" | p50 during/alone {d / a:5.2f}x | job {r['job_s']:5.1f} s | priority queue wait: {r['waits']}")
        ser, svc = results
        print(f"  breaker p95 during the job: service / serialized = "
              f"{pct(svc['during'], 0.95) / pct(ser['during'], 0.95):.3f}; max {max(svc['during']) / max(ser['during']):.3f}")
        print(f"  load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
        return 0
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            for name, _, _ in CASES:
                shutil.rmtree(workdir / name, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
