#!/usr/bin/env bash
# bench/peers.sh — Tether beside the gateways people pick instead of it, on the same lanes
# and in front of the same fake agent: LiteLLM's proxy (PyPI, pinned below, in its own venv)
# and agentgateway (built outside this repository: AGENTGATEWAY_BIN names the binary).
# A peer that is not there gets rows that say "skipped" and why.
#
#   bench/peers.sh <dir with tether, bench-agent, bench-load> [out dir]
#
# Every target gets the same lanes (bench-load; latencies from the intended send time):
#   chat-open-R  non-streaming chat completions at R requests/s (open loop): p50/p99
#   chat-sat     non-streaming chat completions, closed loop, 32 connections: requests/s
#   sse-N        N concurrent streams of 20 deltas 50 ms apart: TTFE and delivery
#   idle         IDLE streams held open after their first delta: RSS per stream
# and the CPU time (utime + stime) of the target's processes over each cell.
# Results: one JSON line per cell in <out dir>/peers.jsonl (bench/report.py renders them).
#
# Environment: LITELLM_VENV (default /root/.cache/litellm-venv; made with
# `pip install 'litellm[proxy]==1.106.12'` when missing and PEERS_INSTALL=1),
# AGENTGATEWAY_BIN, PEER_PORT (default 19400), IDLE (default 1000), QUICK=1 (shorter).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$1" && pwd)
OUTD=${2:-$ROOT/bench/last-run}
mkdir -p "$OUTD"
OUT=$OUTD/peers.jsonl
: >"$OUT"
LITELLM_VERSION=1.106.12
LITELLM_VENV=${LITELLM_VENV:-/root/.cache/litellm-venv}
P=${PEER_PORT:-19400}
IDLE=${IDLE:-1000}
QUICK=${QUICK:-0}
OPEN_SECONDS=5 SAT_SECONDS=3 ROUNDS1=5
[ "$QUICK" = 1 ] && OPEN_SECONDS=2 SAT_SECONDS=2 ROUNDS1=2
# LiteLLM in its own venv, pinned (1.107.0 was the compromised release; 1.108+ need a
# `litellm-proxy` package the registry here lacks). Made only when asked: PEERS_INSTALL=1.
if [ ! -x "$LITELLM_VENV/bin/litellm" ] && [ "${PEERS_INSTALL:-0}" = 1 ]; then
  printf '[peers] installing litellm[proxy]==%s into %s\n' "$LITELLM_VERSION" "$LITELLM_VENV" >&2
  python3 -m venv "$LITELLM_VENV"
  "$LITELLM_VENV/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION" >&2
fi
W=$(mktemp -d /tmp/tether-peers.XXXXXX)
PIDS=()
log() { printf '[peers %s] %s\n' "$(date +%T)" "$*" >&2; }
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
wait_http() { for _ in $(seq 1 300); do curl -sf -o /dev/null "$1" && return 0; sleep 0.2; done; return 1; }
# The pid and its descendants, comma-separated (LiteLLM's uvicorn, nginx's workers).
tree() {
  local all=$1 p
  for p in $(pgrep -P "$1" || true); do all="$all,$(tree "$p")"; done
  echo "$all"
}
ticks() { local s=0 p; for p in ${1//,/ }; do [ -r /proc/$p/stat ] && s=$((s + $(sed 's/^.*) //' /proc/$p/stat | awk '{print $12 + $13}'))); done; echo $s; }
HZ=$(getconf CLK_TCK)
record() { # target scenario json [skipped reason]
  printf '{"target":"%s","scenario":"%s","load_before":"%s","r":%s}\n' "$1" "$2" "$LOADAVG" "$3" >>"$OUT"
}

AGENT=127.0.0.1:$P
start_agent() {
  "$BIN/bench-agent" --listen $AGENT >/dev/null 2>&1 &
  AGENT_PID=$!; PIDS+=($AGENT_PID)
  wait_http http://$AGENT/healthz
}
start_agent

# Each target: name, address, and how to start it (sets TPID); "skip:<why>" if it cannot run.
start_target() { # name port
  local name=$1 port=$2
  case $name in
    direct) TPID=$AGENT_PID; TADDR=$AGENT; return 0 ;;
    tether)
      TETHER_LOG=warn "$BIN/tether" serve --listen 127.0.0.1:$port --upstream http://$AGENT \
        --protocol openai-chat --store "$W/tether.sqlite" --threads 2 >"$W/tether.log" 2>&1 &
      TPID=$! ;;
    litellm)
      [ -x "$LITELLM_VENV/bin/litellm" ] || { SKIP="LiteLLM $LITELLM_VERSION is not installed in $LITELLM_VENV"; return 1; }
      cat >"$W/litellm.yaml" <<EOF
