//! History reconciliation: what of a request's items is new to a session, for every
//! surface (Chat `messages`, Responses `input` items, A2A and ADK messages). Clients that
//! resend the conversation (almost every Chat Completions client) and clients that send
//! only the new input are told apart here, in one place, by one rule:
//!
//! - System and developer messages are the request's instructions for this turn: sent to
//!   the agent, never compared and never recorded as history ([`split_instructions`]).
//! - The request's *earlier turns* are its items up to and including its last
//!   agent-side item (an assistant message, a tool call, reasoning, an approval request);
//!   what follows (user messages, tool results) is its *new input*.
//! - Items compare on a normalised [`Key`]: role and text (whitespace at the ends
//!   trimmed, attachments by kind and file name, since the log keeps an upload
//!   reference where the client sent the bytes); tool calls and their results by call id;
//!   reasoning is never compared (clients drop it or keep it as they like); messages with
//!   nothing in them are ignored.
//! - Earlier turns that match the end of the session's history — all of it, or a
//!   trailing window of it, as clients that truncate send — are already in the log: only
//!   the new input is appended. A session with no history takes everything; a compacted
//!   history also matches a request that goes further back than its tail. A request that
//!   holds the whole history and more (turns the log never saw) appends the rest.
//! - Earlier turns that disagree with the history (an edited or dropped turn) are a
//!   [`Diverged`] request: the gateway forks the session at the last checkpoint where they
//!   still agree, and the fork's turn gets the request's items from there on.

use crate::item::{Block, Item};

/// The request's system and developer messages, taken out of `input`: this turn's
/// instructions, which are not history.
pub fn split_instructions(input: &mut Vec<Item>) -> Vec<Item> {
    let (system, rest): (Vec<Item>, Vec<Item>) =
        std::mem::take(input).into_iter().partition(is_instruction);
    *input = rest;
    system
}

fn is_instruction(item: &Item) -> bool {
    matches!(item, Item::Message { role, .. } if role == "system" || role == "developer")
}

/// What an item is compared by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    Message { role: String, content: Vec<String> },
    ToolCall(String),
    ToolResult(String),
    Approval(String),
}

/// The item's comparison key; `None` for what is never compared (reasoning, instructions,
/// empty messages).
pub fn key(item: &Item) -> Option<Key> {
    match item {
        Item::Message { role, .. } if role == "system" || role == "developer" => None,
        Item::Message { role, content } => {
            let mut parts = Vec::new();
            let mut text = String::new();
            for block in content {
                match block {
                    Block::Text(t) => text.push_str(t),
                    Block::Image { .. } => parts.push("[image]".to_owned()),
                    Block::File { filename, .. } => {
                        parts.push(format!("[file {}]", filename.as_deref().unwrap_or("")))
                    }
                }
            }
            let text = text.trim();
            if text.is_empty() && parts.is_empty() {
                return None;
            }
            if !text.is_empty() {
                parts.insert(0, text.to_owned());
            }
            Some(Key::Message {
                role: role.clone(),
                content: parts,
            })
        }
        Item::Reasoning { .. } => None,
        Item::ToolCall { call_id, .. } => Some(Key::ToolCall(call_id.clone())),
        Item::ToolResult { call_id, .. } => Some(Key::ToolResult(call_id.clone())),
        Item::Approval(v) => Some(Key::Approval(v.to_string())),
    }
}

/// Whether the agent's side of a conversation produced this item: what marks the items
/// before it as earlier turns.
fn agent_side(item: &Item) -> bool {
    match item {
        Item::Message { role, .. } => role == "assistant",
        Item::ToolCall { .. } | Item::Reasoning { .. } => true,
        Item::Approval(v) => {
            v.get("type").and_then(serde_json::Value::as_str) == Some("mcp_approval_request")
        }
        Item::ToolResult { .. } => false,
    }
}

/// Whether a request's items carry earlier turns at all (an agent-side item). A request
/// that does not is all new input, whatever the history: it need not be read.
pub fn carries_history(request: &[Item]) -> bool {
    request.iter().any(agent_side)
}

/// Where a request's items go, against a session's history.
#[derive(Clone, Debug, PartialEq)]
pub enum Reconciled {
    /// Append these items (the new input, or everything for a session with no history).
    Append(Vec<Item>),
    /// The request's earlier turns disagree with the history.
    Diverged(Diverged),
}

