//! The upstream side of an adapter: building the agent's request from the
//! projection plus the new turn, and parsing its response into `Output`s.

use serde_json::Value;
use session_log::Event;

use crate::item::Item;
use crate::protocol::Protocol;
use crate::turn::TurnRequest;

/// Terminal `run_status` metadata: the agent's [`Output::Answered`].
pub const AGENT_PARAMS: &str = "agent_params";

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
    /// A transcript item with metadata recorded beside it (the agent's own ids or author,
    /// which a later restore needs).
    ItemWith(Item, Value),
    /// One event in the agent's own protocol (an A2A task, status or artifact update, an
    /// ADK event), recorded verbatim as an `agent_event`; a surface that speaks the agent's
    /// protocol renders it back as it came.
    Frame(Value),
    /// The agent's own handle for this run (an A2A task id): cancel requests name it, and
    /// clients find the run by it.
    AgentRef(String),
    /// What the agent said it used for its answer that the client's response object shows
    /// too (a Responses agent's `service_tier`, `temperature`, `text`, …): recorded on the
    /// run's terminal status as [`AGENT_PARAMS`], and shown over the request's values.
    Answered(serde_json::Map<String, Value>),
    /// The agent said the turn is complete (`finish_reason`, `[DONE]` or
    /// `response.completed`). `usage` is the agent's token usage, when given.
    Done {
        usage: Option<Value>,
    },
}

/// How Tether reaches an agent: HTTP at `upstream`, or gRPC (A2A's `a2a_upstream_transport
/// = "grpc"`) at the agent's gRPC address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AgentTransport {
    #[default]
    Http,
    Grpc,
    /// HTTP at `upstream`, A2A JSON-RPC v0.3 whatever the client speaks (an A2A agent that
    /// speaks only v0.3: `a2a_upstream_transport = "jsonrpc-0.3"`, or a card that says so).
    JsonRpc03,
}

/// One request to the agent: an HTTP request below the agent's base URL, or, with `grpc`,
/// a gRPC call to the agent's gRPC address (`path` is then `/package.Service/Method`). The
/// gateway adds the host, content type and length (the gRPC framing), its `x-account-id`,
/// and the configured upstream headers.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRequest {
    pub method: &'static str,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Headers of the protocol's own (`A2A-Version`, `Accept`).
    pub headers: Vec<(String, String)>,
    /// A JSON body.
    pub body: Option<Value>,
    /// The request message of a gRPC call, serialized (the gateway frames it). Its answer
    /// comes as the response messages, framed, followed by the call's status as a gRPC-Web
    /// trailers frame (see `crate::grpc::Deframer`).
    pub grpc: Option<Vec<u8>>,
}

impl AgentRequest {
    pub fn post(path: impl Into<String>, body: Value) -> Self {
        AgentRequest {
            method: "POST",
            path: path.into(),
            headers: Vec::new(),
            body: Some(body),
            grpc: None,
        }
    }

    pub fn get(path: impl Into<String>) -> Self {
        AgentRequest {
            method: "GET",
            path: path.into(),
            headers: Vec::new(),
            body: None,
            grpc: None,
        }
    }

    /// A gRPC call of `path` (`/package.Service/Method`) with a serialized message.
    pub fn grpc(path: impl Into<String>, message: Vec<u8>) -> Self {
        AgentRequest {
            method: "POST",
            path: path.into(),
            headers: Vec::new(),
            body: None,
            grpc: Some(message),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// What an adapter knows when it calls the agent for one turn.
#[derive(Clone, Copy, Debug)]
pub struct TurnCall<'a> {
    pub account_id: &'a str,
    pub session_id: &'a str,
    pub run_id: &'a str,
    /// The session's projection before this turn's input.
    pub history: &'a [Item],
    /// The session's history before this turn (`session_log::History`: transcript and
    /// `run_status` events, a fork's inherited ones first, each naming its own session),
    /// for what the adapter recorded earlier in their metadata (`agent_ref` on terminal
    /// statuses, an item's author).
    pub events: &'a [Event],
    pub turn: &'a TurnRequest,
    pub default_model: &'a str,
}

impl TurnCall<'_> {
    /// The agent's handle for the latest earlier run of this session that reported one.
    /// A fork's inherited runs do not count: the agent never saw the fork, so its first
    /// turn restores it like a forgotten session.
    pub fn last_agent_ref(&self) -> Option<&str> {
        self.events
            .iter()
            .rev()
            .filter(|e| e.session_id == self.session_id)
            .find_map(|e| e.metadata.get("agent_ref").and_then(Value::as_str))
    }
}

/// Whether the agent still knows the session, asked before the turn is sent.
#[derive(Clone, Debug, PartialEq)]
pub enum Probe {
    /// Nothing to ask: send the turn (a restore may still follow a "forgot" answer).
    Skip,
    /// Send this first; `Upstream::forgot` judges the answer.
    Ask(AgentRequest),
    /// The agent cannot know the session (there is history but no handle): restore.
    Restore,
}

/// How to put a session back into an agent that forgot it.
#[derive(Clone, Debug, PartialEq)]
pub struct Restore {
    /// Sent in order before the turn; each must succeed.
    pub before: Vec<AgentRequest>,
    /// The turn's request to send after them.
    pub request: AgentRequest,
    /// The turn answers a request the session's last run ended waiting on, which lived
    /// only in the agent's memory (an ADK confirmation, a kagent tool approval): the agent
    /// is asked again, and the turn goes to what it asks anew (`Upstream::readdress`).
    pub reask: Option<Reask>,
}

/// Asking the agent again what a restored session was waiting on.
#[derive(Clone, Debug, PartialEq)]
pub struct Reask {
    /// The waiting run's input, sent again after `Restore::before`; its answer is read
    /// whole and must end waiting on the same request as before.
    pub request: AgentRequest,
    /// The action the waiting run ended on (`crate::approval`).
    pub pending: Value,
}

/// What Tether reads from the agent's own description of itself (an A2A agent card): a
/// request to send over HTTP at `upstream`, and what its answer (parsed JSON) says.
/// The gateway keeps the answer a while and reads it again, so that a restarted agent's
/// new card is found.
#[derive(Clone)]
pub struct CardReader {
    pub request: AgentRequest,
    /// Where the agent serves gRPC (`host:port`), for an adapter that calls it over gRPC.
    pub grpc_address: Option<fn(&Value) -> Option<String>>,
    /// The path (and query) an HTTP request goes to instead of its own, as the card says;
    /// `None` to keep it (the card lists nothing for the request's binding and version).
    pub relocate: fn(&Value, &AgentRequest) -> Option<String>,
    /// The adapter to use instead when the card says the agent speaks only an older
    /// version of the protocol.
    pub older: Option<Older>,
}

/// An older version of the protocol: whether a card offers only it, and the adapter that
/// speaks it.
#[derive(Clone, Copy)]
pub struct Older {
    pub only: fn(&Value) -> bool,
    pub upstream: &'static dyn Upstream,
}

/// An answer from the agent read whole: HTTP status, content type, body.
pub type Answer = (u16, String, Vec<u8>);

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

