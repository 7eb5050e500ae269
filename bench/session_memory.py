#!/usr/bin/env python3
"""RSS of a Tether process against the number of finished sessions it served.

Starts the fake agent and one `tether serve` (SQLite store in a temporary directory, or
--store URL), then runs N short sessions (one non-streaming or streaming chat turn each,
a new session every time) from a few client threads, and prints the gateway's VmRSS
every --every sessions. A gateway that keeps state per finished session grows linearly;
one that does not stays flat once SQLite's page cache is full (its cap is fixed).

    bench/session_memory.py --tether target/debug/tether --sessions 100000 --every 10000
    bench/session_memory.py --tether BIN --soak-seconds 3600 --rate 10   # soak: time curve

Standard library only. Prints one line per sample: sessions, seconds, rss_kib, and at the
end the growth per session over the second half of the run (after the page cache filled).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start_agent() -> tuple[subprocess.Popen, int]:
    agent = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests/fake_agent.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = agent.stdout.readline()
    return agent, int(line.split()[1])


def start_tether(binary: str, agent_port: int, store: str, workdir: str) -> tuple[subprocess.Popen, int]:
    ready = os.path.join(workdir, "ready")
    log = open(os.path.join(workdir, "tether.log"), "w")
    env = dict(os.environ, TETHER_LOG_FORMAT="text", RUST_LOG="warn")
    env.pop("TETHER_CONF", None)
    tether = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--upstream", f"http://127.0.0.1:{agent_port}",
         "--protocol", "openai-chat", "--store", store, "--ready-file", ready],
        stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=workdir,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(ready) and open(ready).read().strip():
            return tether, int(open(ready).read().strip().rsplit(":", 1)[1])
        if tether.poll() is not None:
            sys.exit(f"tether exited: {open(log.name).read()}")
        time.sleep(0.05)
    sys.exit("tether did not start")


def turn(conn: http.client.HTTPConnection, stream: bool, leave: bool) -> None:
    body = {"model": "fake", "messages": [{"role": "user", "content": "Reply with OK"}], "stream": stream}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"})
    response = conn.getresponse()
    if leave:
        # A client that leaves mid-stream: read the first frame, then hang up.
        response.fp.readline()
        conn.close()
        return
    response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tether", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", "/root/.cache/tether-target"), "release/tether"))
    p.add_argument("--store", help="store URL (default: a fresh SQLite file)")
    p.add_argument("--sessions", type=int, default=100_000)
    p.add_argument("--every", type=int, default=10_000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--stream", action="store_true", help="streamed turns")
    p.add_argument("--leave", action="store_true", help="clients leave after the first frame")
    p.add_argument("--soak-seconds", type=int, default=0, help="run for this long at --rate instead")
    p.add_argument("--rate", type=float, default=10.0, help="sessions per second in a soak")
    args = p.parse_args()

    workdir = tempfile.mkdtemp(prefix="tether-memory-")
    store = args.store or os.path.join(workdir, "sessions.sqlite")
    agent, agent_port = start_agent()
    tether, port = start_tether(args.tether, agent_port, store, workdir)
    done = 0
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []
    started = time.time()

    def client(share: int) -> None:
        nonlocal done
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        pace = args.clients / args.rate if args.soak_seconds else 0.0
        for _ in range(share):
            if stop.is_set():
                return
            t0 = time.time()
            try:
                turn(conn, args.stream or args.leave, args.leave)
            except Exception as e:  # noqa: BLE001 - any failure is reported and counted
                errors.append(str(e))
                conn.close()
            if args.leave:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            with lock:
                done += 1
            if pace:
                time.sleep(max(0.0, pace - (time.time() - t0)))

    total = args.sessions if not args.soak_seconds else 10**9
    threads = [threading.Thread(target=client, args=(total // args.clients,), daemon=True)
               for _ in range(args.clients)]
    print(f"# tether {args.tether} store {store} clients {args.clients} "
          f"stream {args.stream} leave {args.leave}")
    print(f"{'sessions':>9} {'seconds':>8} {'rss_kib':>9}")
    samples = [(0, 0.0, rss_kib(tether.pid))]
    print(f"{0:>9} {0.0:>8.1f} {samples[0][2]:>9}", flush=True)
    for t in threads:
        t.start()
    next_mark = args.every
    sample_every = max(1, args.soak_seconds // 60) if args.soak_seconds else 0
    next_time = started + sample_every
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            now = time.time()
            if args.soak_seconds:
                if now >= next_time:
                    next_time += sample_every
                    samples.append((done, now - started, rss_kib(tether.pid)))
                    print(f"{done:>9} {now - started:>8.1f} {samples[-1][2]:>9}", flush=True)
                if now - started >= args.soak_seconds:
                    stop.set()
            elif done >= next_mark:
                next_mark += args.every
                samples.append((done, now - started, rss_kib(tether.pid)))
                print(f"{done:>9} {now - started:>8.1f} {samples[-1][2]:>9}", flush=True)
        time.sleep(1)
        samples.append((done, time.time() - started, rss_kib(tether.pid)))
        print(f"{done:>9} {time.time() - started:>8.1f} {samples[-1][2]:>9}  (end)", flush=True)
    finally:
        tether.terminate()
        agent.terminate()
        tether.wait(timeout=30)
    half = samples[len(samples) // 2]
    last = samples[-1]
    if last[0] > half[0]:
        per = (last[2] - half[2]) * 1024 / (last[0] - half[0])
        print(f"# growth over the second half: {per:.1f} bytes per session "
              f"({half[0]} -> {last[0]} sessions, {half[2]} -> {last[2]} KiB); errors {len(errors)}")
    if errors:
        print(f"# first error: {errors[0]}")


if __name__ == "__main__":
    main()
