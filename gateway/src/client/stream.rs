//! Serving a subscription to a client: committed events in, SSE frames out, until the
//! stream's last event, a deadline, or the client leaving (which never affects the run).

use bytes::Bytes;
use pingora::proxy::Session;
use runtime_adapter::cursor::{frame_number, Resume};
use runtime_adapter::sse::SseFrame;
use runtime_adapter::StreamRenderer;
use session_log::{Event, Subscription};
use tokio::time::Instant;

/// Why a stream ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The renderer said the last frame was sent.
    Done,
    /// The client closed its connection (or a write to it failed).
    ClientGone,
    /// The deadline passed; the client re-subscribes from its last seq.
    Deadline,
    /// The log could not be read.
    LogUnavailable,
}

/// What to send for one event, and whether it ends the stream.
pub struct Step {
    pub frames: Vec<SseFrame>,
    pub last: bool,
}

/// Frames for one event; the terminal event also gets the renderer's closing frames.
pub fn render_step(renderer: &mut dyn StreamRenderer, event: &Event) -> Step {
    let mut frames = renderer.render(event);
    let last = event.is_terminal();
    if last {
        frames.extend(renderer.end());
    }
    Step { frames, last }
}

/// A step of a run replayed from its start to a client resuming at `after` (from the
/// start when `None`): the frames it already has are not sent again, and only the end of
/// `invocation_id`, the run's latest invocation, ends the stream (an earlier one's end is
/// followed by its resume).
pub fn replay_step(
    renderer: &mut dyn StreamRenderer,
    event: &Event,
    after: Option<Resume>,
    invocation_id: &str,
) -> Step {
    let mut step = render_step(renderer, event);
    if let Some(after) = after {
        step.frames
            .retain(|f| !after.seen(f.id.as_deref().and_then(frame_number), event.seq));
    }
    step.last = step.last && event.invocation_id.as_deref() == Some(invocation_id);
    step
}

/// Waits for the next committed event, watching for the client leaving and the deadline.
pub async fn next_event(
    session: &mut Session,
    events: &mut Subscription,
    watch_client: &mut bool,
    deadline: Option<Instant>,
) -> Result<std::sync::Arc<Event>, End> {
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            next = events.next() => return match next {
                Ok(Some(event)) => Ok(event),
                Ok(None) | Err(_) => Err(End::LogUnavailable),
            },
            gone = session.read_body_or_idle(true), if *watch_client => match gone {
                Err(_) => return Err(End::ClientGone),
                // Unexpected bytes from the client: stop watching rather than spin.
                Ok(_) => *watch_client = false,
            },
            _ = &mut sleep => return Err(End::Deadline),
        }
    }
}

/// Streams rendered events to the client (whose SSE header is already sent).
pub async fn pump(
    session: &mut Session,
    events: &mut Subscription,
    deadline: Option<Instant>,
    mut render: impl FnMut(&Event) -> Step,
) -> End {
    let mut text = String::new();
    pump_encoded(session, events, deadline, |event, out| {
        let Step { frames, last } = render(event);
        text.clear();
        for frame in &frames {
            frame.encode(&mut text);
        }
        out.extend_from_slice(text.as_bytes());
        last
    })
    .await
}

/// Like [`pump`], for a renderer that appends an event's wire form (whole SSE frames) to
/// `out` itself and says whether it was the last: a replay then builds no frame values.
pub async fn pump_encoded(
    session: &mut Session,
    events: &mut Subscription,
    deadline: Option<Instant>,
    render: impl FnMut(&Event, &mut Vec<u8>) -> bool,
) -> End {
    pump_with(session, events, deadline, true, render).await
}

/// Like [`pump_encoded`]; with `ends_body` false the last write leaves the response open
/// for the caller to end (a gRPC call's trailers).
pub async fn pump_with(
    session: &mut Session,
    events: &mut Subscription,
    deadline: Option<Instant>,
    ends_body: bool,
    mut render: impl FnMut(&Event, &mut Vec<u8>) -> bool,
) -> End {
    let mut watch_client = true;
    // The size of the last write, to size the next one's buffer without regrowing it.
    let mut size = 0;
    loop {
        let event = match next_event(session, events, &mut watch_client, deadline).await {
            Ok(event) => event,
            Err(end) => return end,
        };
        let mut out = Vec::with_capacity(size);
        let mut last = render(&event, &mut out);
        let mut newest = event.created_at;
        // Events already read from the log (a replay page) go out in one write, up to a
        // bound, instead of one body piece each.
        while !last && out.len() < BATCH_BYTES {
            let Some(event) = events.ready() else { break };
            last = render(&event, &mut out);
            newest = event.created_at;
        }
        if !out.is_empty() || last {
            size = out.len().min(BATCH_BYTES + BATCH_BYTES / 4);
            if session
                .write_response_body(Some(Bytes::from(out)), last && ends_body)
                .await
                .is_err()
            {
                return End::ClientGone;
            }
            crate::metrics::METRICS.forwarded(newest);
        }
        if last {
            return End::Done;
        }
    }
}

/// A write stops taking already-read events once it holds this many bytes.
const BATCH_BYTES: usize = 128 * 1024;

/// Writes frames in one body piece; `last` ends the response.
pub async fn write_frames(
    session: &mut Session,
    frames: &[SseFrame],
    last: bool,
) -> pingora::Result<()> {
    let mut out = String::new();
    for frame in frames {
        frame.encode(&mut out);
    }
    session
        .write_response_body(Some(Bytes::from(out)), last)
        .await
}
