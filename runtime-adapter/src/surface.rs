//! The client side of an adapter: parsing a client's request into a `TurnRequest`, and
//! rendering committed log events back in the client's own wire format.

use serde_json::Value;
use session_log::{Event, EventType, RunStatus};

use crate::cursor::FrameId;
use crate::grpc::GrpcService;
use crate::sse::SseFrame;
use crate::turn::{InputError, TurnRequest};
use crate::upstream::AgentRequest;

/// What a renderer needs to know about the run it renders.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub run_id: String,
    pub session_id: String,
    pub model: String,
    /// Unix seconds.
    pub created_at: i64,
    /// What the surface kept from the client's request to answer it in kind (an A2A
    /// JSON-RPC id and protocol version); `Null` when it needs nothing.
    pub client: Value,
}

/// A client request to a path the surface claims, with its body read.
#[derive(Clone, Copy, Debug)]
pub struct ClientRequest<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
    /// The authenticated account.
    pub account_id: &'a str,
}

impl ClientRequest<'_> {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    /// A reconnecting client's cursor on the stateful protocols' surfaces: the SSE
    /// `Last-Event-ID` (the id of the last frame it got) as the frame number it names,
    /// when it is one Tether could have sent, or `-1` (before the first: the whole stream,
    /// asked for explicitly, which A2A needs to replay a finished task); otherwise the
    /// stream starts over, as those protocols' own servers do.
    pub fn last_event_id(&self) -> Option<i64> {
        let id = self.header("Last-Event-ID")?;
        if id.trim() == "-1" {
            return Some(-1);
        }
        crate::cursor::frame_number(id)
    }

    /// The first value of a query-string parameter, decoded as a form encodes it.
    pub fn query_param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query?.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// What a claimed client request asks the gateway to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// Start a run.
    Run(TurnRequest),
    /// Start a run in the session of the run the agent knows as `agent_ref` (an A2A
    /// message that continues a task by its `taskId` alone): `Run` with that session
    /// named, as if the client had named it; `not_found` when the caller's account has no
    /// such run (nothing reaches the agent or the log).
    RunInTask {
        agent_ref: String,
        turn: TurnRequest,
        not_found: (u16, Value),
    },
    /// Replay the run the agent knows as `agent_ref` from the log after the frame whose id
    /// is `last_event_id` (the `Last-Event-ID` of a reconnecting client; from the start
    /// without one), then follow it live to its end. `client` becomes `RunInfo::client`.
    ///
    /// For this and the other task routes, `not_found` (status and body) answers when the
    /// caller's account has no such run. The agent is not asked: every task started
    /// through Tether is in its log, and a task it did not record belongs to no account
    /// (asking would hand one account another's task).
    Subscribe {
        agent_ref: String,
        last_event_id: Option<i64>,
        client: Value,
        not_found: (u16, Value),
    },
    /// Cancel the run the agent knows as `agent_ref` (the agent is told by the run's
    /// adapter), then answer with `Surface::snapshot`.
    ///
    /// `ask_agent`: the client's cancel as it goes to the agent, sent (and its answer
    /// relayed) when the run has ended but the protocol's task has not
    /// (`Surface::task_waits`: an A2A task waiting for input), so the agent
    /// decides as it would without Tether.
    Cancel {
        agent_ref: String,
        client: Value,
        not_found: (u16, Value),
        ask_agent: Option<AgentRequest>,
    },
    /// Answer with the run's `Surface::snapshot` from the log.
    Get {
        agent_ref: String,
        client: Value,
        not_found: (u16, Value),
    },
    /// Wait for the run's latest invocation to end, then answer with its
    /// `Surface::snapshot` (LangGraph's `…/runs/{run_id}/join`).
    Join {
        agent_ref: String,
        client: Value,
        not_found: (u16, Value),
    },
    /// Send to the agent and relay its answer (through `Surface::rewrite_forwarded`).
    Forward(AgentRequest),
    /// A request about one run the agent knows as `agent_ref` (an A2A task's push
    /// notification configs): sent as `Forward` when the caller's account has that run.
    /// Otherwise `unowned` is sent instead, the same request about a task no one has
    /// (`UNOWNED_TASK`): the agent's refusal of it is relayed, since an agent gives its
    /// reason to refuse the operation as such (push notifications unsupported) before
    /// looking the task up, and reveals nothing of another account's; if the agent does
    /// not refuse it, `not_found` answers.
    ForwardOwned {
        agent_ref: String,
        request: AgentRequest,
        unowned: AgentRequest,
        not_found: (u16, Value),
    },
    /// A listing of runs (A2A `ListTasks`): sent as `Forward`, and of the runs the agent
    /// lists (`Surface::listed_runs`) only the caller's account's are relayed.
    ForwardListing(AgentRequest),
    /// Answer at once with this status and JSON body.
    Reply { status: u16, body: Value },
}

