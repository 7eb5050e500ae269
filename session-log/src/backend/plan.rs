//! How both stores plan an append before any SQL runs: the commit timestamp, the
//! invocation-table operations `run_status` events imply, and seq assignment per session.

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};

use crate::event::{NewEvent, RunStatus, Seq};
use crate::store::StoreError;

/// `(account_id, session_id)`, borrowed from the batch.
pub(crate) type SessionKey<'a> = (&'a str, &'a str);

/// `value` as stored JSON text. `serde_json::to_string` writes into a byte buffer;
/// `Value`'s `Display` (`.to_string()`) goes through `fmt::Formatter`, growing its string a
/// piece at a time, and cost a tenth of a pass-through exchange's instructions.
pub(crate) fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).expect("a JSON value always serialises")
}

/// The timestamp every event of one batch gets. Truncated to microseconds because that is
/// what PostgreSQL keeps: the events `append` returns must equal what a later read returns.
pub(crate) fn commit_time() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

/// What one `run_status` event does to the invocation table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvocationOp<'a> {
    /// `in_progress`: insert the invocation unless it exists. The event is always kept.
    Open {
        account_id: &'a str,
        invocation_id: &'a str,
        session_id: &'a str,
        run_id: &'a str,
    },
    /// A terminal status: close the invocation if it is open in this session; the event is
    /// kept only if that changed a row.
    Close {
        account_id: &'a str,
        invocation_id: &'a str,
        session_id: &'a str,
        status: RunStatus,
        /// A lease sweep's close ([`crate::event::RUN_OWNER_LOST`]): it applies only if
        /// the invocation's lease is still expired when the row is closed, checked in the
        /// closing statement itself, so an owner's renewal that lands between the sweep's
        /// look and its close keeps the run.
        if_expired: bool,
    },
    /// A terminal status that names no invocation: there is nothing it could close.
    Drop,
}

impl<'a> InvocationOp<'a> {
    /// `(account_id, invocation_id)` of the invocation it changes, if any.
    fn invocation(&self) -> Option<(&'a str, &'a str)> {
        match *self {
            InvocationOp::Open {
                account_id,
                invocation_id,
                ..
            }
            | InvocationOp::Close {
                account_id,
                invocation_id,
                ..
            } => Some((account_id, invocation_id)),
            InvocationOp::Drop => None,
        }
    }
}