/// A request whose earlier turns disagree with the session's history.
#[derive(Clone, Debug, PartialEq)]
pub struct Diverged {
    /// How many of the history's items (from its start) the request agrees with: those
    /// before its window, then those its window matches.
    pub agreed: usize,
    /// The history index the request's first compared item stands at (`agreed` when the
    /// request matches nothing of it).
    start: usize,
    /// `(history index, request index)` of each agreeing pair, in order.
    pairs: Vec<(usize, usize)>,
    history: Vec<Item>,
    request: Vec<Item>,
}

impl Diverged {
    /// The items a turn gets when the history is kept up to (not including) index `kept`
    /// (at most `agreed`): what of the history lies between `kept` and the request's
    /// window, then the request's items after the one that matched `history[kept - 1]`.
    pub fn input_after(&self, kept: usize) -> Vec<Item> {
        let kept = kept.min(self.agreed);
        if kept <= self.start {
            let mut input = self.history[kept..self.start].to_vec();
            input.extend(self.request.iter().cloned());
            return input;
        }
        let from = self
            .pairs
            .iter()
            .find(|(h, _)| *h == kept - 1)
            .map_or(0, |(_, r)| r + 1);
        self.request[from..].to_vec()
    }
}

/// Reconciles a request's items (instructions already split off) with the session's
/// history items (its projection without a compaction summary; `compacted`: a summary
/// stands for what came before them).
pub fn reconcile(history: &[Item], compacted: bool, request: &[Item]) -> Reconciled {
    let earlier_end = request
        .iter()
        .rposition(agent_side)
        .map_or(0, |last| last + 1);
    let keyed = |items: &[Item]| -> Vec<(usize, Key)> {
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| key(item).map(|k| (i, k)))
            .collect()
    };
    let earlier = keyed(&request[..earlier_end]);
    let logged = keyed(history);
    let new = request[earlier_end..].to_vec();
    if earlier.is_empty() {
        return Reconciled::Append(new);
    }
    if logged.is_empty() && !compacted {
        return Reconciled::Append(request.to_vec());
    }
    let keys = |v: &[(usize, Key)]| v.iter().map(|(_, k)| k.clone()).collect::<Vec<_>>();
    let (e, h) = (keys(&earlier), keys(&logged));
    let window = h.ends_with(&e) || (compacted && e.ends_with(&h));
    if window {
        return Reconciled::Append(new);
    }
    // The whole history, then more than it holds (turns the client had elsewhere): nothing
    // disagrees, the rest is new.
    if e.starts_with(&h) {
        let after = earlier[h.len() - 1].0 + 1;
        return Reconciled::Append(request[after..].to_vec());
    }
    // Where they disagree: the alignment of the request's first item that agrees longest
    // (the earliest of equals: a full-history client starts at the history's start).
    let mut best: Option<(usize, usize)> = None; // (logged index, length)
    for j in 0..h.len() {
        let len = h[j..].iter().zip(&e).take_while(|(a, b)| a == b).count();
        if len > 0 && best.is_none_or(|(_, l)| len > l) {
            best = Some((j, len));
        }
    }
    let (start, agreed, pairs) = match best {
        Some((j, len)) => {
            let pairs: Vec<(usize, usize)> =
                (0..len).map(|k| (logged[j + k].0, earlier[k].0)).collect();
            // Agreement runs to the next compared history item (the uncompared ones
            // between, such as reasoning, go with the item before them).
            let agreed = logged.get(j + len).map_or(history.len(), |(i, _)| *i);
            (logged[j].0, agreed, pairs)
        }
        None => (0, 0, Vec::new()),
    };
    Reconciled::Diverged(Diverged {
        agreed,
        start,
        pairs,
        history: history.to_vec(),
        request: request.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn u(t: &str) -> Item {
        Item::user_text(t)
    }
    fn a(t: &str) -> Item {
        Item::assistant_text(t)
    }
    fn sys(t: &str) -> Item {
        Item::Message {
            role: "system".into(),
            content: vec![Block::Text(t.into())],
        }
    }
    fn call(id: &str, args: &str) -> Item {
        Item::ToolCall {
            call_id: id.into(),
            name: "f".into(),
            arguments: args.into(),
        }
    }
    fn result(id: &str, out: &str) -> Item {
        Item::ToolResult {
            call_id: id.into(),
            output: out.into(),
        }
    }

    fn append(r: Reconciled) -> Vec<Item> {
        match r {
            Reconciled::Append(items) => items,
            other => panic!("expected an append, got {other:?}"),
        }
    }

    fn diverged(r: Reconciled) -> Diverged {
        match r {
            Reconciled::Diverged(d) => d,
            other => panic!("expected a divergence, got {other:?}"),
        }
    }

    #[test]
    fn only_new_input_is_appended() {
        let history = [u("u1"), a("a1")];
        assert_eq!(append(reconcile(&history, false, &[u("u2")])), [u("u2")]);
    }

    #[test]
    fn the_whole_history_resent_appends_only_what_is_new() {
        let history = [u("u1"), a("a1"), u("u2"), a("a2")];
        let request = [u("u1"), a("a1"), u("u2"), a("a2"), u("u3")];
        assert_eq!(append(reconcile(&history, false, &request)), [u("u3")]);
        // Two new user messages in a row are both new.
        let request = [u("u1"), a("a1"), u("u2"), a("a2"), u("x"), u("y")];
        assert_eq!(
            append(reconcile(&history, false, &request)),
            [u("x"), u("y")]
        );
    }

    #[test]
    fn a_trailing_window_matches() {
        let history = [u("u1"), a("a1"), u("u2"), a("a2"), u("u3"), a("a3")];
        for from in 0..history.len() {
            let mut request = history[from..].to_vec();
            request.push(u("u4"));
            if request.len() == 1 {
                continue;
            }
            assert_eq!(
                append(reconcile(&history, false, &request)),
                [u("u4")],
                "window from {from}"
            );
        }
    }

    #[test]
    fn normalised_text_and_system_messages() {
        let history = [u("u1"), a("a1")];
        let mut request = vec![sys("be brief"), u("  u1\n"), a("a1 "), u("u2")];
        let system = split_instructions(&mut request);
        assert_eq!(system, [sys("be brief")]);
        assert_eq!(append(reconcile(&history, false, &request)), [u("u2")]);
        // A developer message left in the request is not compared either.
        let dev = Item::Message {
            role: "developer".into(),
            content: vec![Block::Text("x".into())],
        };
        let request = [u("u1"), dev, a("a1"), u("u2")];
        assert_eq!(append(reconcile(&history, false, &request)), [u("u2")]);
    }

    #[test]
    fn tool_calls_compare_by_id() {
        let history = [
            u("u1"),
            call("c1", "{\"x\": 1}"),
            result("c1", "42"),
            a("a1"),
        ];
        // Arguments re-serialised by the client and reasoning echoed: still the same turn.
        let request = [
            u("u1"),
            Item::Reasoning { text: "hm".into() },
            call("c1", "{\"x\":1}"),
            result("c1", "42"),
            a("a1"),
            u("u2"),
        ];
        assert_eq!(append(reconcile(&history, false, &request)), [u("u2")]);
        // A tool result answering the last call is new input.
        let history = [u("u1"), call("c1", "{}")];
        let request = [u("u1"), call("c1", "{}"), result("c1", "ok")];
        assert_eq!(
            append(reconcile(&history, false, &request)),
            [result("c1", "ok")]
        );
        // Another call id is another history.
        let history = [u("u1"), call("c1", "{}"), result("c1", "ok"), a("a1")];
        let request = [
            u("u1"),
            call("c2", "{}"),
            result("c2", "ok"),
            a("a1"),
            u("u2"),
        ];
        assert_eq!(diverged(reconcile(&history, false, &request)).agreed, 1);
    }

    #[test]
    fn only_agent_side_items_mark_earlier_turns() {
        assert!(!carries_history(&[u("u1"), result("c1", "ok"), u("u2")]));
        assert!(carries_history(&[u("u1"), a("a1"), u("u2")]));
        assert!(carries_history(&[call("c1", "{}"), result("c1", "ok")]));
    }

    #[test]
    fn a_session_without_history_takes_everything() {
        let request = [u("u1"), a("a1"), u("u2")];
        assert_eq!(append(reconcile(&[], false, &request)), request);
    }

    #[test]
    fn a_compacted_history_matches_a_longer_request() {
        let history = [u("u3"), a("a3")];
        let request = [u("u1"), a("a1"), u("u3"), a("a3"), u("u4")];
        assert_eq!(append(reconcile(&history, true, &request)), [u("u4")]);
        assert!(matches!(
            reconcile(&history, false, &request),
            Reconciled::Diverged(_)
        ));
    }

    #[test]
    fn an_edited_turn_diverges_where_they_stop_agreeing() {
        let history = [u("u1"), a("a1"), u("u2"), a("a2")];
        let request = [u("u1"), a("a1"), u("edited"), a("a2"), u("u3")];
        let d = diverged(reconcile(&history, false, &request));
        assert_eq!(d.agreed, 2);
        // Kept up to the end of turn 1: the request from its edit on.
        assert_eq!(d.input_after(2), [u("edited"), a("a2"), u("u3")]);
        // Kept up to nothing: the request as sent.
        assert_eq!(d.input_after(0), request);
    }

    #[test]
    fn a_dropped_turn_diverges_too() {
        let history = [u("u1"), a("a1"), u("u2"), a("a2")];
        let request = [u("u1"), a("a1"), u("u3")];
        // A client that never saw turn 2 continues from turn 1: that is a fork, not an append.
        let request_earlier = [u("u1"), a("a1"), u("u2b"), a("x"), u("u3")];
        let d = diverged(reconcile(&history, false, &request_earlier));
        assert_eq!(d.agreed, 2);
        // Earlier turns [u1, a1] are not the end of the history.
        let d = diverged(reconcile(&history, false, &request));
        assert_eq!((d.agreed, d.input_after(2)), (2, vec![u("u3")]));
    }

    #[test]
    fn a_request_that_goes_beyond_the_history_appends_the_rest() {
        let history = [u("u1"), a("a1")];
        let request = [u("u1"), a("a1"), u("u2"), a("a2"), u("u3")];
        assert_eq!(
            append(reconcile(&history, false, &request)),
            [u("u2"), a("a2"), u("u3")]
        );
    }

    #[test]
    fn a_window_that_diverges_keeps_the_history_before_it() {
        let history = [u("u1"), a("a1"), u("u2"), a("a2"), u("u3"), a("a3")];
        let request = [u("u2"), a("a2"), u("u3"), a("edited"), u("u4")];
        let d = diverged(reconcile(&history, false, &request));
        assert_eq!(d.agreed, 5);
        assert_eq!(d.input_after(5), [a("edited"), u("u4")]);
        assert_eq!(d.input_after(4), [u("u3"), a("edited"), u("u4")]);
        // Kept up to where the window starts: the request as sent.
        assert_eq!(d.input_after(2), request);
        // Kept before the window starts: the log fills the gap.
        let mut expected = vec![a("a1")];
        expected.extend(request.iter().cloned());
        assert_eq!(d.input_after(1), expected);
    }

    #[test]
    fn nothing_in_common_diverges_at_the_start() {
        let history = [u("u1"), a("a1")];
        let request = [u("other"), a("b"), u("u2")];
        let d = diverged(reconcile(&history, false, &request));
        assert_eq!(d.agreed, 0);
        assert_eq!(d.input_after(0), request);
    }

    #[test]
    fn approvals_compare_whole() {
        let req = Item::Approval(json!({"type": "mcp_approval_request", "id": "ap1"}));
        let history = [u("u1"), req.clone()];
        let response = Item::Approval(
            json!({"type": "mcp_approval_response", "approval_request_id": "ap1", "approve": true}),
        );
        let request = [u("u1"), req, response.clone()];
        assert_eq!(append(reconcile(&history, false, &request)), [response]);
    }

    /// Property: for any history and any window of it, resending the window with new input
    /// appends exactly the new input; changing one compared item of the window diverges.
    #[test]
    fn windows_append_and_edits_diverge() {
        let mut rng = 0x9e37_79b9_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for _ in 0..500 {
            let turns = 1 + next(6) as usize;
            let mut history = Vec::new();
            for t in 0..turns {
                history.push(u(&format!("q{}", next(3))));
                if next(3) == 0 {
                    let id = format!("call_{t}");
                    history.push(call(&id, "{}"));
                    history.push(result(&id, "r"));
                }
                history.push(a(&format!("a{t}")));
            }
            let from = next(history.len() as u64) as usize;
            let mut request = history[from..].to_vec();
            let new = u("brand new");
            request.push(new.clone());
            if !request[..request.len() - 1].iter().any(agent_side) {
                continue;
            }
            assert_eq!(
                append(reconcile(&history, false, &request)),
                std::slice::from_ref(&new),
                "{history:?} / {request:?}"
            );
            // The assistant's answers are unique: editing the last one diverges.
            let last = request
                .iter()
                .rposition(|i| matches!(i, Item::Message { role, .. } if role == "assistant"))
                .unwrap();
            request[last] = a("edited");
            let d = diverged(reconcile(&history, false, &request));
            assert!(d.agreed < history.len(), "{history:?} / {request:?}");
            let input = d.input_after(d.agreed);
            assert_eq!(input.last(), Some(&new));
            assert!(input.contains(&a("edited")));
        }
    }
}