/// The task id `Route::ForwardOwned`'s `unowned` request names: one no agent has.
pub const UNOWNED_TASK: &str = "tether-unowned-task-00000000000000000000000000000000";

/// Renders a run's committed events as SSE frames. Every frame carries an `id:`, the
/// cursor a reconnect resumes after, given by [`Numbered`]: on Chat and Responses a `v1`
/// frame id (`crate::cursor`: its number in the run's stream from 0, which is Responses'
/// `sequence_number` too, and the log seq it leaves a `SubscribeRunEvents` client at);
/// on the other surfaces the frame's number alone. Stateful: feed events in seq order,
/// from the run's first (a reconnecting client's renderer is fed the run again from its
/// start and the frames up to its cursor are discarded, so the ids match the ones it
/// saw).
pub trait StreamRenderer: Send {
    fn render(&mut self, event: &Event) -> Vec<SseFrame>;
    /// Frames that end the stream after the terminal event (e.g. `data: [DONE]`).
    fn end(&mut self) -> Vec<SseFrame>;
}

/// A renderer whose frames get their `id:` here: each its number in the run's stream,
/// alone or as a `v1` frame id.
pub struct Numbered<R> {
    inner: R,
    next: i64,
    frame_ids: bool,
    /// The seq of the last event rendered.
    seq: i64,
}

impl<R: StreamRenderer + 'static> Numbered<R> {
    /// Frame ids that are the frame's number (A2A, ADK, LangGraph).
    pub fn boxed(inner: R) -> Box<dyn StreamRenderer> {
        Box::new(Numbered {
            inner,
            next: 0,
            frame_ids: false,
            seq: 0,
        })
    }

    /// `v1` frame ids (Chat, Responses): one cursor for the surface and
    /// `SubscribeRunEvents`.
    pub fn with_frame_ids(inner: R) -> Box<dyn StreamRenderer> {
        Box::new(Numbered {
            inner,
            next: 0,
            frame_ids: true,
            seq: 0,
        })
    }
}

impl<R> Numbered<R> {
    fn number(&mut self, frames: Vec<SseFrame>) -> Vec<SseFrame> {
        let count = frames.len();
        frames
            .into_iter()
            .enumerate()
            .map(|(i, mut f)| {
                let frame = self.next;
                self.next += 1;
                f.id = Some(if self.frame_ids {
                    // Until its last frame is out, the event is not all seen.
                    let after_seq = if i + 1 == count {
                        self.seq
                    } else {
                        self.seq - 1
                    };
                    let id = FrameId {
                        after_seq: after_seq.max(0),
                        frame,
                    };
                    id.to_string()
                } else {
                    frame.to_string()
                });
                f
            })
            .collect()
    }
}

impl<R: StreamRenderer> StreamRenderer for Numbered<R> {
    fn render(&mut self, event: &Event) -> Vec<SseFrame> {
        self.seq = event.seq;
        let frames = self.inner.render(event);
        self.number(frames)
    }

    fn end(&mut self) -> Vec<SseFrame> {
        let frames = self.inner.end();
        self.number(frames)
    }
}

/// Tether's refusal of a turn before it started, as [`Surface::refusal`] is told it.
#[derive(Clone, Copy, Debug)]
pub struct Refused<'a> {
    /// The HTTP status Tether's own error has (429, 413, 400, ...).
    pub status: u16,
    /// Its code (`quota_exceeded`, `unsupported_attachment_type`, ...).
    pub code: &'a str,
    pub message: &'a str,
    /// What it names: the quota, the field.
    pub param: Option<&'a str>,
}

pub trait Surface: Send + Sync {
    /// Whether the surface answers this method and path (decided before the body is
    /// read). The OpenAI surfaces are routed by the gateway itself and claim nothing.
    fn claims(&self, _method: &str, _path: &str) -> bool {
        false
    }