/// The invocation operations of `batch`, with the index of the event each comes from.
///
/// Ordered by invocation (stable, so one invocation's operations keep their input order):
/// every writer then locks invocation rows in the same order, which keeps concurrent
/// PostgreSQL transactions from deadlocking on them. The order between different
/// invocations does not change the outcome.
pub(crate) fn invocation_ops(batch: &[NewEvent]) -> Vec<(usize, InvocationOp<'_>)> {
    let mut ops: Vec<(usize, InvocationOp<'_>)> = batch
        .iter()
        .enumerate()
        .filter_map(|(i, event)| {
            let status = event.run_status()?;
            let invocation_id = event.invocation_id.as_deref();
            let op = match (status.is_terminal(), invocation_id) {
                (true, Some(invocation_id)) => InvocationOp::Close {
                    account_id: &event.account_id,
                    invocation_id,
                    session_id: &event.session_id,
                    status,
                    if_expired: event.content.get("reason").and_then(|r| r.as_str())
                        == Some(crate::event::RUN_OWNER_LOST),
                },
                (true, None) => InvocationOp::Drop,
                // An `in_progress` without both ids cannot be tracked; it is logged like
                // any other event.
                (false, Some(invocation_id)) => InvocationOp::Open {
                    account_id: &event.account_id,
                    invocation_id,
                    session_id: &event.session_id,
                    run_id: event.run_id.as_deref()?,
                },
                (false, None) => return None,
            };
            Some((i, op))
        })
        .collect();
    ops.sort_by_key(|(_, op)| op.invocation());
    ops
}

/// Whether no invocation appears twice among `ops`. Then no operation's outcome depends on
/// another's, and a backend may settle them with one statement per kind (busy gateways
/// write batches like that: many runs starting and ending, each once).
pub(crate) fn one_op_per_invocation(ops: &[(usize, InvocationOp<'_>)]) -> bool {
    // `invocation_ops` sorts by invocation, so repeats are neighbours.
    let ids = ops.iter().filter_map(|(_, op)| op.invocation());
    let mut last = None;
    for id in ids {
        if last == Some(id) {
            return false;
        }
        last = Some(id);
    }
    true
}

/// The sessions the kept events of `batch` go to, each with its number of kept events,
/// sorted by key so that writers lock session rows in one order.
pub(crate) fn session_counts<'a>(
    batch: &'a [NewEvent],
    keep: &[bool],
) -> Vec<(SessionKey<'a>, i64)> {
    let mut counts: BTreeMap<SessionKey<'a>, i64> = BTreeMap::new();
    for (event, _) in batch.iter().zip(keep).filter(|(_, keep)| **keep) {
        *counts
            .entry((event.account_id.as_str(), event.session_id.as_str()))
            .or_default() += 1;
    }
    counts.into_iter().collect()
}

/// Seqs for the kept events of `batch`, in input order, given each session's `last_seq`
/// after the batch's events were counted in (`last_seqs` is parallel to `counts`).
pub(crate) fn assign_seqs(
    batch: &[NewEvent],
    keep: &[bool],
    counts: &[(SessionKey<'_>, i64)],
    last_seqs: &[Option<Seq>],
) -> Result<Vec<Option<Seq>>, StoreError> {
    // The next seq of each session: the batch's events take the top `n` seqs.
    let mut next = Vec::with_capacity(counts.len());
    for ((key, n), last) in counts.iter().zip(last_seqs) {
        let last = last.ok_or_else(|| {
            StoreError::Corrupt(format!(
                "session row of account {:?} session {:?} missing after upsert",
                key.0, key.1
            ))
        })?;
        next.push(last - n + 1);
    }
    batch
        .iter()
        .zip(keep)
        .map(|(event, keep)| {
            if !keep {
                return Ok(None);
            }
            let key = (event.account_id.as_str(), event.session_id.as_str());
            let i = counts
                .binary_search_by(|(k, _)| k.cmp(&key))
                .map_err(|_| StoreError::Corrupt("event of an uncounted session".into()))?;
            let seq = next[i];
            next[i] += 1;
            Ok(Some(seq))
        })
        .collect()
}

/// The kept events of `batch`, each with how far below its session's new `last_seq` its
/// seq is (the database computes the seq from the `last_seq` its upsert returns), in
/// insert order: session by session, seqs ascending, so each index takes its entries at
/// one spot at a time instead of hopping between pages. Below-distances agree with
/// [`assign_seqs`]: events take their session's top seqs in input order.
pub(crate) fn rows_below<'a>(
    batch: &'a [NewEvent],
    keep: &[bool],
    counts: &[(SessionKey<'_>, i64)],
) -> Result<Vec<(&'a NewEvent, i64)>, StoreError> {
    let mut left: Vec<i64> = counts.iter().map(|(_, n)| *n).collect();
    let mut rows = Vec::with_capacity(batch.len());
    for (event, _) in batch.iter().zip(keep).filter(|(_, keep)| **keep) {
        let i = session_index(counts, (&event.account_id, &event.session_id))
            .ok_or_else(|| StoreError::Corrupt("event of an uncounted session".into()))?;
        left[i] -= 1;
        rows.push((event, left[i]));
    }
    rows.sort_by(|(a, a_below), (b, b_below)| {
        (&a.account_id, &a.session_id, b_below).cmp(&(&b.account_id, &b.session_id, a_below))
    });
    Ok(rows)
}

/// Index of `key` in `counts` (sorted by key), for mapping rows a statement returned.
pub(crate) fn session_index(
    counts: &[(SessionKey<'_>, i64)],
    key: SessionKey<'_>,
) -> Option<usize> {
    counts.binary_search_by(|(k, _)| k.cmp(&key)).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{run_status_content, EventType};

    fn status(session: &str, invocation: Option<&str>, status: RunStatus) -> NewEvent {
        let mut e = NewEvent::new(
            "acct",
            session,
            EventType::RunStatus,
            run_status_content(status, None),
        );
        e.run_id = Some("run".into());
        e.invocation_id = invocation.map(str::to_owned);
        e
    }

    #[test]
    fn invocation_ops_keep_input_order_within_an_invocation() {
        let batch = vec![
            status("s", Some("b"), RunStatus::InProgress),
            status("s", Some("a"), RunStatus::InProgress),
            status("s", Some("b"), RunStatus::Completed),
            status("s", None, RunStatus::Failed),
            NewEvent::new("acct", "s", EventType::Message, json!({"text": "hi"})),
            status("s", Some("a"), RunStatus::Failed),
            status("s", None, RunStatus::InProgress),
        ];
        let ops = invocation_ops(&batch);
        let order: Vec<usize> = ops.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, vec![3, 1, 5, 0, 2]);
        assert_eq!(ops[0].1, InvocationOp::Drop);
        assert!(matches!(
            ops[2].1,
            InvocationOp::Close {
                status: RunStatus::Failed,
                ..
            }
        ));
    }

    #[test]
    fn seqs_follow_input_order_per_session() {
        let batch: Vec<NewEvent> = ["x", "y", "x", "x", "y"]
            .iter()
            .map(|s| NewEvent::new("acct", s, EventType::TextDelta, json!({"delta": "."})))
            .collect();
        let keep = [true, true, false, true, true];
        let counts = session_counts(&batch, &keep);
        assert_eq!(counts, vec![(("acct", "x"), 2), (("acct", "y"), 2)]);
        // x had 10 events before, y is new.
        let seqs = assign_seqs(&batch, &keep, &counts, &[Some(12), Some(2)]).unwrap();
        assert_eq!(seqs, vec![Some(11), Some(1), None, Some(12), Some(2)]);
        assert!(assign_seqs(&batch, &keep, &counts, &[Some(12), None]).is_err());
    }
}
