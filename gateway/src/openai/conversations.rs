//! The Conversations API, served from the log: a conversation is a Tether session (its id
//! works as `conversation` on `/v1/responses`, as `SessionId` on the control API and in
//! the console), and its items are the session's history items.
//!
//! `POST /v1/conversations` (initial `items`, `metadata`), `GET`/`POST`/`DELETE
//! /v1/conversations/{id}`, `GET`/`POST /v1/conversations/{id}/items` and `GET`/`DELETE
//! /v1/conversations/{id}/items/{item_id}`, in the OpenAI API's shapes and pagination.
//!
//! The log is append-only, so a change is an event, recording who made it (`actor`, the
//! credential): metadata is a `session_metadata` event (the latest is the session's
//! metadata, which `ListSessions` shows), a deleted conversation a `session_deleted`
//! (every read treats the session as unknown from then on), a deleted item an
//! `item_deleted` (no projection or read shows the item from then on). An item's id is
//! `item_<position>`, its position in the session's history.

use http::Method;
use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::responses::{listed_item, parse_item};
use runtime_adapter::{surface, Item, Protocol, Surface, TurnRequest};
use serde_json::{json, Map, Value};
use session_log::branch::DELETED_POSITION;
use session_log::{EventType, Lineage, NewEvent, Seq, StoreError};

use crate::client::body::read_body;
use crate::client::respond;
use crate::error::ApiError;
use crate::ids::{client_id, new_id};
use crate::quota;
use crate::runs::attachments;
use crate::state::State;

/// The path every route of this API starts with.
pub const PATH: &str = "/v1/conversations";

/// Metadata key of a change's event: the credential that made it.
const ACTOR: &str = "actor";

/// Most items one request may add (the OpenAI API's limit).
const MAX_ITEMS: usize = 20;

/// A page of items: the default and largest sizes (the OpenAI API's).
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

fn responses() -> &'static dyn Surface {
    surface(Protocol::OpenAiResponses)
}

/// Who is calling: the account every read and write is scoped to, and the credential the
/// log records as the author of a change.
pub struct Caller<'a> {
    pub account_id: &'a str,
    pub credential_id: &'a str,
}

type Answer = std::result::Result<(u16, Value), ApiError>;

/// Dispatches a request whose path starts with [`PATH`].
pub async fn handle(
    state: &State,
    session: &mut Session,
    caller: &Caller<'_>,
    method: Method,
    path: &str,
) -> Result<()> {
    let answer = route(state, session, caller, method, path).await;
    match answer {
        Ok((status, body)) => respond::json(session, status, &body, &[]).await,
        Err(e) => e.send(session, responses(), &[]).await,
    }
}

async fn route(
    state: &State,
    session: &mut Session,
    caller: &Caller<'_>,
    method: Method,
    path: &str,
) -> Answer {
    let rest = path[PATH.len()..].trim_start_matches('/');
    let parts: Vec<&str> = if rest.is_empty() {
        Vec::new()
    } else {
        rest.split('/').collect()
    };
    match (method, parts.as_slice()) {
        (Method::POST, []) => {
            let body = body(state, session).await?;
            create(state, caller, &body).await
        }
        (method, [id, tail @ ..]) => {
            let id = conversation_id(id)?;
            match (method, tail) {
                (Method::GET, []) => Ok((200, conversation(&find(state, caller, id).await?))),
                (Method::POST, []) => {
                    let body = body(state, session).await?;
                    update(state, caller, id, &body).await
                }
                (Method::DELETE, []) => delete(state, caller, id).await,
                (Method::GET, ["items"]) => {
                    let page = Page::of(session)?;
                    list_items(state, caller, id, &page).await
                }
                (Method::POST, ["items"]) => {
                    let body = body(state, session).await?;
                    add_items(state, caller, id, &body).await
                }
                (Method::GET, ["items", item_id]) => {
                    let lineage = lineage(state, caller, id).await?;
                    let (_, item) = find_item(state, &lineage, item_id).await?;
                    Ok((200, item))
                }
                (Method::DELETE, ["items", item_id]) => {
                    delete_item(state, caller, id, item_id).await
                }
                _ => Err(not_allowed()),
            }
        }
        _ => Err(not_allowed()),
    }
}

fn not_allowed() -> ApiError {
    ApiError::new(
        405,
        "invalid_request_error",
        "method_not_allowed",
        "use POST /v1/conversations, GET|POST|DELETE /v1/conversations/{id}, \
         GET|POST /v1/conversations/{id}/items or GET|DELETE \
         /v1/conversations/{id}/items/{item_id}",
    )
}

fn conversation_id(id: &str) -> std::result::Result<&str, ApiError> {
    client_id("conversation_id", id).map_err(|e| e.to_api())
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        404,
        "invalid_request_error",
        "conversation_not_found",
        format!("Conversation with id '{id}' not found."),
    )
}

