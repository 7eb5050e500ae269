//! The export file `tether import` reads: one event per line (JSON Lines), each as the
//! control API shows it, all of one session's history in order. A fork's history starts
//! with the events it inherited (`Inherited: true`, each with its own session's id);
//! ImportSession places every event at its `Position`.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::client::CliError;

/// Events as JSON Lines.
pub fn jsonl(events: &[Value]) -> String {
    events.iter().map(|e| format!("{e}\n")).collect()
}

/// The session id and events of an export file (`-` for stdin).
pub fn read_export(path: &Path) -> Result<(String, Vec<Value>), CliError> {
    let name = path.display();
    let mut text = String::new();
    let read = match path.to_str() {
        Some("-") => std::io::stdin().read_to_string(&mut text).map(drop),
        _ => std::fs::read_to_string(path).map(|t| text = t),
    };
    read.map_err(|e| CliError::Failed(format!("cannot read {name}: {e}")))?;
    let mut events = Vec::new();
    let mut session: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| CliError::Failed(format!("{name}:{}: {why}", i + 1));
        let event: Value =
            serde_json::from_str(line).map_err(|e| bad(format!("not a JSON event: {e}")))?;
        let Some(id) = event["SessionId"].as_str() else {
            return Err(bad("the event has no SessionId".into()));
        };
        // Inherited events name the session they come from; the file is of the other one.
        if event["Inherited"] == Value::Bool(true) {
            events.push(event);
            continue;
        }
        match &session {
            Some(s) if s != id => {
                return Err(bad(format!(
                    "the event is of session {id:?}, the file's first own event of {s:?}"
                )))
            }
            Some(_) => {}
            None => session = Some(id.to_owned()),
        }
        events.push(event);
    }
    let session = session.ok_or_else(|| CliError::Failed(format!("{name} holds no events")))?;
    Ok((session, events))
}
