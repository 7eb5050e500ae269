#!/usr/bin/env bash
# bench/ab.sh — A/B of two Tether builds on run starts, in one script run: instructions
# per run (callgrind, load-independent) and CPU per run (utime + stime of the tether
# process over a fixed number of runs, native speed), the two builds alternated cell by
# cell so drift in the machine's load hits both alike.
#
#   bench/ab.sh <dir A> <dir B>      # each holds tether, bench-agent, bench-load
#
# Lanes: `start` (chat runs of one delta, each in a new session) and `turn` (each a turn
# of a named session); the CPU lanes also at 100 concurrent streams (`burst`), which is
# where a start's cost turns into time to first event. ROUNDS (default 400) runs per CPU
# cell, REPEATS (default 3) cells per build; SCENARIOS as bench/callgrind.sh (default
# "start turn"); CALLGRIND=0 skips the instruction counts.
set -euo pipefail
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-400}
REPEATS=${REPEATS:-3}
P=${BASE_PORT:-19500}
W=$(mktemp -d /tmp/tether-ab.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
wait_http() { for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done; return 1; }
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
HZ=$(getconf CLK_TCK)

echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${CALLGRIND:-1}" = 1 ]; then
  for side in A B; do
    dir=$A; [ $side = B ] && dir=$B
    SCENARIOS=${SCENARIOS:-start turn} BASE_PORT=$((P + 10)) "$ROOT/bench/callgrind.sh" "$dir" "$W/cg-$side" |
      sed "s/^/{\"build\":\"$side\",\"r\":/; s/\$/}/"
  done
fi

"$A/bench-agent" --listen 127.0.0.1:$P >/dev/null 2>&1 &
PIDS+=($!)
wait_http http://127.0.0.1:$P/healthz
start_tether() { # dir port
  TETHER_LOG=warn "$1/tether" serve --listen 127.0.0.1:$2 --upstream http://127.0.0.1:$P \
    --protocol openai-chat --store "$W/$2.sqlite" --threads 2 >"$W/$2.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  wait_http http://127.0.0.1:$2/healthz
  echo $pid
}
PA=$(start_tether "$A" $((P + 1)))
PB=$(start_tether "$B" $((P + 2)))
lane() { # lane -> bench-load sse args after --addr
  case $1 in
    start) echo "--surface chat --streams 1 --events 1 --delay-ms 0 --rounds $ROUNDS --timeout 300" ;;
    turn) echo "--surface chat --streams 1 --events 1 --delay-ms 0 --rounds $ROUNDS --timeout 300 --session ab$2" ;;
    burst) echo "--surface chat --streams 100 --events 1 --delay-ms 0 --rounds $((ROUNDS / 100)) --timeout 300" ;;
  esac
}
for lane in start turn burst; do
  # Warm-up of both: connections, caches, the allocator's arenas.
  for side in A B; do
    port=$((P + 1)); [ $side = B ] && port=$((P + 2))
    "$A/bench-load" sse --addr 127.0.0.1:$port $(lane $lane w) >/dev/null 2>&1 || true
  done
  for rep in $(seq 1 "$REPEATS"); do
    for side in A B; do
      pid=$PA port=$((P + 1)); [ $side = B ] && pid=$PB port=$((P + 2))
      t0=$(ticks $pid)
      out=$("$A/bench-load" sse --addr 127.0.0.1:$port $(lane $lane $rep))
      t1=$(ticks $pid)
      printf '{"build":"%s","lane":"%s","rep":%s,"load":"%s","cpu_ticks":%s,"clk_tck":%s,"r":%s}\n' \
        $side $lane $rep "$(cut -d' ' -f1 /proc/loadavg)" $((t1 - t0)) $HZ "$out"
    done
  done
done
