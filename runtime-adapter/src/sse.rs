//! Server-sent events: a parser that reassembles events across arbitrary chunk
//! boundaries, and the frame Tether writes.

/// One server-sent event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SseFrame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseFrame {
    pub fn data(data: impl Into<String>) -> Self {
        SseFrame {
            data: data.into(),
            ..Default::default()
        }
    }

    /// A frame whose data is `body` as JSON. `serde_json::to_string` writes straight into
    /// one buffer; `Value`'s `Display` goes through the formatter piece by piece, and this
    /// runs for every frame a run streams.
    pub fn json(body: &serde_json::Value) -> Self {
        Self::data(serde_json::to_string(body).expect("a JSON value always serialises"))
    }

    pub fn with_id(mut self, id: i64) -> Self {
        self.id = Some(id.to_string());
        self
    }

    pub fn with_event(mut self, event: &str) -> Self {
        self.event = Some(event.to_owned());
        self
    }

    /// Wire form, ending with the blank line.
    pub fn encode(&self, out: &mut String) {
        // Plain appends: `writeln!` goes through the formatting machinery for each line,
        // and this runs for every frame Tether sends.
        for (name, value) in [("event: ", &self.event), ("id: ", &self.id)] {
            if let Some(value) = value {
                out.push_str(name);
                out.push_str(value);
                out.push('\n');
            }
        }
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
}

/// Reassembles SSE events from body chunks. Lines end with LF, CRLF or CR; an event ends
/// at a blank line; comment lines (`:`) are skipped; fields other than data/event/id are
/// ignored.
#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
    frame: SseFrame,
    has_data: bool,
    /// Whether the last byte seen was a CR (so a following LF belongs to it).
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns every event completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseFrame> {
        let mut frames = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    if let Some(frame) = self.line(&line) {
                        frames.push(frame);
                    }
                }
                _ => self.buf.push(b),
            }
        }
        frames
    }

    /// Ends the stream: an event left without its blank line is returned if it has data.
    pub fn finish(&mut self) -> Option<SseFrame> {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            self.line(&line);
        }
        self.dispatch()
    }

    fn line(&mut self, line: &[u8]) -> Option<SseFrame> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(i) => (
                &line[..i],
                line[i + 1..].strip_prefix(' ').unwrap_or(&line[i + 1..]),
            ),
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.frame.data.push('\n');
                }
                self.frame.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.frame.event = Some(value.to_owned()),
            "id" => self.frame.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseFrame> {
        let frame = std::mem::take(&mut self.frame);
        std::mem::take(&mut self.has_data).then_some(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: fo").is_empty());
        let frames = p.feed(b"ur\n\nevent: x\r\ndata: a\r\ndata: b\r\n\r\n: ping\n\n");
        assert_eq!(
            frames,
            vec![
                SseFrame::data("four"),
                SseFrame {
                    event: Some("x".into()),
                    id: None,
                    data: "a\nb".into()
                }
            ]
        );
    }

    #[test]
    fn cr_split_from_lf_is_one_line_end() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: x\r").is_empty());
        assert_eq!(p.feed(b"\n\r\n"), vec![SseFrame::data("x")]);
    }

    #[test]
    fn unterminated_event_is_returned_at_finish() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: [DONE]").is_empty());
        assert_eq!(p.finish(), Some(SseFrame::data("[DONE]")));
    }

    #[test]
    fn encode_round_trips() {
        let mut out = String::new();
        SseFrame::data("a\nb")
            .with_id(7)
            .with_event("e")
            .encode(&mut out);
        assert_eq!(out, "event: e\nid: 7\ndata: a\ndata: b\n\n");
        assert_eq!(
            SseParser::new().feed(out.as_bytes()),
            vec![SseFrame::data("a\nb").with_id(7).with_event("e")]
        );
    }
}
