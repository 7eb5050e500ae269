//! How Tether's own answer reaches the client: over HTTP (JSON bodies, SSE streams), or
//! as a gRPC call's messages and status. Handlers write through a `Reply` and need not
//! know which; what a surface renders (JSON values, SSE frames of JSON) is the same.

use pingora::proxy::Session;
use pingora::Result;
use runtime_adapter::grpc::{Code, Status};
use runtime_adapter::sse::SseFrame;
use runtime_adapter::Surface;
use serde_json::Value;
use session_log::{Event, Subscription};
use tokio::time::Instant;

use super::grpc::{self, GrpcReply};
use super::respond;
use super::stream::{self, End, Step};
use crate::error::ApiError;

pub enum Reply {
    Http,
    Grpc(GrpcReply),
}

impl Reply {
    /// How to answer this request: as a gRPC call when it is one of a service `surface`
    /// serves, otherwise over HTTP.
    pub fn for_request(session: &Session, surface: &dyn Surface) -> Reply {
        match surface.grpc() {
            Some(service) if grpc::is_call(session) => {
                Reply::Grpc(GrpcReply::new(service, session.req_header().uri.path()))
            }
            _ => Reply::Http,
        }
    }

    pub fn is_grpc(&self) -> bool {
        matches!(self, Reply::Grpc(_))
    }

    /// A whole answer: a JSON body with its status, or one message and the call's status
    /// (a body that is an error, `{"error": …}`, is the status).
    pub async fn json(
        &mut self,
        session: &mut Session,
        status: u16,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> Result<()> {
        match self {
            Reply::Http => respond::json(session, status, body, headers).await,
            Reply::Grpc(call) => call.answer(session, status, body, headers).await,
        }
    }

    /// Tether's own error, in `surface`'s format or as a status.
    pub async fn error(
        &mut self,
        session: &mut Session,
        e: &ApiError,
        surface: &dyn Surface,
        headers: &[(&str, &str)],
    ) -> Result<()> {
        match self {
            Reply::Http => e.send(session, surface, headers).await,
            Reply::Grpc(call) => call.refuse(session, e, headers).await,
        }
    }

    /// Starts a stream: SSE, or the call's headers.
    pub async fn stream_start(
        &mut self,
        session: &mut Session,
        headers: &[(&str, &str)],
    ) -> Result<()> {
        match self {
            Reply::Http => respond::sse_start(session, headers).await,
            Reply::Grpc(call) => call.start(session, headers).await,
        }
    }

    /// Writes frames; `last` ends the stream (a call with its status).
    pub async fn frames(
        &mut self,
        session: &mut Session,
        frames: &[SseFrame],
        last: bool,
    ) -> Result<()> {
        let Reply::Grpc(call) = self else {
            return stream::write_frames(session, frames, last).await;
        };
        let mut out = Vec::new();
        let ending = call.encode(frames, &mut out);
        if !out.is_empty() {
            session.write_response_body(Some(out.into()), false).await?;
        }
        match ending {
            Some(status) => call.finish(session, &status).await,
            None if last => call.finish(session, &Status::new(Code::Ok, "")).await,
            None => Ok(()),
        }
    }

    /// Ends a started stream that cannot go on with Tether's error: an SSE error event in
    /// `surface`'s format, or the call's status.
    pub async fn fail_stream(
        &mut self,
        session: &mut Session,
        e: &ApiError,
        surface: &dyn Surface,
    ) {
        match self {
            Reply::Http => {
                let body = surface.error_body(&e.message, e.kind, None, Some(e.code));
                let _ = stream::write_frames(session, &[SseFrame::json(&body)], true).await;
            }
            Reply::Grpc(call) => {
                let status = Status::new(Code::from_http(e.status), e.message.clone());
                let _ = call.finish(session, &status).await;
            }
        }
    }

    /// Streams rendered events (see `stream::pump`) until the last, a deadline, or the
    /// client leaving; a call ends with its status (`UNAVAILABLE` when the stream stops
    /// before its end: the client subscribes again). A stream the log cannot feed ends with
    /// that error (`fail_stream`).
    pub async fn pump(
        &mut self,
        session: &mut Session,
        surface: &dyn Surface,
        events: &mut Subscription,
        deadline: Option<Instant>,
        render: impl FnMut(&Event) -> Step,
    ) -> End {
        let end = match self {
            Reply::Http => stream::pump(session, events, deadline, render).await,
            Reply::Grpc(call) => pump_call(call, session, events, deadline, render).await,
        };
        if end == End::LogUnavailable {
            self.fail_stream(session, &ApiError::log_unavailable(), surface)
                .await;
        }
        end
    }
}

/// `Reply::pump` for a gRPC call: messages, then the status its end calls for.
async fn pump_call(
    call: &mut GrpcReply,
    session: &mut Session,
    events: &mut Subscription,
    deadline: Option<Instant>,
    mut render: impl FnMut(&Event) -> Step,
) -> End {
    let mut ending = None;
    let end = stream::pump_with(session, events, deadline, false, |event, out| {
        let step = render(event);
        ending = call.encode(&step.frames, out);
        ending.is_some() || step.last
    })
    .await;
    let status = match end {
        End::Done => ending.unwrap_or_else(|| Status::new(Code::Ok, "")),
        End::Deadline => Status::new(
            Code::Unavailable,
            "the stream reached its time limit before the task ended; subscribe again",
        ),
        End::LogUnavailable | End::ClientGone => return end,
    };
    let _ = call.finish(session, &status).await;
    end
}
