#!/usr/bin/env bash
# bench/abuse.sh — memory and liveness under abuse (issue 29): 10,000 slow or idle
# connections (half never send a byte, half trickle a request head a byte at a time) and
# 1,000 clients that subscribe to a run's events and vanish without reading, while /healthz
# is timed on its own connection. Prints the gateway's RSS before, at peak and after, and
# /healthz p50/p99/max meanwhile.
#
#   bench/abuse.sh                        # 10,000 slow/idle + 1,000 subscribe-and-vanish
#   IDLE=2000 VANISH=200 bench/abuse.sh   # smaller
#
# Environment: CARGO_TARGET_DIR (default /root/.cache/tether-target; the release binary is
# used when built, else the debug one), IDLE, VANISH, HOLD_SECONDS (default 20), PORT
# (default 19300). Needs `ulimit -n` above 2 x (IDLE + VANISH) (the client and the gateway
# share the machine).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/root/.cache/tether-target}
IDLE=${IDLE:-10000}
VANISH=${VANISH:-1000}
HOLD_SECONDS=${HOLD_SECONDS:-20}
PORT=${PORT:-19300}
AGENT_PORT=$((PORT + 1))
ulimit -n "$(ulimit -Hn)" || true

BIN=$CARGO_TARGET_DIR/release/tether
[ -x "$BIN" ] || BIN=$CARGO_TARGET_DIR/debug/tether
[ -x "$BIN" ] || { echo "build tether first (cargo build --release -p tether)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/tether-abuse.XXXXXX)
cleanup() {
  [ -n "${TETHER_PID:-}" ] && kill "$TETHER_PID" 2>/dev/null || true
  [ -n "${AGENT_PID:-}" ] && kill "$AGENT_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

python3 "$ROOT/tests/fake_agent.py" --port "$AGENT_PORT" >/dev/null 2>&1 &
AGENT_PID=$!
# Header deadline 30 s: the slow clients stay within it for the whole hold.
cat >"$WORK/tether.toml" <<EOF
[limits]
header_timeout_seconds = 30
EOF
TETHER_SHUTDOWN_GRACE_SECONDS=1 "$BIN" serve --listen "127.0.0.1:$PORT" \
  --upstream "http://127.0.0.1:$AGENT_PORT" --protocol openai-chat \
  --store "$WORK/sessions.sqlite" --conf "$WORK/tether.toml" 2>"$WORK/tether.log" &
TETHER_PID=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break
  sleep 0.1
done

echo "binary: $BIN"
echo "machine: $(nproc) cores, shared with other work while this ran"
python3 - "$PORT" "$TETHER_PID" "$IDLE" "$VANISH" "$HOLD_SECONDS" <<'EOF'
import asyncio, json, multiprocessing, resource, socket, sys, time

port, pid, idle, vanish, hold = (int(a) for a in sys.argv[1:6])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

def rss_kib():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0

def health_probe(stop, out):
    # Its own process, so the abusive clients' event loop does not delay the timing.
    import socket as s
    conn = s.create_connection(("127.0.0.1", port))
    samples = []
    while not stop.is_set():
        t = time.perf_counter()
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = b""
        while not data.endswith(b'{"status":"ok"}'):
            data += conn.recv(4096)
        samples.append((time.perf_counter() - t) * 1000)
        time.sleep(0.02)
    out.put(samples)

async def idle_conn(i, stop, opened):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    opened[0] += 1
    try:
        if i % 2:
            # Slow: a request head, one byte every 2 s.
            for b in b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: yes\r\n":
                if stop.is_set():
                    break
                writer.write(bytes([b]))
                await writer.drain()
                await asyncio.sleep(2)
        else:
            await stop.wait()
    except OSError:
        pass
    writer.close()

async def start_run():
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "fake", "stream": True, "messages": [{"role": "user", "content": "slow:4000:50"}]}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    headers = dict(l.split(": ", 1) for l in head.split("\r\n")[1:] if ": " in l)
    lower = {k.lower(): v for k, v in headers.items()}
    return (reader, writer), lower["x-session-id"], lower["x-invocation-id"]

async def vanish_client(session, invocation, done):
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /agentengine/api/v1/SubscribeRunEvents?SessionId={session}&InvocationId={invocation} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        # Vanish: reset the connection without reading the stream.
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.transport.abort()
        done[0] += 1
    except (OSError, asyncio.IncompleteReadError):
        pass

async def main():
    before = rss_kib()
    stop = asyncio.Event()
    probe_stop, probe_out = multiprocessing.Event(), multiprocessing.Queue()
    probe = multiprocessing.Process(target=health_probe, args=(probe_stop, probe_out))
    probe.start()
    run, session, invocation = await start_run()
    opened = [0]
    t0 = time.time()
    tasks = []
    for i in range(idle):
        tasks.append(asyncio.create_task(idle_conn(i, stop, opened)))
        if i % 500 == 499:
            await asyncio.sleep(0.05)
    vanished = [0]
    for batch in range(0, vanish, 100):
        await asyncio.gather(*(vanish_client(session, invocation, vanished) for _ in range(min(100, vanish - batch))))
    peak = rss_kib()
    while time.time() - t0 < hold:
        await asyncio.sleep(1)
        peak = max(peak, rss_kib())
    held = opened[0]
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    probe_stop.set()
    samples = probe_out.get()
    probe.join()
    run[1].close()
    await asyncio.sleep(2)
    after = rss_kib()
    s = sorted(samples)
    p = lambda q: s[min(len(s) - 1, int(q * len(s)))]
    print(f"slow/idle connections opened: {held} of {idle}; subscribe-and-vanish clients: {vanished[0]} of {vanish}")
    print(f"RSS: before {before/1024:.1f} MiB, peak {peak/1024:.1f} MiB, after {after/1024:.1f} MiB")
    print(f"/healthz meanwhile: {len(s)} requests, p50 {p(0.5):.2f} ms, p99 {p(0.99):.2f} ms, max {s[-1]:.2f} ms")

asyncio.run(main())
EOF
echo "healthz after: $(curl -s -o /dev/null -w '%{http_code} in %{time_total}s' "http://127.0.0.1:$PORT/healthz")"
