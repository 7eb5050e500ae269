//! What the CLI prints for people: tables of sessions and runs, one line per event, a
//! session's conversation, and the Markdown export.

use std::fmt::Write as _;

use serde_json::{json, Value};

/// `text` cut to `max` characters, on one line.
fn clip(text: &str, max: usize) -> String {
    let flat = text.replace(['\n', '\r'], " ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// `2026-12-02T15:09:32.929201Z` as `2026-12-02 15:09:32`.
fn time(value: &Value) -> String {
    let t = value.as_str().unwrap_or("");
    t.get(..19)
        .map_or_else(|| t.to_owned(), |s| s.replace('T', " "))
}

fn s(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// ListSessions' `Data` as a table.
pub fn sessions_table(data: &Value) -> String {
    let sessions = data["Sessions"].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "{:<40}  {:>7}  {:<19}  {:<19}\n",
        "SESSION", "EVENTS", "CREATED", "UPDATED"
    );
    for x in &sessions {
        let _ = writeln!(
            out,
            "{:<40}  {:>7}  {:<19}  {:<19}",
            s(&x["SessionId"]),
            x["LastSeqId"],
            time(&x["CreatedAt"]),
            time(&x["UpdatedAt"])
        );
    }
    let (total, page, size) = (
        data["Total"].as_i64().unwrap_or(0),
        data["Page"].as_i64().unwrap_or(1),
        data["PageSize"].as_i64().unwrap_or(20).max(1),
    );
    let pages = ((total + size - 1) / size).max(1);
    let _ = writeln!(out, "{total} sessions (page {page} of {pages})");
    out
}

/// ListWebhookDeliveries' `Data` as a table.
pub fn deliveries_table(data: &Value) -> String {
    let deliveries = data["Deliveries"].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "{:<36}  {:<18}  {:<9}  {:>8}  {:<19}  {:<20}  {}\n",
        "EVENT", "TYPE", "STATUS", "ATTEMPTS", "CREATED", "ENDPOINT", "LAST ERROR"
    );
    for d in &deliveries {
        let _ = writeln!(
            out,
            "{:<36}  {:<18}  {:<9}  {:>8}  {:<19}  {:<20}  {}",
            s(&d["EventId"]),
            s(&d["EventType"]),
            s(&d["Status"]),
            d["Attempts"],
            time(&d["CreatedAt"]),
            clip(s(&d["Endpoint"]), 20),
            clip(s(&d["LastError"]), 60)
        );
    }
    let _ = writeln!(
        out,
        "{} of {} deliveries",
        deliveries.len(),
        data["Total"].as_i64().unwrap_or(0)
    );
    out
}

/// `approvals list`: one line per pending request, oldest first.
pub fn approvals_table(data: &Value) -> String {
    let approvals = data["Approvals"].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "{:<36}  {:<36}  {:<8}  {:<16}  {:<19}  ARGUMENTS\n",
        "SESSION", "REQUEST", "KIND", "TOOL", "REQUESTED"
    );
    for x in &approvals {
        let _ = writeln!(
            out,
            "{:<36}  {:<36}  {:<8}  {:<16}  {:<19}  {}",
            s(&x["SessionId"]),
            s(&x["RequestId"]),
            s(&x["Kind"]),
            s(&x["Tool"]),
            time(&x["RequestedAt"]),
            match &x["Arguments"] {
                Value::Null => String::new(),
                v => v.to_string(),
            }
        );
    }
    let _ = writeln!(out, "{} pending", data["Total"].as_i64().unwrap_or(0));
    out
}

/// What a conversation item says, in a line: a message's text, a tool call or result.
fn said(event: &Value) -> Option<(String, String)> {
    let c = &event["Content"];
    let role = s(&event["Role"]).to_owned();
    match s(&event["EventType"]) {
        "message" | "reasoning" => Some((role, s(&c["text"]).to_owned())),
        "tool_call" => Some((
            role,
            format!(
                "calls {}({}) [{}]",
                s(&c["name"]),
                s(&c["arguments"]),
                s(&c["call_id"])
            ),
        )),
        "tool_result" => Some((
            role,
            format!("result [{}]: {}", s(&c["call_id"]), s(&c["output"])),
        )),
        _ => None,
    }
}

