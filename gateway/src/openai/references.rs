//! `item_reference` input items (Responses): each resolved from the log, inside the
//! caller's account, to the item it names, and put into the turn's input in its place, so
//! the agent gets the items themselves. A reference also names the turn's session when
//! the request names none (a client that keeps the conversation as item ids, as the
//! Vercel AI SDK does, sends no session).

use std::collections::HashMap;

use runtime_adapter::responses::{item_run_id, output_items};
use runtime_adapter::{Item, ItemReference, SessionRef, TurnRequest};
use serde_json::Value;

use crate::error::ApiError;
use crate::state::State;
use crate::turn::{run_events, run_info};

/// Replaces `turn.references` by the items they name. An id that is not one Tether gave,
/// or belongs to no run of the account, is refused (404 naming `input[i].id`) before
/// anything is written.
pub async fn resolve(
    state: &State,
    account_id: &str,
    turn: &mut TurnRequest,
) -> Result<(), ApiError> {
    if turn.references.is_empty() {
        return Ok(());
    }
    // Each run referenced is read and rendered once, however many of its items are named.
    let mut runs: HashMap<String, (String, Vec<(String, Item)>)> = HashMap::new();
    let mut resolved = Vec::with_capacity(turn.references.len());
    let mut session = None;
    for reference in std::mem::take(&mut turn.references) {
        let run_id = item_run_id(&reference.id).ok_or_else(|| not_found(&reference))?;
        if !runs.contains_key(&run_id) {
            let inv = state
                .store
                .run(account_id, &run_id)
                .await
                .map_err(|e| ApiError::store_unavailable(&e, "cannot resolve an item reference"))?
                .ok_or_else(|| not_found(&reference))?;
            let events = run_events(state, account_id, &inv).await?;
            let items = output_items(&run_info(&inv, &events, Value::Null), &events);
            runs.insert(run_id.clone(), (inv.session_id.clone(), items));
        }
        let (session_id, items) = &runs[&run_id];
        let item = items
            .iter()
            .find(|(id, _)| *id == reference.id)
            .map(|(_, item)| item.clone())
            .ok_or_else(|| not_found(&reference))?;
        session.get_or_insert_with(|| session_id.clone());
        resolved.push((reference.position, item));
    }
    let input = std::mem::take(&mut turn.input);
    let mut resolved = resolved.into_iter().peekable();
    for (position, item) in input.into_iter().enumerate() {
        while let Some((_, r)) = resolved.next_if(|(p, _)| *p <= position) {
            turn.input.push(r);
        }
        turn.input.push(item);
    }
    turn.input.extend(resolved.map(|(_, r)| r));
    if let (SessionRef::New, Some(session_id)) = (&turn.session, session) {
        turn.session = SessionRef::Named(session_id);
    }
    Ok(())
}

fn not_found(reference: &ItemReference) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        "item_not_found",
        format!("Item with id '{}' not found.", reference.id),
    )
    .with_param(&reference.param)
}
