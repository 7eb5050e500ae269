#!/usr/bin/env bash
# bench/profile.sh — the evidence behind bench/findings.md: CPU time per request / per SSE
# event (utime+stime from /proc, nginx vs Tether) and flat `perf record -e cpu-clock`
# profiles of Tether under pass-through saturation and 100 SSE streams. Run after
# bench/run.sh (it reuses the binaries it built). Output: bench/last-run/profile/.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/root/.cache/tether-target}
R=$CARGO_TARGET_DIR/release
OUTD=$ROOT/bench/last-run/profile
mkdir -p "$OUTD"
W=$(mktemp -d /tmp/tether-prof.XXXXXX)
P=19200
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

cpu_ticks() { # pids... -> utime+stime clock ticks summed
  local s=0
  for p in "$@"; do s=$((s + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'))); done
  echo $s
}

"$R/bench-agent" --listen 127.0.0.1:$P >/dev/null 2>&1 & PIDS+=($!)
TETHER_LOG=warn "$R/tether" serve --listen 127.0.0.1:$((P + 2)) --upstream http://127.0.0.1:$P \
  --store "$W/s.sqlite" --threads 2 >"$W/t.log" 2>&1 & TP=$!; PIDS+=($TP)
mkdir -p "$W/ng/tmp"
cat >"$W/ng/nginx.conf" <<EOF
worker_processes 2; pid $W/ng/nginx.pid; error_log $W/ng/error.log warn;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  client_body_temp_path $W/ng/tmp/b; proxy_temp_path $W/ng/tmp/p; fastcgi_temp_path $W/ng/tmp/f;
  uwsgi_temp_path $W/ng/tmp/u; scgi_temp_path $W/ng/tmp/s;
  upstream agent { server 127.0.0.1:$P; keepalive 512; }
  server { listen 127.0.0.1:$((P + 1));
    location / { proxy_pass http://agent; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; } } }
EOF
/usr/sbin/nginx -p "$W/ng" -c "$W/ng/nginx.conf" -e "$W/ng/error.log" -g 'daemon off;' & NP=$!; PIDS+=($NP)
sleep 1
NPIDS=($NP $(pgrep -P $NP))
HZ=$(getconf CLK_TCK)

{
  echo "# CPU per request (pass-through GET /json, closed loop 64 conns, 3 s)"
  for t in nginx tether; do
    if [ $t = nginx ]; then port=$((P + 1)); pids=("${NPIDS[@]}"); else port=$((P + 2)); pids=($TP); fi
    a=$(cpu_ticks "${pids[@]}")
    out=$("$R/bench-load" sat --addr 127.0.0.1:$port --seconds 3)
    b=$(cpu_ticks "${pids[@]}")
    n=$(echo "$out" | jq .requests)
    echo "$t: $n requests, $((b - a)) ticks -> $(echo "scale=1; ($b - $a) * 1000000 / $HZ / $n" | bc) µs CPU per request"
  done
  echo
  echo "# CPU per SSE event (100 streams x 200 deltas, 5 ms apart, /v1/chat/completions)"
  for t in nginx tether; do
    if [ $t = nginx ]; then port=$((P + 1)); pids=("${NPIDS[@]}"); else port=$((P + 2)); pids=($TP); fi
    a=$(cpu_ticks "${pids[@]}")
    out=$("$R/bench-load" sse --addr 127.0.0.1:$port --streams 100 --events 200 --delay-ms 5)
    b=$(cpu_ticks "${pids[@]}")
    n=$(echo "$out" | jq .samples)
    echo "$t: $n deltas, $((b - a)) ticks -> $(echo "scale=1; ($b - $a) * 1000000 / $HZ / $n" | bc) µs CPU per delta; $(echo "$out" | jq -c '{lat_p50_us,lat_p99_us,ttfe_p50_us}')"
  done
  echo
  echo "# Threads of the tether process (name: CPU ticks) after the runs above"
  for t in /proc/$TP/task/*; do printf '%s\t%s\n' "$(cat "$t/comm")" "$(sed 's/^.*) //' "$t/stat" | awk '{print $12 + $13}')"; done | awk -F'\t' '{a[$1]+=$2} END {for (k in a) print k": "a[k]}' | sort -t: -k2 -nr
} | tee "$OUTD/cpu.txt" || true

if perf record -e cpu-clock -o "$W/probe.data" -- true >/dev/null 2>&1; then
  perf record -e cpu-clock -F 2000 -g -o "$W/pass.data" -p $TP -- sleep 3 >/dev/null 2>&1 & PERF=$!
  "$R/bench-load" sat --addr 127.0.0.1:$((P + 2)) --seconds 3 >/dev/null; wait $PERF
  perf report -i "$W/pass.data" --no-children --sort comm --stdio -g none 2>/dev/null | grep '%' >"$OUTD/perf-pass.txt"
  perf report -i "$W/pass.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep '%' | head -40 >>"$OUTD/perf-pass.txt" || true
  perf record -e cpu-clock -F 2000 -g -o "$W/sse.data" -p $TP -- sleep 3 >/dev/null 2>&1 & PERF=$!
  "$R/bench-load" sse --addr 127.0.0.1:$((P + 2)) --streams 100 --events 60 --delay-ms 50 >/dev/null; wait $PERF
  perf report -i "$W/sse.data" --no-children --sort comm --stdio -g none 2>/dev/null | grep '%' >"$OUTD/perf-sse.txt"
  perf report -i "$W/sse.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep '%' | head -40 >>"$OUTD/perf-sse.txt" || true
  echo "perf profiles: $OUTD/perf-pass.txt, $OUTD/perf-sse.txt"
else
  echo "perf record unavailable here"
fi