    /// The gRPC service the surface also serves (A2A's `lf.a2a.v1.A2AService`): its calls
    /// are claimed and routed like the surface's other requests, with the request message,
    /// unframed, as the body, and answered through this service's encoding.
    fn grpc(&self) -> Option<&'static dyn GrpcService> {
        None
    }

    /// What a claimed request asks for.
    fn route(&self, req: &ClientRequest) -> Route {
        match self.parse_request(req.body, req.header("x-session-id")) {
            Ok(turn) => Route::Run(turn),
            Err(e) => Route::Reply {
                status: 400,
                body: self.error_body(
                    &e.message,
                    "invalid_request_error",
                    e.param.as_deref(),
                    Some(e.code),
                ),
            },
        }
    }

    /// Parses a request body (`session_header` is the `x-session-id` request header).
    fn parse_request(
        &self,
        body: &[u8],
        session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError>;

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer>;

    /// The whole non-streaming response body for a finished run's events.
    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value;

    /// Status and body answering a non-streaming run whose events end with its terminal
    /// status: the final body when it completed, otherwise a 502 naming the error.
    fn final_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        let terminal = events.last().and_then(|e| e.run_status());
        if terminal.is_some_and(RunStatus::is_answered) {
            return (200, self.final_body(run, events));
        }
        let (code, message) = run_error(events, terminal);
        (
            502,
            self.error_body(&message, "upstream_error", None, Some(&code)),
        )
    }

    /// The answer to a non-streaming run given before the run ends, once its events so far
    /// allow one (LangGraph's background run is answered with the run as soon as the agent
    /// named it); the run goes on without the client. `None`: wait for the end.
    fn early_response(&self, _run: &RunInfo, _events: &[Event]) -> Option<(u16, Value)> {
        None
    }

    /// A run's state as the client's protocol shows it (A2A `Task`), from its events so
    /// far, for `Route::Get` and `Route::Cancel`.
    fn snapshot(&self, run: &RunInfo, events: &[Event]) -> Value {
        self.final_body(run, events)
    }

    /// `snapshot` with the HTTP status it is answered with: an error in it (an A2A cancel
    /// of a finished task) is not a 200 where the client's binding gives errors their own.
    fn snapshot_response(&self, run: &RunInfo, events: &[Event]) -> (u16, Value) {
        (200, self.snapshot(run, events))
    }

    /// Whether the run ended and left the protocol's task open for more turns (an A2A
    /// task waiting for input): its cancel is the agent's to answer (`Route::Cancel`), and
    /// a subscription to it follows the task's next run (`Route::Subscribe`).
    fn task_waits(&self, _run: &RunInfo, _events: &[Event]) -> bool {
        false
    }

    /// For `Route::Subscribe` to a run whose task waits (`task_waits`): the frame the
    /// subscription starts with (A2A: the task as it stands) before the task's next run.
    fn waiting_frame(&self, _run: &RunInfo, _events: &[Event]) -> Option<SseFrame> {
        None
    }

    /// For `Route::Subscribe`: the refusal of a subscription to a run as its events stand,
    /// when the protocol refuses it (A2A: a task in a terminal state). `resuming`: the
    /// client named a cursor (`Last-Event-ID`), asking for the replay Tether offers
    /// beyond the protocol, which is never refused.
    fn subscribe_refusal(
        &self,
        _run: &RunInfo,
        _events: &[Event],
        _resuming: bool,
    ) -> Option<(u16, Value)> {
        None
    }

    /// A turn Tether refused before it started (`refused.code`: an input check's, e.g.
    /// `unsupported_attachment_type`, or `quota_exceeded`), as the client that sent it
    /// (`RunInfo::client`) is answered in its protocol's terms; `None`: Tether's error as
    /// `error_body` gives it.
    fn refusal(&self, _client: &Value, _refused: &Refused<'_>) -> Option<(u16, Value)> {
        None
    }

    /// The session a forwarded request deletes at the agent (ADK `DELETE …/sessions/{id}`),
    /// if it is one. Once the agent confirms, Tether cuts the session's history, so a
    /// later turn on that id is not restored into a session the client deleted.
    fn deletes_session(&self, _req: &ClientRequest) -> Option<String> {
        None
    }

    /// The body of a forwarded request's answer as the client should see it (the agent's
    /// addresses replaced by `public_url`, Tether's scoping of ids undone).
    fn rewrite_forwarded(&self, _req: &ClientRequest, _public_url: &str, body: Value) -> Value {
        body
    }

    /// The entries of a forwarded listing's answer (`Route::ForwardListing`, after
    /// `rewrite_forwarded`), one per run; the gateway keeps the caller's runs' entries.
    fn listed_runs<'b>(&self, _body: &'b mut Value) -> Option<&'b mut Vec<Value>> {
        None
    }

    /// The id the agent knows a listed run by (see `listed_runs`).
    fn listed_ref<'v>(&self, _entry: &'v Value) -> Option<&'v str> {
        None
    }

    /// A listing's answer once only the caller's runs are in it (counts restated).
    fn listing_scoped(&self, body: Value) -> Value {
        body
    }

    /// The surface's error body (`{"error": {"message", "type", "param", "code"}}`).
    fn error_body(
        &self,
        message: &str,
        kind: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Value {
        serde_json::json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
    }

    /// The client-visible id of a run (`resp_…`, `chatcmpl-…`); by default the run id
    /// itself (the stateful protocols name runs by the agent's own handles).
    fn response_id(&self, run_id: &str) -> String {
        run_id.to_owned()
    }

    /// The run id behind a client-visible response id, if it is one of ours (by default
    /// none: no client names a run by such an id).
    fn run_id(&self, _response_id: &str) -> Option<String> {
        None
    }
}