model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake
      api_base: http://$AGENT/v1
      api_key: none
litellm_settings:
  turn_off_message_logging: true
  telemetry: false
general_settings:
  disable_spend_logs: true
  # No master key: loopback only, and the lanes measure the proxy path, not key checks.
  dangerously_permit_weak_or_unset_master_key: true
EOF
      # The cost map it ships, not one fetched at start (this machine reaches no host).
      LITELLM_LOCAL_MODEL_COST_MAP=True LITELLM_LOG=ERROR "$LITELLM_VENV/bin/litellm" --config "$W/litellm.yaml" --host 127.0.0.1 --port $port \
        --num_workers 1 >"$W/litellm.log" 2>&1 &
      TPID=$! ;;
    agentgateway)
      [ -n "${AGENTGATEWAY_BIN:-}" ] && [ -x "$AGENTGATEWAY_BIN" ] || { SKIP="AGENTGATEWAY_BIN is not set to a built agentgateway"; return 1; }
      cat >"$W/agentgateway.yaml" <<EOF
config:
  adminAddr: 127.0.0.1:$((port + 50))
  readinessAddr: 127.0.0.1:$((port + 51))
  statsAddr: 127.0.0.1:$((port + 52))
llm:
  port: $port
  models:
  - name: '*'
    provider: openAI
    params:
      baseUrl: http://$AGENT/v1
      apiKey: none
EOF
      "$AGENTGATEWAY_BIN" -f "$W/agentgateway.yaml" >"$W/agentgateway.log" 2>&1 &
      TPID=$! ;;
  esac
  PIDS+=($TPID)
  TADDR=127.0.0.1:$port
  # Every target answers the chat lane; wait for it (LiteLLM took ~60 s to start here).
  for _ in $(seq 1 900); do
    curl -sf -o /dev/null -H 'Content-Type: application/json' \
      -d '{"model":"fake","messages":[{"role":"user","content":"bench:1:0"}]}' \
      "http://$TADDR/v1/chat/completions" && return 0
    kill -0 $TPID 2>/dev/null || break
    sleep 0.2
  done
  SKIP="$name did not answer a chat completion (see its log)"
  return 1
}

cell() { # target scenario bench-load args...
  local target=$1 scenario=$2; shift 2
  local pids t0 out
  pids=$(tree "$TPID")
  t0=$(ticks "$pids")
  out=$("$BIN/bench-load" "$@" 2>>"$W/load.err") || out='{"error":"bench-load failed"}'
  [ -n "$out" ] || out='{"error":"bench-load failed"}'
  record "$target" "$scenario" "${out%\}},\"cpu_ticks\":$(( $(ticks "$pids") - t0 )),\"clk_tck\":$HZ,\"pids\":\"$pids\"}"
}

TARGETS=${PEER_TARGETS:-direct tether litellm agentgateway}
i=0
for target in $TARGETS; do
  i=$((i + 1))
  LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
  SKIP=
  if ! start_target "$target" $((P + i)); then
    log "$target skipped: $SKIP"
    record "$target" skipped "{\"skipped\":\"$SKIP\"}"
    continue
  fi
  log "$target at $TADDR (load $LOADAVG)"
  for rate in 50 200; do
    cell "$target" chat-open-$rate open --addr $TADDR --path /v1/chat/completions --rate $rate --seconds $OPEN_SECONDS --conns 32
  done
  cell "$target" chat-sat sat --addr $TADDR --path /v1/chat/completions --conns 32 --seconds $SAT_SECONDS
  cell "$target" sse-1 sse --addr $TADDR --surface chat --streams 1 --events 20 --delay-ms 50 --rounds $ROUNDS1 --timeout 60
  cell "$target" sse-100 sse --addr $TADDR --surface chat --streams 100 --events 20 --delay-ms 50 --timeout 60
  cell "$target" sse-1000 sse --addr $TADDR --surface chat --streams 1000 --events 20 --delay-ms 50 --timeout 90
  # Idle streams on a fresh process: one that served the lanes above keeps its grown heap,
  # and new streams would fill it without a byte more of RSS.
  if [ "$target" != direct ]; then
    kill "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true
    rm -f "$W"/tether.sqlite*
    start_target "$target" $((P + i)) || { log "$target did not restart for the idle lane"; continue; }
  fi
  cell "$target" idle idle --addr $TADDR --streams $IDLE --pids "$(tree "$TPID")" --hold-ms 60000 --timeout 90
  if [ "$target" != direct ]; then kill "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; fi
  # Streams the idle lane left open end with the agent.
  kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true
  start_agent
done
log "wrote $OUT"
