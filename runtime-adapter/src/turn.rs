//! `TurnRequest`: what a client asked for in one turn, independent of its wire format.

use serde_json::{Map, Value};

use crate::item::Item;
use crate::protocol::Protocol;

/// How the client named the session of this turn.
#[derive(Clone, Debug, PartialEq)]
pub enum SessionRef {
    /// No session given: Tether creates one.
    New,
    /// A session id (created under that id if it does not exist yet).
    Named(String),
    /// Continue the session of this earlier response (Responses `previous_response_id`).
    AfterResponse(String),
}

/// A function tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Option<Value>,
    pub strict: Option<bool>,
}

impl Tool {
    /// The function's fields as both OpenAI APIs spell them (`name`, and `description`,
    /// `parameters`, `strict` when given).
    pub(crate) fn function_fields(&self) -> Map<String, Value> {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        if let Some(p) = &self.parameters {
            function.insert("parameters".into(), p.clone());
        }
        if let Some(s) = self.strict {
            function.insert("strict".into(), Value::Bool(s));
        }
        function
    }
}

#[cfg(test)]
impl Tool {
    /// One tool with every optional field given (`f`) and one with none (`g`).
    pub(crate) fn samples() -> Vec<Tool> {
        vec![
            Tool {
                name: "f".into(),
                description: Some("does f".into()),
                parameters: Some(serde_json::json!({"type": "object"})),
                strict: Some(true),
            },
            Tool {
                name: "g".into(),
                description: None,
                parameters: None,
                strict: None,
            },
        ]
    }
}

/// `in_progress` metadata: the turn's [`TurnRequest::echo`], what its surface's response
/// object repeats of the request.
pub const REQUEST_PARAMS: &str = "request_params";

/// One turn as the client asked for it.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnRequest {
    /// The surface the client spoke.
    pub surface: Protocol,
    pub model: Option<String>,
    pub session: SessionRef,
    /// The new input only; the history comes from the log.
    pub input: Vec<Item>,
    /// Per-turn instructions (Responses `instructions`); sent upstream, not recorded as history.
    pub instructions: Option<String>,
    /// The request's system and developer messages, taken out of `input` by
    /// `reconcile::split_instructions`: this turn's instructions too, sent to the agent
    /// before the history and never recorded as history.
    pub system: Vec<Item>,
    /// SHA-256 (hex) of the request body as the client sent it, when it came with an
    /// `Idempotency-Key`: recorded with the run, so that a repeat of the key with another
    /// body is told apart.
    pub request_digest: Option<String>,
    pub stream: bool,
    pub tools: Vec<Tool>,
    /// `"auto"`, `"none"`, `"required"`, or a function name to force.
    pub tool_choice: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<u64>,
    /// Compact the session first when its history would exceed this many tokens
    /// (Responses `context_management`; see `compaction`).
    pub compact_threshold: Option<u64>,
    /// Every other top-level field, passed upstream untouched when the upstream speaks the
    /// same protocol as the surface.
    pub extra: Map<String, Value>,
    /// The input's `item_reference` items (Responses), in input order: the gateway
    /// resolves each from the log and puts the item itself into `input`.
    pub references: Vec<ItemReference>,
    /// The request's parameters that the surface's response object repeats (Responses:
    /// `temperature`, `text`, `reasoning`, `tools`, …), as the client sent them: recorded
    /// with the run's start, so that a response read back or replayed repeats them too.
    pub echo: Map<String, Value>,
}

/// An input item given by the id Tether gave it in an earlier response (`{"type":
/// "item_reference", "id": …}`), still to be looked up in the log.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemReference {
    /// Where the item goes: before `input[position]` (the input without the references).
    pub position: usize,
    pub id: String,
    /// The parameter that named it (`input[3].id`), for the error when it is unknown.
    pub param: String,
}

impl TurnRequest {
    pub fn new(surface: Protocol) -> Self {
        TurnRequest {
            surface,
            model: None,
            session: SessionRef::New,
            input: Vec::new(),
            instructions: None,
            system: Vec::new(),
            request_digest: None,
            stream: false,
            tools: Vec::new(),
            tool_choice: None,
            temperature: None,
            top_p: None,
            max_output_tokens: None,
            compact_threshold: None,
            extra: Map::new(),
            references: Vec::new(),
            echo: Map::new(),
        }
    }
}

/// A request the client got wrong: rendered as a 400 in the surface's error format.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct InputError {
    pub message: String,
    /// The offending parameter, when there is one (OpenAI's `error.param`).
    pub param: Option<String>,
    /// OpenAI's `error.code`, e.g. `invalid_json`, `invalid_type`, `missing_required_parameter`.
    pub code: &'static str,
}

impl InputError {
    pub fn new(code: &'static str, param: Option<&str>, message: impl Into<String>) -> Self {
        InputError {
            message: message.into(),
            param: param.map(str::to_owned),
            code,
        }
    }
}
