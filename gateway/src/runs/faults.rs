//! Fault injection for tests: a panic at a named point of a run, so the supervisor's
//! handling of a crashing adapter, parser or renderer can be proven. Exists only in debug
//! builds (`cfg(debug_assertions)`); a release build has no hook and reads no variable.
//!
//! `TETHER_TEST_FAULTS` lists points (comma-separated: `drive`, `parser`); a listed point
//! panics in runs of sessions whose id starts with `fault-`, so other runs in the same
//! gateway go on normally.

/// Panics if `point` is listed for `session_id` (debug builds only).
#[cfg(debug_assertions)]
pub fn hit(point: &str, session_id: &str) {
    use std::sync::LazyLock;
    static POINTS: LazyLock<Vec<String>> = LazyLock::new(|| {
        std::env::var("TETHER_TEST_FAULTS")
            .unwrap_or_default()
            .split(',')
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .collect()
    });
    if session_id.starts_with("fault-") && POINTS.iter().any(|p| p == point) {
        panic!("injected fault at {point}");
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn hit(_point: &str, _session_id: &str) {}
