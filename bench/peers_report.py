#!/usr/bin/env python3
# bench/peers_report.py — renders bench/peers.sh's peers.jsonl as Markdown (stdout):
# every target on the same lanes, `added` against direct measured in the same run.
#
#   python3 bench/peers_report.py bench/last-run/peers.jsonl

import json
import sys

WHAT = {
    "litellm": (
        "translates between 100+ provider APIs, routes and retries across deployments, virtual "
        "keys, budgets; with its database, one spend-log row per request (off here)",
        "records every request and every streamed delta in a durable session log before the "
        "client sees it (SQLite here); runs outlive their client; replay, resume, cancel, fork",
    ),
    "agentgateway": (
        "translates provider APIs; MCP and A2A routing; CEL policies, rate limits; optional "
        "request log (one row per request, batched, SQLite or PostgreSQL; off here)",
        "the same as for LiteLLM: the session log written before forwarding, runs owned by the "
        "gateway, replay and resume",
    ),
}


def load(path):
    cells, skipped, loads = {}, {}, {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        row = json.loads(line)
        t = row["target"]
        loads.setdefault(t, row.get("load_before", "?"))
        if row["scenario"] == "skipped":
            skipped[t] = row["r"]["skipped"]
        else:
            cells[(t, row["scenario"])] = row["r"]
    return cells, skipped, loads


def ms(us):
    return "–" if us is None else f"{us / 1000:.2f}"


def added(cells, t, scenario, key):
    a, d = cells.get((t, scenario), {}).get(key), cells.get(("direct", scenario), {}).get(key)
    if a is None or d is None:
        return "–"
    return f"{(a - d) / 1000:+.2f}"


def cpu_us(r, count):
    if not r or "cpu_ticks" not in r or not count:
        return "–"
    return f"{r['cpu_ticks'] / r['clk_tck'] * 1e6 / count:.0f}"


def table(w, header, cols, targets, skipped, row):
    """A Markdown table of `targets`: `row(t)` for each measured one, a skipped one's reason."""
    w(header)
    w("|---|" + "---:|" * (cols - 1))
    for t in targets:
        w(f"| {t} | skipped: {skipped[t]} |" + "|" * (cols - 2) if t in skipped else row(t))


def main(path):
    cells, skipped, loads = load(path)
    targets = []
    for t in ["direct", "tether", "litellm", "agentgateway"] + sorted({t for t, _ in cells} | set(skipped)):
        if t not in targets and (t in skipped or any(k[0] == t for k in cells)):
            targets.append(t)
    out = []
    w = out.append
    w("Non-streaming chat completions (`bench-load open|sat --path /v1/chat/completions`; "
      "added = the target's value minus direct's, ms; CPU = user + system time of the "
      "target's processes over the cell, per request):")
    w("")
    def chat_row(t):
        o50, o200, sat = (cells.get((t, s), {}) for s in ("chat-open-50", "chat-open-200", "chat-sat"))
        errors = sum(c.get("errors", 0) for c in (o50, o200, sat))
        return (f"| {t} | {loads.get(t, '?')} | {added(cells, t, 'chat-open-50', 'p50_us')} | "
                f"{added(cells, t, 'chat-open-50', 'p99_us')} | {added(cells, t, 'chat-open-200', 'p50_us')} | "
                f"{added(cells, t, 'chat-open-200', 'p99_us')} | {errors} | {sat.get('rps', 0):,.0f} | "
                f"{cpu_us(sat, sat.get('requests'))} |")
    table(w, "| target | load before | 50/s added p50 | p99 | 200/s added p50 | p99 | errors | "
          "saturation req/s | CPU µs per request (saturation) |", 9, targets, skipped, chat_row)
    w("")
    w("Streaming chat completions (20 deltas 50 ms apart; TTFE = request sent → first delta; "
      "delivery = receive time − the agent's send stamp in each delta; *sustained*: runs "
      "complete / failed at 1,000 concurrent streams; CPU per run at 100 streams; memory: RSS "
      "growth per stream held open after its first delta):")
    w("")
    def stream_row(t):
        s100, s1000, idle = (cells.get((t, s), {}) for s in ("sse-100", "sse-1000", "idle"))
        runs = s100.get("runs_ok", 0) + s100.get("runs_failed", 0)
        cpu_run = "–" if not runs or "cpu_ticks" not in s100 else \
            f"{s100['cpu_ticks'] / s100['clk_tck'] * 1e3 / runs:.2f}"
        per = "–"
        if idle.get("rss_after_kib") is not None and idle.get("open"):
            per = f"{(idle['rss_after_kib'] - idle['rss_before_kib']) / idle['open']:.1f}"
        return (f"| {t} | {added(cells, t, 'sse-1', 'ttfe_p50_us')} | {added(cells, t, 'sse-100', 'ttfe_p50_us')} | "
          f"{added(cells, t, 'sse-100', 'ttfe_p99_us')} | {added(cells, t, 'sse-100', 'lat_p50_us')} | "
          f"{added(cells, t, 'sse-100', 'lat_p99_us')} | {s1000.get('runs_ok', '–')} / {s1000.get('runs_failed', '–')} | "
          f"{added(cells, t, 'sse-1000', 'ttfe_p50_us')} | {added(cells, t, 'sse-1000', 'lat_p99_us')} | "
          f"{cpu_run} | {idle.get('open', '–')} | {per} |")
    table(w, "| target | 1 stream added TTFE p50 | 100: added TTFE p50 | p99 | 100: added delivery "
          "p50 | p99 | 1,000: ok / failed | 1,000: added TTFE p50 | 1,000: added delivery p99 | "
          "CPU ms per run (100) | idle streams | KiB per open stream |", 12, targets, skipped, stream_row)
    w("")
    w("| peer | does what Tether does not | Tether does what it does not |")
    w("|---|---|---|")
    for t in targets:
        if t not in ("direct", "tether"):
            a, b = WHAT.get(t, ("?", "?"))
            w(f"| {t} | {a} | {b} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(main(sys.argv[1]))