/// A session's runs and conversation, from its events (for `sessions show`).
pub fn session_summary(id: &str, events: &[Value]) -> Value {
    let mut runs: Vec<Value> = Vec::new();
    let mut transcript = Vec::new();
    for e in events {
        if let Some((role, text)) = said(e) {
            transcript.push(json!({ "SeqId": e["SeqId"], "Role": role, "EventType": e["EventType"], "Text": text }));
        }
        if s(&e["EventType"]) != "run_status" {
            continue;
        }
        let status = &e["Content"]["status"];
        match runs
            .iter_mut()
            .find(|r| r["InvocationId"] == e["InvocationId"])
        {
            None => runs.push(json!({
                "RunId": e["RunId"], "InvocationId": e["InvocationId"], "Status": status,
                "Model": e["Metadata"]["model"], "StartedAt": e["Timestamp"], "EndedAt": null,
                "Reason": null, "Usage": null,
            })),
            Some(run) => {
                run["Status"] = status.clone();
                run["EndedAt"] = e["Timestamp"].clone();
                run["Reason"] = e["Content"]["reason"].clone();
                run["Usage"] = e["Metadata"]["usage"].clone();
            }
        }
    }
    json!({
        "SessionId": id,
        "Events": events.len(),
        "LastSeqId": events.last().map_or(json!(0), |e| e["SeqId"].clone()),
        "FirstAt": events.first().map_or(Value::Null, |e| e["Timestamp"].clone()),
        "LastAt": events.last().map_or(Value::Null, |e| e["Timestamp"].clone()),
        "Runs": runs,
        "Transcript": transcript,
    })
}

/// `sessions show` for people.
pub fn session_text(summary: &Value) -> String {
    let runs = summary["Runs"].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "Session {}: {} events (last seq {}), {} runs, {} to {}\n\n",
        s(&summary["SessionId"]),
        summary["Events"],
        summary["LastSeqId"],
        runs.len(),
        time(&summary["FirstAt"]),
        time(&summary["LastAt"]),
    );
    let _ = writeln!(
        out,
        "{:<36}  {:<36}  {:<11}  {:<19}  MODEL",
        "RUN", "INVOCATION", "STATUS", "STARTED"
    );
    for r in &runs {
        let _ = writeln!(
            out,
            "{:<36}  {:<36}  {:<11}  {:<19}  {}",
            s(&r["RunId"]),
            s(&r["InvocationId"]),
            s(&r["Status"]),
            time(&r["StartedAt"]),
            s(&r["Model"])
        );
    }
    out.push_str("\nConversation:\n");
    for t in summary["Transcript"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{:>6}  {:<9}  {}",
            t["SeqId"],
            s(&t["Role"]),
            clip(s(&t["Text"]), 100)
        );
    }
    out
}

/// One event on one line (`tether events`).
pub fn event_line(e: &Value) -> String {
    let content = match said(e) {
        Some((_, text)) => text,
        None => e["Content"].to_string(),
    };
    format!(
        "{:>6}  {}  {:<15}  {:<9}  {}\n",
        e["SeqId"],
        time(&e["Timestamp"]),
        s(&e["EventType"]),
        s(&e["Role"]),
        clip(&content, 100)
    )
}

/// The conversation as Markdown (`export --format markdown`): what was said, by whom, and
/// how each run ended. Deltas and other control events are left out.
pub fn markdown(id: &str, source: &str, events: &[Value]) -> String {
    let mut out = format!(
        "# Session `{id}`\n\n{} events from {source}, exported {}.\n",
        events.len(),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    for e in events {
        let at = time(&e["Timestamp"]);
        let seq = &e["SeqId"];
        if let Some((role, text)) = said(e) {
            let kind = match s(&e["EventType"]) {
                "message" => String::new(),
                other => format!(" ({})", other.replace('_', " ")),
            };
            let _ = write!(out, "\n**{role}**{kind} · seq {seq} · {at}\n\n");
            for line in text.lines() {
                let _ = writeln!(out, "> {line}");
            }
        } else if e["EventType"] == "run_status" && e["Content"]["status"] != "in_progress" {
            let reason = match e["Content"]["reason"].as_str() {
                Some(r) => format!(" ({r})"),
                None => String::new(),
            };
            let _ = write!(
                out,
                "\n*Run {}: {}{reason}* · seq {seq}\n",
                s(&e["RunId"]),
                s(&e["Content"]["status"])
            );
        }
    }
    out
}
