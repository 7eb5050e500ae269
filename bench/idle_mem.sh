#!/usr/bin/env bash
# bench/idle_mem.sh — memory per idle open stream (BENCHMARKS.md section 4's lane) for one
# or more `tether` binaries, alternated, each cell a fresh agent, Tether and SQLite store:
# the A/B of a change to what a stream holds.
#
#   bench/idle_mem.sh STREAMS ROUNDS TETHER_A [TETHER_B ...]
#
# Needs bench-agent and bench-load in $BENCH_BIN (default: $CARGO_TARGET_DIR/release).
# Ports from $BASE_PORT (default 18000). Environment for Tether passes through (e.g.
# `_RJEM_MALLOC_CONF=...` for jemalloc's options). With SNAPSHOT=1, while the streams are
# held each cell also records /proc/PID/smaps_rollup, the thread count and, when gdb
# is installed, jemalloc's own statistics (`malloc_stats_print`, to Tether's stderr) in
# $OUT/<cell>.*. Prints one line per cell: binary, streams open, RSS before/after, KiB per
# stream.
set -euo pipefail
STREAMS=${1:?streams}; ROUNDS=${2:?rounds}; shift 2
[ $# -ge 1 ] || { echo "usage: $0 STREAMS ROUNDS TETHER..." >&2; exit 2; }
BENCH_BIN=${BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release}
BASE_PORT=${BASE_PORT:-18000}
AGENT_PORT=$((BASE_PORT + 1)); TETHER_PORT=$((BASE_PORT + 2))
OUT=${OUT:-$(mktemp -d /tmp/idle_mem.XXXXXX)}
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_http() { for _ in $(seq 1 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }
stop() { # pid: TERM, then KILL after 10 s (a Tether with runs in flight drains them)
  kill "$1" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true
}

# What a profiler reads of a process, into PREFIX.*: its memory map summary, its thread
# count, and jemalloc's statistics (JSON, to Tether's stderr: the lines from `{` to the
# matching `}`) and, in a build with jemalloc's profiling on and `prof:true`, a heap
# profile (written to `prof_prefix`).
snapshot() { # pid prefix
  cat /proc/$1/smaps_rollup >"$2.smaps_rollup"
  ls /proc/$1/task | wc -l >"$2.threads"
  command -v gdb >/dev/null || return 0
  echo "=== $2" >&2
  gdb -p "$1" -batch -ex 'call (void)_rjem_malloc_stats_print((void*)0, (void*)0, "Jax")' \
    -ex 'call (int)_rjem_mallctl("prof.dump", (void*)0, (void*)0, (void*)0, 0)' \
    >"$2.gdb" 2>&1 || true
}

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), $STREAMS streams, $ROUNDS rounds, out $OUT"
for round in $(seq 1 "$ROUNDS"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1)); cell="r${round}_b$i"
    "$BENCH_BIN/bench-agent" --listen 127.0.0.1:$AGENT_PORT >"$OUT/$cell.agent.log" 2>&1 &
    agent=$!; PIDS+=("$agent")
    wait_http http://127.0.0.1:$AGENT_PORT/healthz
    rm -f "$OUT/store.sqlite"*
    TETHER_LOG=warn "$bin" serve --listen 127.0.0.1:$TETHER_PORT \
      --upstream http://127.0.0.1:$AGENT_PORT --protocol openai-chat \
      --store "$OUT/store.sqlite" --threads 2 >"$OUT/$cell.tether.log" 2>&1 &
    tether=$!; PIDS+=("$tether")
    wait_http http://127.0.0.1:$TETHER_PORT/healthz
    linger=0; [ "${SNAPSHOT:-0}" = 1 ] && { linger=20000; snapshot "$tether" "$OUT/$cell.before"; }
    "$BENCH_BIN/bench-load" idle --addr 127.0.0.1:$TETHER_PORT --streams "$STREAMS" \
      --pids "$tether" --hold-ms 180000 --timeout 120 --linger-ms $linger \
      >"$OUT/$cell.json" 2>"$OUT/$cell.load.err" &
    load=$!
    if [ "${SNAPSHOT:-0}" = 1 ]; then
      for _ in $(seq 1 1500); do grep -q "idle: held" "$OUT/$cell.load.err" 2>/dev/null && break; sleep 0.1; done
      snapshot "$tether" "$OUT/$cell.held"
      sleep 12; cat /proc/$tether/smaps_rollup >"$OUT/$cell.late.smaps_rollup"
    fi
    wait "$load"
    python3 - "$bin" "$OUT/$cell.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[2]))
print(f"{sys.argv[1]}\topen {r['open']}/{r['streams']}\tfailed {r['failed']}\t"
      f"RSS {r['rss_before_kib']/1024:.1f} -> {r['rss_after_kib']/1024:.1f} MiB\t"
      f"{r['bytes_per_stream']/1024:.1f} KiB/stream")
EOF
    stop "$agent"; stop "$tether"
  done
done