fn unavailable(e: StoreError) -> ApiError {
    ApiError::store_unavailable(&e, "cannot read a conversation")
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::new(400, "invalid_request_error", "invalid_value", message).with_param(param)
}

/// The request's body as a JSON object (an empty body is an empty object).
async fn body(
    state: &State,
    session: &mut Session,
) -> std::result::Result<Map<String, Value>, ApiError> {
    let bytes = read_body(session, &state.input).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(ApiError::new(
            400,
            "invalid_request_error",
            "invalid_json",
            "the request body must be a JSON object",
        )),
        Err(e) => Err(ApiError::new(
            400,
            "invalid_request_error",
            "invalid_json",
            format!("the request body is not valid JSON: {e}"),
        )),
    }
}

/// The caller's session `id`, unless it has none (or deleted it).
async fn find(
    state: &State,
    caller: &Caller<'_>,
    id: &str,
) -> std::result::Result<session_log::Session, ApiError> {
    match state.store.session(caller.account_id, id).await {
        Ok(Some(s)) if !s.deleted => Ok(s),
        Ok(_) => Err(not_found(id)),
        Err(e) => Err(unavailable(e)),
    }
}

async fn lineage(
    state: &State,
    caller: &Caller<'_>,
    id: &str,
) -> std::result::Result<Lineage, ApiError> {
    Lineage::resolve(&*state.store, caller.account_id, id)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| not_found(id))
}

/// A conversation object.
fn conversation(s: &session_log::Session) -> Value {
    json!({
        "id": s.session_id,
        "object": "conversation",
        "created_at": s.created_at.timestamp(),
        "metadata": s.metadata.clone().unwrap_or_else(|| json!({})),
    })
}

/// `metadata` as the OpenAI API takes it: up to 16 string values, keys up to 64
/// characters, values up to 512.
fn metadata(body: &Map<String, Value>) -> std::result::Result<Option<Value>, ApiError> {
    let Some(value) = body.get("metadata") else {
        return Ok(None);
    };
    let map = match value {
        Value::Null => return Ok(Some(json!({}))),
        Value::Object(map) => map,
        _ => return Err(invalid("metadata", "metadata must be an object")),
    };
    session_log::event::check_metadata(map).map_err(|problem| invalid("metadata", problem))?;
    Ok(Some(value.clone()))
}

/// A change's event, signed by its author.
fn change(caller: &Caller<'_>, id: &str, kind: EventType, content: Value) -> NewEvent {
    NewEvent::new(caller.account_id, id, kind, content)
        .with_metadata(json!({ ACTOR: caller.credential_id }))
}

/// `items` of a request: each read as a Responses input item, and its attachments checked
/// (an upload ref must be the account's) and taken out to be stored; nothing is written.
async fn items(
    state: &State,
    caller: &Caller<'_>,
    body: &Map<String, Value>,
    required: bool,
) -> std::result::Result<(Vec<Item>, Vec<attachments::Upload>), ApiError> {
    let list = match body.get("items") {
        None | Some(Value::Null) if !required => return Ok((Vec::new(), Vec::new())),
        None | Some(Value::Null) => {
            return Err(ApiError::new(
                400,
                "invalid_request_error",
                "missing_required_parameter",
                "Missing required parameter: 'items'.",
            )
            .with_param("items"))
        }
        Some(Value::Array(list)) => list,
        Some(_) => return Err(invalid("items", "items must be an array")),
    };
    if list.len() > MAX_ITEMS || (required && list.is_empty()) {
        return Err(invalid(
            "items",
            format!("items takes 1 to {MAX_ITEMS} items"),
        ));
    }
    let mut turn = TurnRequest::new(Protocol::OpenAiResponses);
    for (i, v) in list.iter().enumerate() {
        let item = parse_item(v, &format!("items[{i}]")).map_err(|e| {
            let mut err = ApiError::new(400, "invalid_request_error", e.code, e.message);
            err.param = e.param;
            err
        })?;
        turn.input.push(item);
    }
    attachments::check_refs(&*state.store, caller.account_id, &turn).await?;
    let (turn, uploads) = attachments::extract(&state.attachments, turn)?;
    Ok((turn.input, uploads))
}

/// Commits a conversation's events (after its uploads); returns them committed. Checks
/// the quotas first for a write to `session` (`None`: a deletion, never refused).
async fn commit(
    state: &State,
    caller: &Caller<'_>,
    uploads: Vec<attachments::Upload>,
    events: Vec<NewEvent>,
    session: Option<quota::Target<'_>>,
) -> std::result::Result<Vec<session_log::Event>, ApiError> {
    if let Some(session) = session {
        let adding = quota::Adding {
            session,
            upload_bytes: uploads.iter().map(|u| u.bytes.len() as u64).sum(),
            events: true,
        };
        quota::refuse_over_quota(state, caller.account_id, adding).await?;
    }
    attachments::save(&*state.store, caller.account_id, uploads).await?;
    state
        .writer
        .append(events)
        .await
        .map_err(|e| ApiError::store_unavailable(&e, "cannot write a conversation"))
}

