#!/usr/bin/env bash
# bench/run.sh — one command for issue 7: builds the release binaries, starts the fast fake
# agent, nginx, and Tether (SQLite, and PostgreSQL for the SSE/log/replay scenarios), runs
# every scenario against direct / nginx / Tether in the same run, and writes BENCHMARKS.md.
#
#   bench/run.sh                 # full run (~8-10 min on 2 cores)
#   RUNS=5 bench/run.sh          # more repetitions per cell (medians are taken over them)
#   QUICK=1 bench/run.sh         # shorter smoke run (fewer/shorter cells, 2k idle streams)
#
# Needs nginx at /usr/sbin/nginx (Debian's nginx-light) and PostgreSQL.
# The A2A-over-gRPC rows (section 6) need a Python with a2a-sdk and grpcio: TETHER_VENV
# (default .venv, made from tests/interop/requirements.txt when missing, as tests/run does).
#
# Environment: CARGO_TARGET_DIR (default /root/.cache/tether-target), PG_ADMIN_URL
# (default postgres://postgres@127.0.0.1:5432/postgres; the database tether_bench is
# dropped and recreated), IDLE_STREAMS (default 9000: see BENCHMARKS.md for why not 10k),
# OUT (default BENCHMARKS.md at the repo root), BASE_PORT (default 19100), PEERS=0 (no
# peers), AGENTGATEWAY_BIN and LITELLM_VENV (see bench/peers.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/root/.cache/tether-target}
RUNS=${RUNS:-3}
QUICK=${QUICK:-0}
IDLE_STREAMS=${IDLE_STREAMS:-9000}
PG_ADMIN_URL=${PG_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
PG_URL=${PG_ADMIN_URL%/*}/tether_bench
OUT=${OUT:-$ROOT/BENCHMARKS.md}
BASE_PORT=${BASE_PORT:-19100}
AGENT_PORT=$BASE_PORT NGINX_PORT=$((BASE_PORT + 1)) TS_PORT=$((BASE_PORT + 2)) TP_PORT=$((BASE_PORT + 3))
TA_PORT=$((BASE_PORT + 4))
PB_PORT=$((BASE_PORT + 5)) TN_PORT=$((BASE_PORT + 6))
GA_PORT=$((BASE_PORT + 7)) GG_PORT=$((BASE_PORT + 8)) TG_PORT=$((BASE_PORT + 9))
OPEN_SECONDS=5 SAT_SECONDS=3 SSE_ROUNDS1=3 GRPC_SECONDS=5
if [ "$QUICK" = 1 ]; then RUNS=1 OPEN_SECONDS=2 SAT_SECONDS=2 SSE_ROUNDS1=1 IDLE_STREAMS=2000 GRPC_SECONDS=2; fi

WORK=$(mktemp -d /tmp/tether-bench.XXXXXX)
BIN=$WORK/bin
LAST=$ROOT/bench/last-run
mkdir -p "$LAST"
RESULTS=$LAST/results.jsonl
META=$LAST/meta.json
mkdir -p "$BIN"
: > "$RESULTS"
rm -f "$LAST/peers.jsonl"
PIDS=()
log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
# nginx is a baseline of every lane; a new machine lacks it.
[ -x /usr/sbin/nginx ] || { log "needs /usr/sbin/nginx: apt-get install nginx-light"; exit 1; }

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/nginx/nginx.pid" ] && kill "$(cat "$WORK/nginx/nginx.pid")" 2>/dev/null || true
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# ---------------------------------------------------------------- build
# The working tree may be mid-edit by others; if the gateway does not build there, the
# last commit is exported and measured instead, and the report says which.
build_from() { # dir package... -> 0 on success
  local dir=$1; shift
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  (cd "$dir" && timeout 900 cargo build --release "${args[@]}" >>"$WORK/build.log" 2>&1)
}
snapshot() {
  if [ ! -d "$WORK/src" ]; then
    mkdir -p "$WORK/src"
    git -C "$ROOT" archive HEAD | tar -x -C "$WORK/src"
  fi
}
log "building tether-bench"
build_from "$ROOT" tether-bench
cp "$CARGO_TARGET_DIR/release/bench-agent" "$CARGO_TARGET_DIR/release/bench-load" \
  "$CARGO_TARGET_DIR/release/bench-bare-proxy" "$CARGO_TARGET_DIR/release/bench-history" "$BIN/"
log "building tether (release)"
if build_from "$ROOT" tether; then
  TETHER_SOURCE="working tree at $(git -C "$ROOT" rev-parse --short HEAD) (uncommitted changes: $(git -C "$ROOT" status --porcelain | grep -vc ' bench/\|BENCHMARKS.md' || true) paths)"
else
  log "working tree does not build; measuring HEAD instead"
  snapshot
  build_from "$WORK/src" tether
  TETHER_SOURCE="HEAD $(git -C "$ROOT" rev-parse --short HEAD) (the working tree did not compile: other work in progress)"
fi
cp "$CARGO_TARGET_DIR/release/tether" "$BIN/"
log "building session-log append_throughput example"
WRITER_SRC=$ROOT
if ! (cd "$ROOT" && timeout 900 cargo build --release -p session-log --example append_throughput >>"$WORK/build.log" 2>&1); then
  snapshot
  WRITER_SRC=$WORK/src
  (cd "$WORK/src" && timeout 900 cargo build --release -p session-log --example append_throughput >>"$WORK/build.log" 2>&1)
fi
cp "$CARGO_TARGET_DIR/release/examples/append_throughput" "$BIN/"

# ---------------------------------------------------------------- services
wait_http() { # url
  for _ in $(seq 1 100); do curl -sf -o /dev/null "$1" && return 0; sleep 0.1; done
  log "not ready: $1"; return 1
}
start_agent() {
  "$BIN/bench-agent" --listen 127.0.0.1:$AGENT_PORT >"$WORK/agent.out" 2>&1 &
  AGENT_PID=$!; PIDS+=("$AGENT_PID")
  wait_http http://127.0.0.1:$AGENT_PORT/healthz
}
restart_agent() { kill "$AGENT_PID" 2>/dev/null || true; wait "$AGENT_PID" 2>/dev/null || true; start_agent; }

start_nginx() {
  local d=$WORK/nginx
  mkdir -p "$d/tmp"
  cat >"$d/nginx.conf" <<EOF
# Generated by bench/run.sh: a plain reverse proxy, loopback only.
worker_processes 2;
worker_rlimit_nofile 20000;
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 20000; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $d/tmp/body;
  proxy_temp_path $d/tmp/proxy;
  fastcgi_temp_path $d/tmp/fastcgi;
  uwsgi_temp_path $d/tmp/uwsgi;
  scgi_temp_path $d/tmp/scgi;
  upstream agent { server 127.0.0.1:$AGENT_PORT; keepalive 512; }
  server {
    listen 127.0.0.1:$NGINX_PORT backlog=4096;
    location / {
      proxy_pass http://agent;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
EOF
  /usr/sbin/nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" -g 'daemon off;' &
  NGINX_PID=$!; PIDS+=("$NGINX_PID")
  wait_http http://127.0.0.1:$NGINX_PORT/healthz
}
nginx_pids() { echo "$NGINX_PID$(pgrep -P "$NGINX_PID" | sed 's/^/,/' | tr -d '\n')"; }

start_tether() { # name port store [tether serve flags...]
  TETHER_LOG=warn "$BIN/tether" serve --listen 127.0.0.1:$2 --upstream http://127.0.0.1:$AGENT_PORT \
    --protocol openai-chat --store "$3" --threads 2 "${@:4}" >"$WORK/$1.log" 2>&1 &
  local pid=$!; PIDS+=("$pid")
  eval "${1}_PID=$pid"
  wait_http http://127.0.0.1:$2/healthz
}

PG_OK=0
if psql "$PG_ADMIN_URL" -qc 'DROP DATABASE IF EXISTS tether_bench' >/dev/null 2>&1 \
   && psql "$PG_ADMIN_URL" -qc 'CREATE DATABASE tether_bench' >/dev/null 2>&1; then PG_OK=1; fi

# PostgreSQL's own floor, so a slower database shows beside the results: one client's
# single-row commit and `SELECT 1` (pgbench, 3 s each), in ms.
pg_floor() { # pgbench script -> average latency in ms, or null
  local f=$WORK/pgbench.sql
  printf '%s\n' "$1" >"$f"
  pgbench -n -c 1 -T 3 -f "$f" "$PG_URL" 2>/dev/null | awk '/latency average/{print $4; found=1} END{if (!found) print "null"}'
}
PG_COMMIT_MS=null; PG_SELECT_MS=null
if [ $PG_OK = 1 ] && command -v pgbench >/dev/null; then
  psql "$PG_URL" -qc 'CREATE TABLE bench_floor (x int)' >/dev/null 2>&1
  PG_COMMIT_MS=$(pg_floor 'INSERT INTO bench_floor VALUES (1);')
  PG_SELECT_MS=$(pg_floor 'SELECT 1;')
  psql "$PG_URL" -qc 'DROP TABLE bench_floor' >/dev/null 2>&1
fi

log "starting agent, nginx, tether (sqlite$([ $PG_OK = 1 ] && echo ', postgres'))"
start_agent
start_nginx
start_tether tsqlite $TS_PORT "$WORK/sessions.sqlite"
[ $PG_OK = 1 ] && start_tether tpg $TP_PORT "$PG_URL"
# The same Tether with every policy on: an API key (checked per request) and rate limits
# high enough never to refuse, so the rows show what checking costs.
BENCH_KEY=bench-key-0123456789abcdef
cat >"$WORK/auth.toml" <<EOF
[[auth.api_keys]]
id = "bench"
account_id = "bench"
sha256 = "$(printf %s "$BENCH_KEY" | sha256sum | cut -d' ' -f1)"

[rate_limits]
requests_per_second = 1000000.0
burst = 1000000
per_credential_requests_per_second = 1000000.0
per_credential_burst = 1000000
EOF
start_tether tauth $TA_PORT "$WORK/auth.sqlite" --conf "$WORK/auth.toml"
AUTH=(--header "Authorization: Bearer $BENCH_KEY")
# The floor under the pass-through rows: Pingora with no hooks of its own, and Tether
# with its tee off (saturation only).
"$BIN/bench-bare-proxy" --listen 127.0.0.1:$PB_PORT --upstream 127.0.0.1:$AGENT_PORT --threads 2 \
  >"$WORK/pingora.log" 2>&1 &
PINGORA_PID=$!; PIDS+=("$PINGORA_PID")
wait_http http://127.0.0.1:$PB_PORT/healthz
start_tether tnotee $TN_PORT "$WORK/notee.sqlite" --tee false

declare -A ADDR=([direct]=127.0.0.1:$AGENT_PORT [nginx]=127.0.0.1:$NGINX_PORT [tether]=127.0.0.1:$TS_PORT [tether-pg]=127.0.0.1:$TP_PORT [tether-auth]=127.0.0.1:$TA_PORT [pingora]=127.0.0.1:$PB_PORT [tether-notee]=127.0.0.1:$TN_PORT)
# The processes whose CPU a pass-through request costs (for direct: the agent's own).
proxy_pids() { # target
  case $1 in
    direct) echo "$AGENT_PID" ;;
    nginx) nginx_pids ;;
    pingora) echo "$PINGORA_PID" ;;
    tether) echo "$tsqlite_PID" ;;
    tether-notee) echo "$tnotee_PID" ;;
    tether-auth) echo "$tauth_PID" ;;
    tether-pg) echo "$tpg_PID" ;;
    grpc-direct) echo "$GAGENT_PID" ;;
    grpc-tether) echo "$tgrpc_PID" ;;
  esac
}
cpu_ticks() { # pid,pid,... -> user+system clock ticks so far
  local sum=0 p
  for p in ${1//,/ }; do sum=$((sum + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$sum"
}
CLK_TCK=$(getconf CLK_TCK)
# `load` against a target, with the CPU (user + system ticks) its processes used meanwhile:
# steadier than latency or requests/s on a shared machine.
load_cpu() { # target bench-load-args...
  local pids ticks out
  pids=$(proxy_pids "$1"); shift
  ticks=$(cpu_ticks "$pids")
  out=$(load "$@")
  ticks=$(( $(cpu_ticks "$pids") - ticks ))
  echo "${out%\}},\"cpu_ticks\":$ticks,\"clk_tck\":$CLK_TCK}"
}
SSE_TARGETS=(direct nginx tether); [ $PG_OK = 1 ] && SSE_TARGETS+=(tether-pg)

record() { # scenario target run json
  printf '{"scenario":"%s","target":"%s","run":%s,"r":%s}\n' "$1" "$2" "$3" "$4" >>"$RESULTS"
}
CMDS=$LAST/commands.txt
: >"$CMDS"
cmdlog() { grep -qxF "$*" "$CMDS" || echo "$*" >>"$CMDS"; }
load() { # never leaves a cell without a JSON object
  local out
  out=$("$BIN/bench-load" "$@" 2>>"$WORK/load.err") || true
  [ -n "$out" ] || out='{"error":"bench-load failed"}'
  echo "$out"
}

# Machine and noise.
{
  echo "{"
  echo "\"nproc\": $(nproc),"
  echo "\"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\","
  echo "\"mem\": \"$(free -h | awk '/Mem:/{print $2}')\","
  echo "\"kernel\": \"$(uname -r)\","
  echo "\"nginx\": \"$(/usr/sbin/nginx -v 2>&1 | cut -d/ -f2)\","
  echo "\"rustc\": \"$(rustc --version)\","
  echo "\"tether_source\": \"$TETHER_SOURCE\","
  echo "\"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "\"other_rustc_before\": $(pgrep -c rustc || true),"
  echo "\"pg\": $PG_OK, \"pg_commit_ms\": $PG_COMMIT_MS, \"pg_select_ms\": $PG_SELECT_MS,"
  echo "\"runs\": $RUNS, \"quick\": $QUICK, \"idle_streams\": $IDLE_STREAMS,"
  echo "\"nofile\": \"$(ulimit -n)/$(ulimit -Hn)\","
  echo "\"started\": \"$(date -u +%FT%TZ)\""
  echo "}"
} >"$META"
# CPU time the hypervisor gave to other guests (the `steal` column of /proc/stat), and
# all CPU time, both in clock ticks since boot: over the run they say how much of it
# this machine's neighbours took.
cpu_steal_total() { awk '/^cpu /{t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t}' /proc/stat; }
read -r STEAL0 TOTAL0 < <(cpu_steal_total)

# ---------------------------------------------------------------- 1. pass-through
log "1. pass-through: saturation and fixed-rate latency"
for run in $(seq 1 "$RUNS"); do
  for t in direct nginx pingora tether-notee tether tether-auth; do
    f=(); k=; [ "$t" = tether-auth ] && f=("${AUTH[@]}") && k=" --header 'Authorization: Bearer <key>'"
    cmdlog "bench-load sat --addr ${ADDR[$t]} --path /json --conns 64 --seconds $SAT_SECONDS$k"
    record pass-sat $t $run "$(load_cpu $t sat --addr ${ADDR[$t]} --path /json --conns 64 --seconds $SAT_SECONDS "${f[@]}")"
  done
  for rate in 1000 2000; do
    for t in direct nginx pingora tether-notee tether tether-auth; do
      f=(); k=; [ "$t" = tether-auth ] && f=("${AUTH[@]}") && k=" --header 'Authorization: Bearer <key>'"
      cmdlog "bench-load open --addr ${ADDR[$t]} --path /json --rate $rate --seconds $OPEN_SECONDS --conns 64$k"
      record pass-open-$rate $t $run "$(load_cpu $t open --addr ${ADDR[$t]} --path /json --rate $rate --seconds $OPEN_SECONDS --conns 64 "${f[@]}")"
    done
  done
done

# ---------------------------------------------------------------- 2. SSE runs
log "2. SSE runs (20 deltas, 50 ms apart) at 1, 100, 1000 streams"
for surface in chat responses; do
  for streams in 1 100 1000; do
    rounds=1; [ "$streams" = 1 ] && rounds=$SSE_ROUNDS1
    for run in $(seq 1 "$RUNS"); do
      for t in "${SSE_TARGETS[@]}"; do
        cmdlog "bench-load sse --addr ${ADDR[$t]} --surface $surface --streams $streams --events 20 --delay-ms 50 --rounds $rounds --timeout 60"
        record sse-$surface-$streams $t $run "$(load_cpu $t sse --addr ${ADDR[$t]} --surface $surface --streams $streams --events 20 --delay-ms 50 --rounds $rounds --timeout 60)"
      done
    done
  done
done

# ---------------------------------------------------------------- 5. replay
log "5. replay of a finished 10,000-event run"
for t in tether tether-pg; do
  [ "$t" = tether-pg ] && [ $PG_OK != 1 ] && continue
  cmdlog "bench-load replay --addr ${ADDR[$t]} --events 10000 --repeats 5"
  record replay $t 1 "$(load replay --addr ${ADDR[$t]} --events 10000 --repeats 5 --timeout 120)"
done

# A store benchmark binary (name, then its arguments): against SQLite, and PostgreSQL too
# when it is up; its report goes to $LAST/<file>.
store_bench() { # file binary args...
  local out=$LAST/$1 name=$2; shift
  if [ $PG_OK = 1 ]; then
    TEST_DATABASE_URL=$PG_URL timeout 300 "$BIN/$@" >"$out" 2>&1 || echo "$name failed: $?" >>"$out"
  else
    timeout 300 "$BIN/$@" >"$out" 2>&1 || echo "$name failed: $?" >>"$out"
  fi
}

# ---------------------------------------------------------------- 3. writer
log "3. session log writer (append_throughput example)"
WRITER_EVENTS=100000; [ "$QUICK" = 1 ] && WRITER_EVENTS=20000
cmdlog "TEST_DATABASE_URL=$PG_URL cargo run --release -p session-log --example append_throughput $WRITER_EVENTS"
store_bench writer.txt append_throughput $WRITER_EVENTS

# ---------------------------------------------------------------- 6. A2A over gRPC
# The a2a-sdk agent of the interop tests, serving gRPC, with the fast fake agent as its LLM
# (each message: 5 deltas at once); Tether in front calls it over gRPC. The same load goes
# straight to the agent and through Tether, alternated run by run. CPU per message: the
# agent's process for direct, Tether's own for tether (the agent's work is the same).
VENV=${TETHER_VENV:-$ROOT/.venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet --disable-pip-version-check \
    -r "$ROOT/tests/interop/requirements.txt" >>"$WORK/build.log" 2>&1 || true
fi
if "$VENV/bin/python" -c 'import a2a, grpc' 2>/dev/null; then
  log "6. A2A over gRPC: unary and streaming SendMessage, straight to the agent and through Tether"
  "$VENV/bin/python" "$ROOT/tests/agents/a2a_agent.py" --port $GA_PORT --grpc-port $GG_PORT \
    --llm http://127.0.0.1:$AGENT_PORT >"$WORK/a2a-agent.out" 2>"$WORK/a2a-agent.log" &
  GAGENT_PID=$!; PIDS+=("$GAGENT_PID")
  for _ in $(seq 1 300); do grep -q READY "$WORK/a2a-agent.out" && break; sleep 0.1; done
  TETHER_LOG=warn "$BIN/tether" serve --listen 127.0.0.1:$TG_PORT --upstream http://127.0.0.1:$GA_PORT \
    --protocol a2a --a2a-upstream-transport grpc --store "$WORK/grpc.sqlite" --threads 2 >"$WORK/tgrpc.log" 2>&1 &
  tgrpc_PID=$!; PIDS+=("$tgrpc_PID")
  wait_http http://127.0.0.1:$TG_PORT/healthz
  ADDR[grpc-direct]=127.0.0.1:$GG_PORT ADDR[grpc-tether]=127.0.0.1:$TG_PORT
  for run in $(seq 1 "$RUNS"); do
    for mode in unary stream; do
      for t in grpc-direct grpc-tether; do
        cmdlog "python bench/grpc_load.py --target ${ADDR[$t]} --mode $mode --conns 16 --seconds $GRPC_SECONDS"
        pids=$(proxy_pids $t); ticks=$(cpu_ticks "$pids")
        out=$("$VENV/bin/python" "$ROOT/bench/grpc_load.py" --target ${ADDR[$t]} --mode $mode --conns 16 \
          --seconds $GRPC_SECONDS 2>>"$WORK/load.err") || out='{"error":"grpc_load failed"}'
        ticks=$(( $(cpu_ticks "$pids") - ticks ))
        record grpc-$mode $t $run "${out%\}},\"cpu_ticks\":$ticks,\"clk_tck\":$CLK_TCK}"
      done
    done
  done
else
  log "6. A2A over gRPC skipped: no a2a-sdk/grpcio in $VENV"
fi

# ---------------------------------------------------------------- 7. session history
log "7. session history: forks and projections (bench-history)"
HISTORY_REPEATS=50; [ "$QUICK" = 1 ] && HISTORY_REPEATS=10
cmdlog "TEST_DATABASE_URL=$PG_URL bench-history $HISTORY_REPEATS"
store_bench history.txt bench-history $HISTORY_REPEATS

# ---------------------------------------------------------------- 8. peers
# LiteLLM's proxy and agentgateway on the same lanes as direct and Tether (bench/peers.sh;
# each row says "skipped" and why when its peer is not installed). PEERS=0 leaves them out.
if [ "${PEERS:-1}" = 1 ]; then
  log "8. peers: LiteLLM's proxy, agentgateway (AGENTGATEWAY_BIN=${AGENTGATEWAY_BIN:-unset})"
  QUICK=$QUICK "$ROOT/bench/peers.sh" "$BIN" "$LAST" || log "peers failed: $?"
fi

# ---------------------------------------------------------------- 4. idle streams (last:
# the runs stay owned by Tether after the client leaves, so each target gets a fresh agent)
log "4. idle streams: $IDLE_STREAMS held open"
for t in direct nginx tether; do
  restart_agent
  case $t in
    direct) pids=$AGENT_PID ;;
    nginx) pids=$(nginx_pids) ;;
    tether)
      # A fresh process and store: one that served the lanes above keeps its grown heap,
      # which new streams would fill without a byte more of RSS (an earlier run read
      # 0.7 KiB per stream that way).
      kill "$tsqlite_PID" 2>/dev/null || true; wait "$tsqlite_PID" 2>/dev/null || true
      start_tether tsqlite $TS_PORT "$WORK/idle.sqlite"
      pids=$tsqlite_PID ;;
  esac
  cmdlog "bench-load idle --addr ${ADDR[$t]} --streams $IDLE_STREAMS --pids <pid(s) of $t> --hold-ms 120000 --timeout 90"
  record idle $t 1 "$(load idle --addr ${ADDR[$t]} --streams $IDLE_STREAMS --pids "$pids" --hold-ms 120000 --timeout 90)"
done

read -r STEAL1 TOTAL1 < <(cpu_steal_total)
STEAL_PCT=$(awk -v s=$((STEAL1 - STEAL0)) -v t=$((TOTAL1 - TOTAL0)) 'BEGIN { printf "%.1f", t ? 100 * s / t : 0 }')
sed -i "s/\"started\"/\"load_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"other_rustc_after\": $(pgrep -c rustc || true), \"steal_pct\": $STEAL_PCT, \"started\"/" "$META"
python3 "$ROOT/bench/report.py" "$LAST" "$OUT"
log "wrote $OUT (raw results in bench/last-run/)"
