#!/usr/bin/env bash
# The chaos soak (issue 29): CHAOS_CLIENTS streaming clients for CHAOS_SECONDS through two
# replicas on a private PostgreSQL cluster, while the agent and a replica are killed with
# -9, PostgreSQL is restarted and clients drop their connections; then every invariant is
# checked and the counts printed (non-zero exit on any violation). The short variant,
# `chaos_short`, runs with the normal suite.
#
#   tests/chaos/soak.sh                     # 10 minutes, 24 clients
#   CHAOS_SECONDS=120 CHAOS_CLIENTS=8 tests/chaos/soak.sh
#   CHAOS_SEED=12345 tests/chaos/soak.sh    # the same fault schedule (timing still varies)
#   CHAOS_POSTGRES_RESTARTS=0 tests/chaos/soak.sh   # without PostgreSQL restarts
set -euo pipefail
cd "$(dirname "$0")/../.."
export CHAOS_SECONDS="${CHAOS_SECONDS:-600}" CHAOS_CLIENTS="${CHAOS_CLIENTS:-24}"
export CHAOS_REPLICA_KILLS="${CHAOS_REPLICA_KILLS:-1}" CHAOS_POSTGRES_RESTARTS="${CHAOS_POSTGRES_RESTARTS:-1}"
exec cargo test -p tether --test e2e -- --ignored --exact chaos::chaos_soak --nocapture