/// A run in the session would interleave with items added or deleted now.
fn refuse_busy(state: &State, caller: &Caller<'_>, id: &str) -> std::result::Result<(), ApiError> {
    if state.runs.running_in_session(caller.account_id, id) {
        return Err(ApiError::new(
            409,
            "invalid_request_error",
            "conversation_busy",
            format!("a response is in progress in conversation '{id}'; wait for it to finish"),
        ));
    }
    Ok(())
}

async fn create(state: &State, caller: &Caller<'_>, body: &Map<String, Value>) -> Answer {
    let metadata = metadata(body)?.unwrap_or_else(|| json!({}));
    let (items, uploads) = items(state, caller, body, false).await?;
    let id = new_id("conv");
    // The metadata event comes first: it opens the session, and says who made it.
    let mut events = vec![change(
        caller,
        &id,
        EventType::SessionMetadata,
        json!({ "metadata": metadata }),
    )];
    events.extend(items.iter().map(|i| i.to_event(caller.account_id, &id)));
    commit(state, caller, uploads, events, Some(quota::Target::New)).await?;
    let session = find(state, caller, &id).await?;
    Ok((200, conversation(&session)))
}

async fn update(state: &State, caller: &Caller<'_>, id: &str, body: &Map<String, Value>) -> Answer {
    let metadata = metadata(body)?.ok_or_else(|| {
        ApiError::new(
            400,
            "invalid_request_error",
            "missing_required_parameter",
            "Missing required parameter: 'metadata'.",
        )
        .with_param("metadata")
    })?;
    find(state, caller, id).await?;
    let event = change(
        caller,
        id,
        EventType::SessionMetadata,
        json!({ "metadata": metadata }),
    );
    commit(
        state,
        caller,
        Vec::new(),
        vec![event],
        Some(quota::Target::Existing),
    )
    .await?;
    Ok((200, conversation(&find(state, caller, id).await?)))
}

async fn delete(state: &State, caller: &Caller<'_>, id: &str) -> Answer {
    find(state, caller, id).await?;
    refuse_busy(state, caller, id)?;
    let event = change(caller, id, EventType::SessionDeleted, json!({}));
    commit(state, caller, Vec::new(), vec![event], None).await?;
    tracing::info!(
        account_id = caller.account_id,
        session_id = id,
        actor = caller.credential_id,
        "conversation deleted"
    );
    Ok((
        200,
        json!({ "id": id, "object": "conversation.deleted", "deleted": true }),
    ))
}

/// An item's id: its position in the session's history.
fn item_id(position: Seq) -> String {
    format!("item_{position}")
}

fn item_position(id: &str) -> Option<Seq> {
    let n = id.strip_prefix("item_")?;
    n.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| n.parse().ok())?
}

/// The conversation's items: the transcript of the session's history on its active
/// branch (a fork's inherited part first; what a compaction summarised too, as the
/// conversation still holds it), without deleted items, in history order.
async fn all_items(
    state: &State,
    lineage: &Lineage,
) -> std::result::Result<Vec<(Seq, Value)>, ApiError> {
    let store = &*state.store;
    let (branch, _) = lineage.branch(store, None).await.map_err(unavailable)?;
    let events = lineage
        .events(store, 0, None, Some(&EventType::TRANSCRIPT), i64::MAX)
        .await
        .map_err(unavailable)?;
    Ok(events
        .iter()
        .filter_map(|e| {
            let position = lineage.position(e);
            if e.is_late() || !branch.is_active(position, e) {
                return None;
            }
            let item = Item::from_event(e)?;
            Some((position, listed_item(&item, &item_id(position))))
        })
        .collect())
}

async fn find_item(
    state: &State,
    lineage: &Lineage,
    id: &str,
) -> std::result::Result<(Seq, Value), ApiError> {
    let missing = || {
        ApiError::new(
            404,
            "invalid_request_error",
            "item_not_found",
            format!("Item with id '{id}' not found."),
        )
    };
    let position = item_position(id).ok_or_else(missing)?;
    all_items(state, lineage)
        .await?
        .into_iter()
        .find(|(p, _)| *p == position)
        .ok_or_else(missing)
}

/// A page request: `after` (an item id), `limit` (1-100), `order` (`asc`, or `desc` as by
/// default); `include` is taken and has nothing to add (the log keeps no more than the
/// items show).
struct Page {
    after: Option<Seq>,
    limit: usize,
    ascending: bool,
}

