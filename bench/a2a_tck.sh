#!/usr/bin/env bash
# bench/a2a_tck.sh — the A2A TCK (github a2aproject/a2a-tck, branch 1.0-dev) against an A2A
# agent straight and through `tether serve --protocol a2a` in front of it, and the tests
# whose outcome differs (issue 39; the README's "A2A conformance" section has the counts).
# A manual script: the TCK and its SUT agent are fetched code and stay outside this
# repository.
#
#   TCK_DIR=/work/tck TCK_PYTHON=/root/.cache/tck-venv/bin/python \
#   AGENT_URL=http://127.0.0.1:9801 bench/a2a_tck.sh [extra tether serve args...]
#
# TCK_DIR: a checkout of the TCK's 1.0-dev branch; TCK_PYTHON: a python with the TCK
# installed (`pip install -e $TCK_DIR`); AGENT_URL: the running agent (the TCK's
# sut/a2a-python ported to a2a-sdk 1.3, or any agent following the TCK's messageId
# prefixes). Environment: CARGO_TARGET_DIR (default /root/.cache/tether-target), PORT
# (Tether's, default 19400). The TCK follows the card's URLs, so through Tether every call
# goes to Tether; the log's session count is printed to show it.
set -euo pipefail
: "${TCK_DIR:?a checkout of a2a-tck 1.0-dev}" "${TCK_PYTHON:?a python with the TCK}" "${AGENT_URL:?the agent}"
tether=${CARGO_TARGET_DIR:-/root/.cache/tether-target}/debug/tether
port=${PORT:-19400}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

# JUnit writes an xfail (the TCK's way to fail a SHOULD or MAY requirement) as a skip; its
# type tells them apart, so a test skipped one way and failing its SHOULD the other is listed.
outcomes() { # junit xml -> "outcome test" lines
  "$TCK_PYTHON" - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).iter("testcase"):
    kids = {k.tag: k for k in tc}
    if kids.keys() & {"failure", "error"}:
        o = "failed"
    elif "skipped" in kids:
        o = "xfailed" if "xfail" in (kids["skipped"].get("type") or "") else "skipped"
    else:
        o = "passed"
    print(o, tc.get("classname") + "::" + tc.get("name"))
PY
}
run() { # name url
  (cd "$TCK_DIR" && "$TCK_PYTHON" run_tck.py --sut-host "$2" > "$work/$1.out" 2>&1) || true
  tail -1 "$work/$1.out"
  outcomes "$TCK_DIR/reports/junitreport.xml" | sort > "$work/$1.outcomes"
}

echo "straight to $AGENT_URL:"
run straight "$AGENT_URL"
"$tether" serve --protocol a2a --upstream "$AGENT_URL" --listen "127.0.0.1:$port" \
  --store "$work/sessions.sqlite" --allow-unauthenticated "$@" > "$work/tether.log" 2>&1 &
pid=$!
sleep 2
echo "through Tether at 127.0.0.1:$port:"
run tether "http://127.0.0.1:$port"
echo "sessions in Tether's log: $(sqlite3 "$work/sessions.sqlite" 'select count(*) from sessions')"
echo "tests whose outcome differs (< straight, > through Tether):"
{ diff "$work/straight.outcomes" "$work/tether.outcomes" || true; } | grep '^[<>]' || echo "(none)"
