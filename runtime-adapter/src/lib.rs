//! Everything protocol-specific about talking to clients and agents: turning a client's
//! request into a turn (`surface`), building the agent's request from the session's
//! projection (`upstream`), parsing the agent's stream into log events, and rendering
//! committed log events back into each client surface's wire format. The session log's
//! events are the common language, so any surface works in front of any upstream.

pub mod a2a;
pub mod adk;
pub mod chat;
pub mod compaction;
pub mod item;
pub mod projection;
pub mod responses;
mod responses_render;
pub mod sse;
pub mod surface;
pub mod turn;
pub mod upstream;
pub mod usage;

pub use item::{Block, Item};
pub use projection::project;
pub use surface::{ClientRequest, Route, RunInfo, StreamRenderer, Surface};
pub use turn::{InputError, SessionRef, Tool, TurnRequest};
pub use upstream::{
    AgentRequest, Cancel, Output, Probe, Protocol, Restore, StreamParser, TurnCall, Upstream,
};

/// The surface a client speaks (its request and response wire format).
pub fn surface(protocol: Protocol) -> &'static dyn Surface {
    match protocol {
        Protocol::OpenAiChat => &chat::ChatSurface,
        Protocol::OpenAiResponses => &responses::ResponsesSurface,
        Protocol::A2a => &a2a::A2aSurface,
        Protocol::Adk => &adk::AdkSurface,
    }
}

/// The adapter for an agent that speaks `protocol`.
pub fn upstream(protocol: Protocol) -> &'static dyn Upstream {
    match protocol {
        Protocol::OpenAiChat => &chat::ChatUpstream,
        Protocol::OpenAiResponses => &responses::ResponsesUpstream,
        Protocol::A2a => &a2a::A2aUpstream,
        Protocol::Adk => &adk::AdkUpstream,
    }
}
