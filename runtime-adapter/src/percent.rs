//! Path segments of an agent's URL: escaped down to the URL-unreserved bytes, and decoded
//! the way Starlette (behind a2a-sdk and ADK) decodes them before routing.

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything but the unreserved bytes `[A-Za-z0-9-._~]`.
const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One path segment for the agent (ids are usually UUIDs, but need not be).
pub(crate) fn encode_segment(s: &str) -> String {
    utf8_percent_encode(s, RESERVED).to_string()
}

/// A segment the client sent, decoded: bad escapes stay as they are, invalid UTF-8 is
/// replaced.
pub(crate) fn decode_segment(s: &str) -> String {
    percent_decode_str(s).decode_utf8_lossy().into_owned()
}
