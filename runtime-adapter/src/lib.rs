//! Everything protocol-specific about talking to clients and agents: turning a client's
//! request into a turn (`surface`), building the agent's request from the session's
//! projection (`upstream`), parsing the agent's stream into log events, and rendering
//! committed log events back into each client surface's wire format. The session log's
//! events are the common language, so any surface works in front of any upstream.

pub mod a2a;
pub mod adk;
pub mod approval;
mod body_parser;
pub mod chat;
pub mod compaction;
pub mod cursor;
pub mod grpc;
pub mod item;
pub mod langgraph;
mod params;
mod percent;
pub mod projection;
pub mod protocol;
pub mod reconcile;
pub mod responses;
pub mod sse;
pub mod surface;
pub mod turn;
pub mod upstream;
pub mod usage;
mod waited;

pub use a2a::AdvertiseGrpc;
pub use item::{Block, Item};
pub use projection::project;
pub use protocol::Protocol;
pub use surface::{ClientRequest, Refused, Route, RunInfo, StreamRenderer, Surface};
pub use turn::{InputError, ItemReference, SessionRef, Tool, TurnRequest, REQUEST_PARAMS};
pub use upstream::{
    AgentRequest, AgentTransport, Answer, Cancel, CardReader, Output, Probe, Reask, Restore,
    StreamParser, TurnCall, Upstream, AGENT_PARAMS,
};

/// The surface a client speaks (its request and response wire format).
pub fn surface(protocol: Protocol) -> &'static dyn Surface {
    adapter(protocol).0
}

/// The A2A surface whose agent cards list Tether's gRPC interface as `advertise_grpc`
/// says (`surface(Protocol::A2a)` is `AdvertiseGrpc::Auto`'s).
pub fn a2a_surface(advertise_grpc: AdvertiseGrpc) -> &'static dyn Surface {
    match advertise_grpc {
        AdvertiseGrpc::Auto => &a2a::A2aSurface::AUTO,
        AdvertiseGrpc::Always => &a2a::A2aSurface::ALWAYS,
        AdvertiseGrpc::Never => &a2a::A2aSurface::NEVER,
    }
}

/// The adapter for an agent that speaks `protocol`, called over `transport` (only A2A
/// agents are called over gRPC or pinned to JSON-RPC v0.3; configuration refuses it for
/// the others).
pub fn upstream(protocol: Protocol, transport: AgentTransport) -> &'static dyn Upstream {
    match (protocol, transport) {
        (Protocol::A2a, AgentTransport::Grpc) => &a2a::A2aUpstream::GRPC,
        (Protocol::A2a, AgentTransport::JsonRpc03) => &a2a::A2aUpstream::JSONRPC_V03,
        _ => adapter(protocol).1,
    }
}

/// Each protocol's client surface and upstream adapter: the one place a protocol is
/// bound to its code.
fn adapter(protocol: Protocol) -> (&'static dyn Surface, &'static dyn Upstream) {
    match protocol {
        Protocol::OpenAiChat => (&chat::ChatSurface, &chat::ChatUpstream),
        Protocol::OpenAiResponses => (&responses::ResponsesSurface, &responses::ResponsesUpstream),
        Protocol::A2a => (&a2a::A2aSurface::AUTO, &a2a::A2aUpstream::JSONRPC),
        Protocol::Adk => (&adk::AdkSurface, &adk::AdkUpstream),
        Protocol::LangGraph => (&langgraph::LangGraphSurface, &langgraph::LangGraphUpstream),
    }
}