impl Page {
    fn of(session: &Session) -> std::result::Result<Page, ApiError> {
        let query = session.req_header().uri.query().unwrap_or("");
        let mut page = Page {
            after: None,
            limit: DEFAULT_LIMIT,
            ascending: false,
        };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "after" if !v.is_empty() => {
                    page.after = Some(item_position(&v).ok_or_else(|| {
                        invalid(
                            "after",
                            format!("after {v:?} is not an item id of this API"),
                        )
                    })?);
                }
                "limit" => {
                    page.limit = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            invalid(
                                "limit",
                                format!("limit must be an integer from 1 to {MAX_LIMIT}"),
                            )
                        })?;
                }
                "order" => {
                    page.ascending = match &*v {
                        "asc" => true,
                        "desc" => false,
                        _ => return Err(invalid("order", "order must be 'asc' or 'desc'")),
                    }
                }
                _ => {}
            }
        }
        Ok(page)
    }
}

/// A list object of `items`, as the OpenAI API pages it.
fn list(items: Vec<Value>, has_more: bool) -> Value {
    let id = |v: Option<&Value>| v.map_or(Value::Null, |v| v["id"].clone());
    json!({
        "object": "list",
        "first_id": id(items.first()),
        "last_id": id(items.last()),
        "has_more": has_more,
        "data": items,
    })
}

async fn list_items(state: &State, caller: &Caller<'_>, id: &str, page: &Page) -> Answer {
    let lineage = lineage(state, caller, id).await?;
    let mut items = all_items(state, &lineage).await?;
    if !page.ascending {
        items.reverse();
    }
    let after = |p: Seq| match page.after {
        None => true,
        Some(a) if page.ascending => p > a,
        Some(a) => p < a,
    };
    let mut rest = items.into_iter().filter(|(p, _)| after(*p));
    let data: Vec<Value> = rest.by_ref().take(page.limit).map(|(_, v)| v).collect();
    let has_more = rest.next().is_some();
    Ok((200, list(data, has_more)))
}

async fn add_items(
    state: &State,
    caller: &Caller<'_>,
    id: &str,
    body: &Map<String, Value>,
) -> Answer {
    let lineage = lineage(state, caller, id).await?;
    let (items, uploads) = items(state, caller, body, true).await?;
    refuse_busy(state, caller, id)?;
    let events = items
        .iter()
        .map(|i| i.to_event(caller.account_id, id))
        .collect();
    let committed = commit(
        state,
        caller,
        uploads,
        events,
        Some(quota::Target::Existing),
    )
    .await?;
    let data = committed
        .iter()
        .filter_map(|e| {
            let position = lineage.own_position(e.seq);
            Some(listed_item(&Item::from_event(e)?, &item_id(position)))
        })
        .collect();
    Ok((200, list(data, false)))
}

async fn delete_item(state: &State, caller: &Caller<'_>, id: &str, item: &str) -> Answer {
    let lineage = lineage(state, caller, id).await?;
    let (position, _) = find_item(state, &lineage, item).await?;
    refuse_busy(state, caller, id)?;
    let mut content = json!({ "item_id": item, DELETED_POSITION: position });
    // An item of the session's own (not inherited from a fork's parent): its seq, by
    // which the store drops its text from the search index.
    let base = lineage.own_position(0);
    if position > base {
        content["seq"] = json!(position - base);
    }
    let event = change(caller, id, EventType::ItemDeleted, content);
    commit(state, caller, Vec::new(), vec![event], None).await?;
    Ok((200, conversation(&find(state, caller, id).await?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_ids_name_positions() {
        assert_eq!(item_id(42), "item_42");
        assert_eq!(item_position("item_42"), Some(42));
        for bad in ["item_", "item_-1", "item_4x", "msg_42", "42"] {
            assert_eq!(item_position(bad), None, "{bad}");
        }
    }

    #[test]
    fn metadata_is_taken_as_the_openai_api_takes_it() {
        let body = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(metadata(&body(json!({}))).ok(), Some(None));
        assert_eq!(
            metadata(&body(json!({"metadata": {"a": "b"}}))).ok(),
            Some(Some(json!({"a": "b"})))
        );
        assert_eq!(
            metadata(&body(json!({"metadata": null}))).ok(),
            Some(Some(json!({})))
        );
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
        for bad in [
            json!({"metadata": []}),
            json!({"metadata": {"a": 1}}),
            json!({"metadata": {"a": "x".repeat(513)}}),
            json!({"metadata": {"k".repeat(65): "v"}}),
            json!({"metadata": many}),
        ] {
            let e = metadata(&body(bad)).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some("metadata")));
        }
    }
}
