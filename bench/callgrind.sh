#!/usr/bin/env bash
# bench/callgrind.sh — instructions per pass-through request and per SSE run, counted by
# `valgrind --tool=callgrind` on a release `tether` (repeatable on a busy machine, unlike
# time). Tether runs under callgrind with collection off; after a warm-up the counters are
# zeroed, a fixed amount of load is sent, and the counters are dumped:
#
#   bench/callgrind.sh <dir with tether, bench-agent, bench-load> [out dir]
#
# Prints one JSON line per scenario: total instructions (Ir) over the measured load,
# divided by requests (pass-through, tee on and off) or runs (SSE, SQLite). The dumps stay
# in the out dir for `callgrind_annotate`. SCENARIOS (default "pass-tee pass-notee
# sse-chat") picks which run; `start` and `turn` count run starts (see below).
set -euo pipefail
BIN=$(cd "$1" && pwd)
OUTD=${2:-$(mktemp -d /tmp/tether-callgrind.XXXXXX)}
mkdir -p "$OUTD"
P=${BASE_PORT:-19300}
W=$(mktemp -d /tmp/tether-cg.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT

wait_http() { for _ in $(seq 1 600); do curl -sf -o /dev/null "$1" && return 0; sleep 0.2; done; return 1; }

"$BIN/bench-agent" --listen 127.0.0.1:$P >/dev/null 2>&1 &
PIDS+=($!)
wait_http http://127.0.0.1:$P/healthz

# scenario name, tether flags..., then the load: measure <name> <requests|runs> <count> <load args> -- <tether args>
SCENARIOS=${SCENARIOS:-pass-tee pass-notee sse-chat}
measure() {
  local name=$1 unit=$2 count=$3; shift 3
  case " $SCENARIOS " in *" $name "*) ;; *) return 0 ;; esac
  local load=() tether=()
  while [ "$1" != -- ]; do load+=("$1"); shift; done
  shift
  tether=("$@")
  local port=$((P + 1))
  TETHER_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$OUTD/$name.%p" \
    "$BIN/tether" serve --listen 127.0.0.1:$port --upstream http://127.0.0.1:$P --protocol openai-chat \
    --store "$W/$name.sqlite" --threads 2 "${tether[@]}" >"$W/$name.log" 2>&1 &
  local vg=$!
  wait_http http://127.0.0.1:$port/healthz
  # Warm-up: connections, statement caches, the allocator's arenas.
  "$BIN/bench-load" "${load[@]/@ADDR@/127.0.0.1:$port}" >/dev/null 2>&1 || true
  # Commits over the measured load (the writer's transactions): how many exchanges or
  # deltas shared one depends on timing, and moves the Ir of a cell between runs.
  commits() { curl -s "http://127.0.0.1:$port/metrics" | awk '/^tether_writer_batch_size_events_count/{print $2}'; }
  local c0 c1
  c0=$(commits)
  callgrind_control -z $vg >/dev/null
  local out
  out=$("$BIN/bench-load" "${load[@]/@ADDR@/127.0.0.1:$port}")
  sleep 0.5 # the tee's linger and the writer's last commit
  callgrind_control -d "$name" $vg >/dev/null
  c1=$(commits)
  kill $vg; wait $vg 2>/dev/null || true
  local ir
  # The dump `-d` wrote (name.<pid>.1); the file written at exit holds what came after.
  ir=$(awk '/^totals:/{s += $2} END{print s + 0}' "$OUTD/$name".*.1)
  printf '{"scenario":"%s","ir":%s,"%s":%s,"ir_per":%s,"commits":%s,"load":%s}\n' "$name" "$ir" "$unit" "$count" \
    "$(awk -v i="$ir" -v n="$count" 'BEGIN{printf "%.0f", i / n}')" "$(awk -v a="${c0:-0}" -v b="${c1:-0}" 'BEGIN{printf "%d", b - a}')" "$out"
  mv "$OUTD/$name".*.1 "$OUTD/$name.callgrind"; rm -f "$OUTD/$name".[0-9]*
}

# Pass-through: 600 requests at 100 requests/s over 8 connections (each its own exchange).
measure pass-tee requests 600 open --addr @ADDR@ --path /json --rate 100 --seconds 6 --conns 8 --
measure pass-notee requests 600 open --addr @ADDR@ --path /json --rate 100 --seconds 6 --conns 8 -- --tee false
# SSE: 20 chat runs one after another, 20 deltas 5 ms apart.
measure sse-chat runs 20 sse --addr @ADDR@ --surface chat --streams 1 --events 20 --delay-ms 5 --rounds 20 --timeout 120 --
# Run starts (and ends): 50 chat runs of one delta each, one after another, each in a new
# session (`start`), or each a turn of a named session (`turn`: its row, its archived
# mark, its claim and its history are read).
measure start runs 50 sse --addr @ADDR@ --surface chat --streams 1 --events 1 --delay-ms 0 --rounds 50 --timeout 300 --
measure turn runs 50 sse --addr @ADDR@ --surface chat --streams 1 --events 1 --delay-ms 0 --rounds 50 --timeout 300 --session cg --
