//! One driver for reading an agent's response body, fed in arbitrary chunks: SSE events
//! reassembled and handed over one by one, or one JSON document handed over whole at the
//! end. The protocol's `BodyReader` says what each means; the Chat and Responses adapters
//! read their agents' answers through it.

use crate::sse::{SseFrame, SseParser};
use crate::upstream::{Output, StreamParser};

/// What a protocol makes of the pieces of its agent's answer.
pub(crate) trait BodyReader: Send {
    /// One event of a stream.
    fn frame(&mut self, frame: SseFrame, out: &mut Vec<Output>);

    /// The stream ended, after its last event.
    fn end(&mut self, _out: &mut Vec<Output>) {}

    /// The whole body of an answer that is not a stream.
    fn document(&mut self, body: &[u8], out: &mut Vec<Output>);
}

/// Whether a response's content type says its body is a stream of server-sent events.
pub(crate) fn is_event_stream(content_type: &str) -> bool {
    content_type
        .to_ascii_lowercase()
        .contains("text/event-stream")
}

pub(crate) struct BodyParser<R> {
    /// `None` while the body is read as one JSON document.
    sse: Option<SseParser>,
    /// The JSON document; for a stream read leniently, its start until an event arrives.
    body: Vec<u8>,
    any_frame: bool,
    /// For a lenient parser, how much of a stream's start is kept in case it is a JSON
    /// document after all; `None` when the content type is believed.
    sniff_limit: Option<usize>,
    reader: R,
}

impl<R: BodyReader> BodyParser<R> {
    /// Reads the body as its content type says.
    pub(crate) fn new(content_type: &str, reader: R) -> Self {
        BodyParser {
            sse: is_event_stream(content_type).then(SseParser::new),
            body: Vec::new(),
            any_frame: false,
            sniff_limit: None,
            reader,
        }
    }

    /// Also reads what an agent sent under the other content type: a JSON document (an
    /// error, typically) answering a streaming request, of which the first `sniff_limit`
    /// bytes are kept until an event shows the body is a stream; and a stream labelled
    /// as something else.
    pub(crate) fn lenient(content_type: &str, sniff_limit: usize, reader: R) -> Self {
        BodyParser {
            sniff_limit: Some(sniff_limit),
            ..Self::new(content_type, reader)
        }
    }

    fn frames(&mut self, frames: impl IntoIterator<Item = SseFrame>, out: &mut Vec<Output>) {
        for frame in frames {
            if !self.any_frame {
                self.any_frame = true;
                self.body = Vec::new();
            }
            self.reader.frame(frame, out);
        }
    }
}

impl<R: BodyReader> StreamParser for BodyParser<R> {
    fn feed(&mut self, bytes: &[u8]) -> Vec<Output> {
        let mut out = Vec::new();
        let Some(sse) = &mut self.sse else {
            self.body.extend_from_slice(bytes);
            return out;
        };
        if !self.any_frame
            && self
                .sniff_limit
                .is_some_and(|limit| self.body.len() < limit)
        {
            self.body.extend_from_slice(bytes);
        }
        let frames = sse.feed(bytes);
        self.frames(frames, &mut out);
        out
    }

    fn finish(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        let lenient = self.sniff_limit.is_some();
        let body = std::mem::take(&mut self.body);
        let start = body.trim_ascii_start();
        match &mut self.sse {
            None if lenient && (start.starts_with(b"data:") || start.starts_with(b"event:")) => {
                // A stream despite its content type.
                self.sse = Some(SseParser::new());
                out = self.feed(&body);
                out.extend(self.finish());
            }
            None => self.reader.document(&body, &mut out),
            Some(sse) => {
                let last = sse.finish();
                self.frames(last, &mut out);
                if lenient && !self.any_frame && start.starts_with(b"{") {
                    // Not a stream after all. (An empty or comment-only stream is simply
                    // an agent closing early.)
                    self.reader.document(&body, &mut out);
                } else {
                    self.reader.end(&mut out);
                }
            }
        }
        out
    }
}
