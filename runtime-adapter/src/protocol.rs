//! `Protocol`: the wire protocols Tether speaks, to clients and to agents alike.

/// A protocol, named in configuration as `openai-chat`, `openai-responses`, `a2a` or `adk`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// `POST /v1/chat/completions`
    OpenAiChat,
    /// `POST /v1/responses`
    OpenAiResponses,
    /// A2A (Agent2Agent), JSON-RPC and HTTP+JSON transports, v0.3 and v1.0.
    A2a,
    /// Google ADK's `api_server` REST API (`/run`, `/run_sse`, `/apps/…/sessions`).
    Adk,
}

impl Protocol {
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "openai-chat" => Some(Protocol::OpenAiChat),
            "openai-responses" => Some(Protocol::OpenAiResponses),
            "a2a" => Some(Protocol::A2a),
            "adk" => Some(Protocol::Adk),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::OpenAiChat => "openai-chat",
            Protocol::OpenAiResponses => "openai-responses",
            Protocol::A2a => "a2a",
            Protocol::Adk => "adk",
        }
    }

    /// Whether the agent is stateless and gets the whole history on every turn (the
    /// OpenAI APIs), rather than keeping the conversation itself (A2A, ADK).
    pub fn sends_history(self) -> bool {
        matches!(self, Protocol::OpenAiChat | Protocol::OpenAiResponses)
    }
}
