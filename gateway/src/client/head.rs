//! The one request-head check every request goes through before anything else looks at
//! it (health checks included): framing (see `framing`), `Host` on HTTP/1.1, the values of
//! the headers Tether reads, and the path rule. A head that fails is answered 400 with
//! `Connection: close` and a JSON body naming what is wrong; nothing reaches the agent or
//! the log.
//!
//! The path rule: a request path with a dot segment (`.` or `..`, written plainly or
//! percent-encoded) is refused everywhere, because a client that means a path sends it
//! with dot segments removed (RFC 3986 §5.2.4) and anything else is an attempt to reach a
//! path under another name. An encoded `/` or `\` (`%2F`, `%5C`) is refused when the path
//! with it decoded is one Tether answers itself (a run, control, OpenAI or health path),
//! so `/v1/chat%2Fcompletions` is neither a pass-through nor a run; elsewhere it is the
//! agent's business and goes through unchanged. A path that is another spelling of one
//! Tether answers (an empty segment as in `/v1//responses`, a `;parameter` as in
//! `/v1/chat/completions;x=1`, an escaped unreserved character as in
//! `/v1/%63hat/completions`) is refused too, naming the spelling to send: routing, the
//! site rule and the log see each of Tether's paths under one name only.

use http::header::HOST;
use pingora::http::RequestHeader;

use super::framing;

/// Why a request head is refused.
#[derive(Debug, PartialEq, Eq)]
pub struct HeadError {
    /// What is wrong, for the client (names the header or the path rule).
    pub message: String,
}

impl HeadError {
    fn new(message: impl Into<String>) -> Self {
        HeadError {
            message: message.into(),
        }
    }
}

/// Checks a request head: `raw` is the header block as the client wrote it (HTTP/1),
/// `tether_path` says whether a decoded path is one Tether answers itself.
pub fn check(
    req: &RequestHeader,
    raw: Option<&[u8]>,
    tether_path: impl Fn(&str) -> bool,
) -> Result<(), HeadError> {
    if let Some(raw) = raw {
        framing::check_raw(raw).map_err(HeadError::new)?;
    }
    framing::check(req).map_err(HeadError::new)?;
    if req.version == http::Version::HTTP_11 {
        let hosts = req.headers.get_all(HOST).iter().count();
        if hosts == 0 && req.uri.authority().is_none() {
            return Err(HeadError::new("an HTTP/1.1 request needs a Host header"));
        }
        if hosts > 1 {
            return Err(HeadError::new("more than one Host header"));
        }
    }
    for (name, value) in &req.headers {
        if !READ.contains(&name.as_str()) {
            continue;
        }
        if let Err(why) = check_value(value.as_bytes()) {
            return Err(HeadError::new(format!("header {name}: {why}")));
        }
    }
    check_path(req.uri.path(), tether_path)
}

/// The headers Tether itself reads (lower case, as `http` names them). Their values must
/// pass `check_value`; any other header is the agent's business and goes through as sent,
/// obs-text included (RFC 9110 §5.5: opaque data), e.g. a UTF-8 `User-Agent` or `X-Title`.
const READ: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "authorization",
    "x-api-key",
    "x-session-id",
    "x-user-id",
    "x-invocation-id",
    "last-event-id",
    "idempotency-key",
    "a2a-version",
    "traceparent",
    "tracestate",
];

/// A value Tether accepts in a header it reads: visible ASCII, spaces and tabs. The parser
/// already refuses control characters; bytes above 0x7F (obs-text) are refused here,
/// because a value Tether cannot read must not be ignored silently (a session id it could
/// not read used to start a new session).
pub fn check_value(value: &[u8]) -> Result<(), &'static str> {
    if value
        .iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        Ok(())
    } else {
        Err("the value has characters other than visible ASCII")
    }
}

/// The path rule (see the module's documentation).
pub fn check_path(path: &str, tether_path: impl Fn(&str) -> bool) -> Result<(), HeadError> {
    let mut encoded_slash = false;
    for segment in path.split('/') {
        let decoded = percent_decode(segment);
        if decoded == "." || decoded == ".." {
            return Err(HeadError::new(format!(
                "the path {path:?} has a dot segment; send it with dot segments removed"
            )));
        }
        if decoded.contains('/') || decoded.contains('\\') {
            encoded_slash = true;
        }
    }
    if encoded_slash && tether_path(&percent_decode(path)) {
        return Err(HeadError::new(format!(
            "the path {path:?} has an encoded '/' or '\\' in a path Tether answers; send it unencoded"
        )));
    }
    let canonical = canonical(path);
    if canonical != path && tether_path(&canonical) {
        return Err(HeadError::new(format!(
            "the path {path:?} is another spelling of {canonical:?}; send {canonical:?}"
        )));
    }
    Ok(())
}

/// The one spelling of a path: empty segments dropped (a trailing `/` kept), `;`
/// parameters cut from each segment, and escaped unreserved characters (RFC 3986 §2.3:
/// letters, digits, `-._~`) decoded, as §6.2.2.2 says they are the same path.
fn canonical(path: &str) -> String {
    let segments: Vec<String> = path
        .split('/')
        .map(|segment| segment.split(';').next().unwrap_or_default())
        .filter(|segment| !segment.is_empty())
        .map(decode_unreserved)
        .collect();
    let mut out = format!("/{}", segments.join("/"));
    if path.ends_with('/') && out != "/" {
        out.push('/');
    }
    out
}

