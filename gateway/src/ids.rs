//! Ids: the ones Tether makes (sessions, runs, invocations, checkpoints, uploads,
//! exchanges, requests), which client-chosen session ids it accepts, and the cursors a
//! reconnecting stream client sends.

use runtime_adapter::cursor::{Cursor, CursorError, Resume};

/// A new session, run, invocation or checkpoint id. Time-ordered (UUIDv7: milliseconds,
/// then 74 random bits), so the log's indexes, which lead with these ids, take new entries
/// at one edge instead of at random pages all over a large file.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Whether a client-chosen session id is acceptable: short, printable, no separators
/// that would make logs or URLs ambiguous.
pub fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

/// A client-supplied id (session, conversation, response, invocation, upload ref) that is
/// not acceptable: one error shape whatever the id, naming the field or header it came in.
#[derive(Debug, PartialEq, Eq)]
pub struct IdError {
    /// The field, parameter or header that held the id.
    pub field: String,
    pub message: String,
}

impl IdError {
    /// The 400 every surface writes in its own format.
    pub fn to_api(&self) -> crate::error::ApiError {
        crate::error::ApiError::new(400, "invalid_request_error", "invalid_id", &self.message)
            .with_param(&self.field)
    }
}

/// The one validator for client-supplied ids: 1-128 of letters, digits, `-`, `_`, `.`,
/// `:`. `field` names where the id came from, for the error.
pub fn client_id<'a>(field: &str, id: &'a str) -> Result<&'a str, IdError> {
    if valid_session_id(id) {
        Ok(id)
    } else {
        Err(IdError {
            field: field.to_owned(),
            message: format!(
                "{field} {id:?} is not a valid id: use 1-128 letters, digits, '-', '_', '.' or ':'"
            ),
        })
    }
}

/// The cursor a stream reconnect resumes after, for every surface that takes one: the
/// surface's query parameter `param` (`value`, when the request has it), else the
/// `Last-Event-ID` header an `EventSource` sends on reconnecting; `None` with neither (an
/// empty header is none), the stream from its start. Either is a bare number or a frame id
/// (`runtime_adapter::cursor`, which says what each means where), and an error names
/// where the bad value came from. `from_header` says which one it was.
pub fn stream_cursor(
    param: &str,
    value: Option<&str>,
    headers: &http::HeaderMap,
) -> Result<Option<StreamCursor>, IdError> {
    const HEADER: &str = "Last-Event-ID";
    let bad = |field: &str, value: &str| IdError {
        field: field.to_owned(),
        message: format!("{field} {CursorError}, got {value:?}"),
    };
    if let Some(value) = value {
        let cursor = Cursor::parse(value).map_err(|_| bad(param, value))?;
        return Ok(Some(StreamCursor {
            cursor,
            from_header: false,
        }));
    }
    let Some(header) = headers.get(HEADER) else {
        return Ok(None);
    };
    let value = header.to_str().map_err(|_| IdError {
        field: HEADER.to_owned(),
        message: format!("{HEADER} {CursorError}, got bytes that are not text"),
    })?;
    if value.trim().is_empty() {
        return Ok(None);
    }
    let cursor = Cursor::parse(value).map_err(|_| bad(HEADER, value))?;
    Ok(Some(StreamCursor {
        cursor,
        from_header: true,
    }))
}

/// A reconnecting client's cursor and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamCursor {
    pub cursor: Cursor,
    /// From `Last-Event-ID` rather than the surface's query parameter.
    pub from_header: bool,
}

impl StreamCursor {
    /// A bare number sent as `Last-Event-ID`: an id of a release before frame ids, whose
    /// meaning on Chat and Responses depends on which release streamed the run
    /// ([`StreamCursor::openai_resume`]).
    pub fn is_bare_header(self) -> bool {
        self.from_header && matches!(self.cursor, Cursor::Number(_))
    }