    /// The turn's request to the agent. A stateless agent (OpenAI) gets the projection
    /// followed by the new input, streaming, never naming a stored conversation; a
    /// stateful one (A2A, ADK) gets the client's request, addressed to the session.
    fn request(&self, call: &TurnCall) -> AgentRequest;

    /// A parser for the agent's response body with the given content type (SSE when it
    /// contains `text/event-stream`, otherwise one JSON document).
    fn parser(&self, call: &TurnCall, content_type: &str) -> Box<dyn StreamParser>;

    /// Asked before the turn: does the agent still know the session?
    fn probe(&self, _call: &TurnCall) -> Probe {
        Probe::Skip
    }

    /// Whether this answer (the whole body, to the probe or to the turn's request) says
    /// the agent no longer knows the session.
    fn forgot(&self, _status: u16, _body: &[u8]) -> bool {
        false
    }

    /// How to restore the session from its history; `None` when the protocol cannot.
    fn restore(&self, _call: &TurnCall) -> Option<Restore> {
        None
    }

    /// The turn's request addressed to `asked`, the action the agent ended waiting on when
    /// asked again (`Restore::reask`) in place of the one the turn answers.
    fn readdress(&self, _call: &TurnCall, _asked: &Value) -> Option<AgentRequest> {
        None
    }

    /// How to tell the agent to stop this turn's run, taken from the turn when the run
    /// starts so that nothing else of the turn is kept while it streams; `None` when the
    /// protocol has no cancel.
    fn cancel(&self, _turn: &TurnRequest) -> Option<Cancel> {
        None
    }

    /// How to read the agent's card: where it serves each binding and version.
    fn card_reader(&self) -> Option<CardReader> {
        None
    }

    /// A request the client's surface forwards (`Route::Forward`), in the transport the
    /// agent is called over.
    fn forwarded(&self, request: &AgentRequest) -> AgentRequest {
        request.clone()
    }

    /// The answer to a `forwarded` request, as the surface that made `original` reads it.
    fn forwarded_answer(&self, _original: &AgentRequest, answer: Answer) -> Answer {
        answer
    }
}

/// Builds the request that tells the agent to stop the run it knows as the given
/// handle (the run's `agent_ref`).
pub type Cancel = Box<dyn Fn(&str) -> AgentRequest + Send + Sync>;

/// A stateless agent (the OpenAI APIs): each turn is one POST to `PATH` carrying the
/// whole history, answered by one body; nothing to probe, restore or cancel.
pub(crate) trait Stateless: Send + Sync {
    const PROTOCOL: Protocol;
    /// Where the agent serves the protocol.
    const PATH: &'static str;

    /// JSON body of the agent request: `history` (the projection) followed by the
    /// turn's new input, always streaming, never naming a stored conversation.
    fn build_request(&self, history: &[Item], turn: &TurnRequest, default_model: &str) -> Value;

    /// A parser for the agent's response body with the given content type.
    fn body_parser(&self, content_type: &str) -> Box<dyn StreamParser>;
}

impl<T: Stateless> Upstream for T {
    fn protocol(&self) -> Protocol {
        T::PROTOCOL
    }

    fn request(&self, call: &TurnCall) -> AgentRequest {
        let body = self.build_request(call.history, call.turn, call.default_model);
        AgentRequest::post(T::PATH, body)
    }

    fn parser(&self, _call: &TurnCall, content_type: &str) -> Box<dyn StreamParser> {
        self.body_parser(content_type)
    }
}
