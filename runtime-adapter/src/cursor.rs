//! Stream cursors: the `id:` Tether gives a frame, and what a reconnecting client sends
//! back (`Last-Event-ID`, `AfterSeqId`, `starting_after`), read in one place.
//!
//! A Chat or Responses frame's id says what numbering it is in: `v1.<seq>.<frame>`, where
//! `<seq>` is the log seq after which the session's events are new to a client that saw
//! this frame (the seq of the event the frame renders when it is that event's last
//! frame, one less otherwise) and `<frame>` is the frame's number in the run's stream,
//! from 0 (its `sequence_number` on Responses). So the one id resumes exactly once on the
//! run's own surface (by frame) and on `SubscribeRunEvents` (by seq), and a later release
//! that numbers frames another way gives its ids another prefix and still reads these.
//!
//! A bare number is the form every earlier release sent, and it means what it meant
//! where it was sent: a position on `SubscribeRunEvents` (its own ids, all along), a
//! `sequence_number` as `starting_after`, a frame number on the A2A, ADK and LangGraph
//! surfaces, and a log seq as `Last-Event-ID` on Chat and Responses (their ids up to the
//! release before `v1`, repeated across an event's frames).

use std::fmt;

/// The prefix of a `v1` frame id.
const V1: &str = "v1.";

/// A cursor as a client wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// A bare number, read as the place it was sent to numbers things (module doc).
    Number(i64),
    /// A `v1` frame id.
    Frame(FrameId),
}

/// The place of one frame of a run's stream (a `v1` id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameId {
    /// The log seq after which the session's events are new to a client that saw this
    /// frame.
    pub after_seq: i64,
    /// The frame's number in the run's stream, from 0.
    pub frame: i64,
}

impl fmt::Display for FrameId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{V1}{}.{}", self.after_seq, self.frame)
    }
}

/// A cursor that is neither a bare non-negative number nor a frame id Tether makes.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("must be a non-negative integer or a stream event id (v1.<seq>.<frame>)")]
pub struct CursorError;

/// A decimal number from 0 up, nothing else (no sign, no spaces inside).
fn number(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Cursor {
    /// Reads a cursor (surrounding spaces ignored).
    pub fn parse(value: &str) -> Result<Cursor, CursorError> {
        let v = value.trim();
        if let Some(rest) = v.strip_prefix(V1) {
            let (seq, frame) = rest.split_once('.').ok_or(CursorError)?;
            let (after_seq, frame) = (number(seq).ok_or(CursorError)?, number(frame));
            return Ok(Cursor::Frame(FrameId {
                after_seq,
                frame: frame.ok_or(CursorError)?,
            }));
        }
        number(v).map(Cursor::Number).ok_or(CursorError)
    }

    /// The frame number this cursor names on a surface whose bare numbers are frame
    /// numbers (`starting_after`, the A2A, ADK and LangGraph surfaces).
    pub fn frame(self) -> i64 {
        match self {
            Cursor::Number(n) => n,
            Cursor::Frame(id) => id.frame,
        }
    }
}

/// Where a replayed run's stream resumes for a client: after a frame, or (the earlier
/// releases' Chat and Responses ids) after the frames of every event up to a seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    AfterFrame(i64),
    AfterSeq(i64),
}

impl Resume {
    /// Whether a replayed frame numbered `frame`, rendered from the event at `seq`, was
    /// already sent to the client.
    pub fn seen(self, frame: Option<i64>, seq: i64) -> bool {
        match self {
            Resume::AfterFrame(after) => frame.is_some_and(|n| n <= after),
            Resume::AfterSeq(after) => seq <= after,
        }
    }
}

/// The number of a frame Tether gave an id (a `v1` id or a bare frame number).
pub fn frame_number(id: &str) -> Option<i64> {
    Cursor::parse(id).ok().map(Cursor::frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frame_ids_say_their_form() {
        let id = FrameId {
            after_seq: 41,
            frame: 7,
        };
        assert_eq!(id.to_string(), "v1.41.7");
        assert_eq!(Cursor::parse(" v1.41.7 "), Ok(Cursor::Frame(id)));
        assert_eq!(Cursor::parse("12"), Ok(Cursor::Number(12)));
        for bad in [
            "", "-1", "+3", "1 2", "v1.", "v1.3", "v1.3.", "v1..3", "v1.-1.2", "v2.3.4", "soon",
            "v1.3.4.5",
        ] {
            assert_eq!(Cursor::parse(bad), Err(CursorError), "{bad:?}");
        }
        assert_eq!(frame_number("v1.41.7"), Some(7));
        assert_eq!(frame_number("3"), Some(3));
        assert_eq!(frame_number("x"), None);
    }

    #[test]
    fn a_resume_skips_what_was_seen() {
        assert!(Resume::AfterFrame(4).seen(Some(4), 100));
        assert!(!Resume::AfterFrame(4).seen(Some(5), 1));
        assert!(!Resume::AfterFrame(4).seen(None, 1));
        assert!(Resume::AfterSeq(9).seen(Some(50), 9));
        assert!(!Resume::AfterSeq(9).seen(Some(0), 10));
    }

    proptest! {
        #[test]
        fn frame_ids_round_trip(after_seq in 0i64..i64::MAX, frame in 0i64..i64::MAX) {
            let id = FrameId { after_seq, frame };
            prop_assert_eq!(Cursor::parse(&id.to_string()), Ok(Cursor::Frame(id)));
        }
    }
}
