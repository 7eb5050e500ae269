//! The upstream side of an adapter: the agent's protocol, building its request from the
//! projection plus the new turn, and parsing its response into `Output`s.

use serde_json::Value;

use crate::item::Item;
use crate::turn::TurnRequest;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `POST /v1/chat/completions`
    OpenAiChat,
    /// `POST /v1/responses`
    OpenAiResponses,
}

impl Protocol {
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "openai-chat" => Some(Protocol::OpenAiChat),
            "openai-responses" => Some(Protocol::OpenAiResponses),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenAiChat => "openai-chat",
            Protocol::OpenAiResponses => "openai-responses",
        }
    }

    /// The client path this protocol is served at.
    pub fn path(self) -> &'static str {
        match self {
            Protocol::OpenAiChat => "/v1/chat/completions",
            Protocol::OpenAiResponses => "/v1/responses",
        }
    }
}

/// Something the agent produced, in the order it produced it.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    TextDelta(String),
    ReasoningDelta(String),
    /// A finished transcript item: the assistant message, one aggregated reasoning item,
    /// a tool call with its arguments reassembled, a tool result, an approval.
    Item(Item),
    /// The agent reported an error.
    Error {
        code: String,
        message: String,
    },
    /// The agent said the turn is complete (`finish_reason`, `[DONE]` or
    /// `response.completed`). `usage` is the agent's token usage, when given.
    Done {
        usage: Option<Value>,
    },
}

/// Parses one upstream response body, fed in arbitrary chunks.
pub trait StreamParser: Send {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output>;
    /// The body ended. Emits what was buffered (a non-streaming JSON body is parsed here);
    /// a stream that ended without completion yields no `Done`.
    fn finish(&mut self) -> Vec<Output>;
}

/// An agent protocol.
pub trait Upstream: Send + Sync {
    fn protocol(&self) -> Protocol;

    /// JSON body of the agent request: `history` (the projection) followed by the turn's
    /// new input, always streaming, never naming a stored conversation.
    fn build_request(&self, history: &[Item], turn: &TurnRequest, default_model: &str) -> Value;

    /// A parser for the agent's response body with the given content type (SSE when it
    /// contains `text/event-stream`, otherwise one JSON document).
    fn parser(&self, content_type: &str) -> Box<dyn StreamParser>;
}