    /// Where a Chat or Responses run's replay resumes: after the frame a frame id or
    /// `starting_after` names. A bare `Last-Event-ID` is an id of a release before frame
    /// ids: a frame number when that release numbered frames (`frames_numbered`), else
    /// the release before it, a log seq (repeated across an event's frames), so after
    /// that event.
    pub fn openai_resume(self, frames_numbered: bool) -> Resume {
        match self.cursor {
            Cursor::Number(seq) if self.from_header && !frames_numbered => Resume::AfterSeq(seq),
            cursor => Resume::AfterFrame(cursor.frame()),
        }
    }
}

/// The migration that came with the release that numbered Chat and Responses frames with
/// bare numbers (the one before `v1` frame ids): a run started before this store took it
/// was streamed by the release before that, whose ids were log seqs.
pub const FRAME_NUMBERS_MIGRATION: &str = "idempotency keys";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_stream_cursor_is_the_query_parameter_else_the_header() {
        let at = |cursor, from_header| {
            Ok(Some(StreamCursor {
                cursor,
                from_header,
            }))
        };
        let mut headers = http::HeaderMap::new();
        assert_eq!(stream_cursor("starting_after", None, &headers), Ok(None));
        headers.insert("last-event-id", http::HeaderValue::from_static(" "));
        assert_eq!(stream_cursor("AfterSeqId", None, &headers), Ok(None));
        headers.insert("last-event-id", http::HeaderValue::from_static(" 7 "));
        assert_eq!(
            stream_cursor("AfterSeqId", None, &headers),
            at(Cursor::Number(7), true)
        );
        assert_eq!(
            stream_cursor("AfterSeqId", Some("3"), &headers),
            at(Cursor::Number(3), false)
        );
        headers.insert("last-event-id", http::HeaderValue::from_static("v1.9.4"));
        let frame = stream_cursor("AfterSeqId", None, &headers)
            .unwrap()
            .unwrap();
        assert_eq!(frame.openai_resume(false), Resume::AfterFrame(4));
        let bad = stream_cursor("starting_after", Some("-1"), &headers).unwrap_err();
        assert_eq!(bad.field, "starting_after");
        assert_eq!(
            bad.message,
            "starting_after must be a non-negative integer or a stream event id \
             (v1.<seq>.<frame>), got \"-1\""
        );
        headers.insert("last-event-id", http::HeaderValue::from_static("soon"));
        let bad = stream_cursor("starting_after", None, &headers).unwrap_err();
        assert_eq!(bad.field, "Last-Event-ID");
        headers.insert(
            "last-event-id",
            http::HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        let bad = stream_cursor("AfterSeqId", None, &headers).unwrap_err();
        assert_eq!(bad.field, "Last-Event-ID");
    }

    #[test]
    fn a_bare_last_event_id_on_chat_and_responses_is_an_earlier_release_seq() {
        let header = StreamCursor {
            cursor: Cursor::Number(5),
            from_header: true,
        };
        assert!(header.is_bare_header());
        assert_eq!(header.openai_resume(false), Resume::AfterSeq(5));
        assert_eq!(header.openai_resume(true), Resume::AfterFrame(5));
        let query = StreamCursor {
            from_header: false,
            ..header
        };
        assert!(!query.is_bare_header());
        assert_eq!(query.openai_resume(false), Resume::AfterFrame(5));
    }

    proptest! {
        #[test]
        fn client_ids_are_accepted_exactly_when_they_fit_the_rule(id in "\\PC{0,140}") {
            let fits = (1..=128).contains(&id.len())
                && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
            match client_id("x-session-id", &id) {
                Ok(got) => { prop_assert!(fits); prop_assert_eq!(got, id.as_str()); }
                Err(e) => {
                    prop_assert!(!fits);
                    prop_assert_eq!(e.field.as_str(), "x-session-id");
                    prop_assert!(e.message.starts_with("x-session-id "));
                }
            }
        }
    }
}