fn decode_unreserved(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| segment.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| b.is_ascii_alphanumeric() || b"-._~".contains(b));
        match decoded {
            Some(b) => {
                out.push(b as char);
                i += 3;
            }
            None => {
                let c = segment[i..].chars().next().unwrap_or('\0');
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: http::Version, path: &str, headers: &[(&str, &[u8])]) -> RequestHeader {
        let mut r = RequestHeader::build("GET", path.as_bytes(), None).unwrap();
        r.set_version(version);
        for (k, v) in headers {
            r.append_header(k.to_string(), http::HeaderValue::from_bytes(v).unwrap())
                .unwrap();
        }
        r
    }

    fn tether(p: &str) -> bool {
        p.starts_with("/v1/") || p.starts_with("/agentengine/")
    }

    #[test]
    fn host_is_required_on_http_1_1_only() {
        let v11 = http::Version::HTTP_11;
        assert!(check(&req(v11, "/x", &[]), None, tether).is_err());
        assert!(check(&req(v11, "/x", &[("host", b"h")]), None, tether).is_ok());
        assert!(check(
            &req(v11, "/x", &[("host", b"h"), ("host", b"i")]),
            None,
            tether
        )
        .is_err());
        assert!(check(&req(http::Version::HTTP_10, "/x", &[]), None, tether).is_ok());
    }

    #[test]
    fn non_ascii_values_are_refused_naming_the_header() {
        let e = check(
            &req(
                http::Version::HTTP_11,
                "/x",
                &[("host", b"h"), ("x-session-id", "s\u{e9}ance".as_bytes())],
            ),
            None,
            tether,
        )
        .unwrap_err();
        assert!(e.message.contains("x-session-id"), "{}", e.message);
    }

    #[test]
    fn non_ascii_in_a_header_tether_does_not_read_goes_through() {
        let head = req(
            http::Version::HTTP_11,
            "/x",
            &[("host", b"h"), ("x-title", "caf\u{e9}".as_bytes())],
        );
        assert_eq!(check(&head, None, tether), Ok(()));
    }

    #[test]
    fn the_path_rule() {
        for bad in [
            "/v1/chat%2Fcompletions",
            "/v1/chat%2fcompletions",
            "/agentengine/api/v1%2FListSessions",
            "/v1/./responses",
            "/a/../v1/responses",
            "/a/%2e%2E/b",
            "/x/.",
            "/x%5C..",
        ] {
            let r = check_path(bad, tether);
            // `/x%5C..` decodes to one segment `x\..`: no dot segment, not a Tether path.
            if bad == "/x%5C.." {
                assert!(r.is_ok(), "{bad}");
            } else {
                assert!(r.is_err(), "{bad}");
            }
        }
        // Other spellings of Tether's paths, refused; the same of the agent's, passed.
        for other in [
            "/v1//responses",
            "//v1/responses",
            "/v1/%63hat/completions",
            "/v1/chat/completions;x=1",
            "/agentengine//api/v1/ListSessions",
            "/v1/responses;",
            "/%76%31/responses",
        ] {
            let e = check_path(other, tether).unwrap_err();
            assert!(
                e.message.contains("another spelling"),
                "{other}: {}",
                e.message
            );
        }
        assert_eq!(
            canonical("/v1/%63hat//completions;x=1/"),
            "/v1/chat/completions/"
        );
        assert_eq!(canonical("/caf%C3%A9/%20"), "/caf%C3%A9/%20");
        for good in [
            "/",
            "/x//y",
            "/x;y",
            "/%61gent",
            "/files/a%2Fb",
            "/v1/responses",
            "/a/.b/..c/",
            "/v1/models",
        ] {
            assert!(check_path(good, tether).is_ok(), "{good}");
        }
    }

    proptest::proptest! {
        /// A path the rule accepts has no dot segment however it is encoded, and no
        /// encoded '/' that would make it one of Tether's paths.
        #[test]
        fn an_accepted_path_has_no_dot_segment_or_hidden_tether_path(
            segments in proptest::collection::vec(
                proptest::sample::select(vec![
                    "a", ".", "..", "%2e", "%2E%2e", ".%2E", "%2F", "b%2fc", "%5c", "v1",
                    "responses", "chat%2Fcompletions", "agentengine", "", "...",
                ]),
                0..6,
            )
        ) {
            let path = format!("/{}", segments.join("/"));
            if check_path(&path, tether).is_ok() {
                for s in path.split('/') {
                    let d = percent_decode(s);
                    proptest::prop_assert!(d != "." && d != "..", "{}", path);
                }
                let hidden_slash = segments
                    .iter()
                    .any(|s| percent_decode(s).contains(['/', '\\']));
                if hidden_slash {
                    proptest::prop_assert!(!tether(&percent_decode(&path)), "{}", path);
                }
            }
        }

        /// Header values: accepted exactly when every byte is visible ASCII, space or tab.
        #[test]
        fn header_values_are_accepted_exactly_when_ascii(value in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let ascii = value.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
            proptest::prop_assert_eq!(check_value(&value).is_ok(), ascii);
        }
    }
}