/// Sends `path` (plus the client's query) to the agent with `body`.
pub(crate) fn forward(
    req: &ClientRequest,
    method: &'static str,
    path: String,
    body: Option<Value>,
) -> Route {
    let path = match req.query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path,
    };
    Route::Forward(AgentRequest {
        method,
        path,
        headers: Vec::new(),
        body,
        grpc: None,
    })
}

/// A request method an agent API takes, as a `'static` name.
pub(crate) fn static_method(method: &str) -> Option<&'static str> {
    ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
        .into_iter()
        .find(|m| m.eq_ignore_ascii_case(method))
}

/// The error code and message of a run that did not complete: its last `error` event, or
/// its terminal status.
pub fn run_error(events: &[Event], terminal: Option<RunStatus>) -> (String, String) {
    events
        .iter()
        .rev()
        .find(|e| e.event_type == EventType::Error)
        .map(|e| {
            let s = |k: &str| {
                e.content
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            (s("code"), s("message"))
        })
        .unwrap_or_else(|| {
            let status = terminal.map(|s| s.as_str()).unwrap_or("failed");
            (status.to_owned(), format!("the run ended as {status}"))
        })
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;
    use session_log::{Event, EventType, NewEvent};

    use super::{ClientRequest, Numbered, StreamRenderer};
    use crate::sse::SseFrame;

    /// Two frames for every event, whatever ids it gives them, and a closing frame.
    struct Twice;

    impl StreamRenderer for Twice {
        fn render(&mut self, event: &Event) -> Vec<SseFrame> {
            let frame = SseFrame::data(event.seq.to_string()).with_id(event.seq);
            vec![frame.clone(), frame]
        }

        fn end(&mut self) -> Vec<SseFrame> {
            vec![SseFrame::data("[DONE]")]
        }
    }

    #[test]
    fn numbered_frames_count_from_0_across_events_and_the_end() {
        let mut r = Numbered::boxed(Twice);
        let mut frames = Vec::new();
        for seq in [5, 9] {
            let new = NewEvent::new("a", "s", EventType::AgentEvent, json!({}));
            frames.extend(r.render(&Event::committed(new, seq, Utc::now())));
        }
        frames.extend(r.end());
        let ids: Vec<_> = frames.iter().map(|f| f.id.as_deref().unwrap()).collect();
        assert_eq!(ids, ["0", "1", "2", "3", "4"]);
        let data: Vec<_> = frames.iter().map(|f| f.data.as_str()).collect();
        assert_eq!(data, ["5", "5", "9", "9", "[DONE]"]);
    }

    #[test]
    fn query_params_decode_as_forms_encode_them() {
        let req = ClientRequest {
            method: "GET",
            path: "/",
            query: Some("historyLength=2&q=a%20b+c&q=second&flag"),
            headers: &[],
            body: b"",
            account_id: "acct",
        };
        assert_eq!(req.query_param("historyLength").as_deref(), Some("2"));
        assert_eq!(req.query_param("q").as_deref(), Some("a b c"));
        assert_eq!(req.query_param("flag").as_deref(), Some(""));
        assert_eq!(req.query_param("missing"), None);
        let bare = ClientRequest { query: None, ..req };
        assert_eq!(bare.query_param("q"), None);
    }
}
