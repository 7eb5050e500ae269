#!/usr/bin/env bash
# The chaos soak (issue 29): CHAOS_CLIENTS streaming clients for CHAOS_SECONDS through two
# replicas on a private PostgreSQL cluster, while the agent and a replica are killed with
# -9, PostgreSQL is restarted and clients drop their connections; then every invariant is
# checked and the counts printed (non-zero exit on any violation). The short variant,
# `chaos_short`, runs with the normal suite.
#
#   tests/chaos/soak.sh                     # 10 minutes, 24 clients
#   CHAOS_SECONDS=120 CHAOS_CLIENTS=8 tests/chaos/soak.sh
#   CHAOS_SEED=12345 tests/chaos/soak.sh    # replay a run's fault schedule
set -euo pipefail
cd "$(dirname "$0")/../.."
export CHAOS_SECONDS="${CHAOS_SECONDS:-600}" CHAOS_CLIENTS="${CHAOS_CLIENTS:-24}"
exec cargo test -p tether --test e2e -- --ignored --exact chaos::chaos_soak --nocapture
