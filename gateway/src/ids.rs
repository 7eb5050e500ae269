//! Ids: the ones Tether makes (sessions, runs, invocations, checkpoints, uploads,
//! exchanges, requests) and which client-chosen session ids it accepts.

/// A new session, run, invocation or checkpoint id. Time-ordered (UUIDv7: milliseconds,
/// then 74 random bits), so the log's indexes, which lead with these ids, take new entries
/// at one edge instead of at random pages all over a large file.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Whether a client-chosen session id is acceptable: short, printable, no separators
/// that would make logs or URLs ambiguous.
pub fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}
