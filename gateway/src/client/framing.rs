//! Request-framing checks run before anything else sees a request: any message whose
//! length two HTTP implementations could disagree about is refused, so no request can be
//! smuggled past the gateway inside another one's body.
//!
//! Pingora 0.9 already refuses most of these (Content-Length with Transfer-Encoding,
//! differing Content-Lengths, a final coding other than `chunked`, HTTP/1.0 with
//! Transfer-Encoding, obs-fold, oversized chunk sizes). These checks are stricter where
//! Pingora is lenient, and keep the guarantee if a later Pingora relaxes a rule:
//! - Transfer-Encoding must be exactly `chunked` (one header, one coding): we never need
//!   another coding, and `chunked, identity` or `xchunked` are only ever sent to confuse.
//! - Content-Length must be one run of digits in one header (identical duplicates, which
//!   RFC 9110 lets a recipient collapse, are refused too: a sender that repeats it is not
//!   a client we need to serve).
//! - Header lines must end in CRLF: a bare LF is accepted by some parsers and not others.

use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use pingora::http::RequestHeader;

/// Why a request's framing is refused, or `Ok` when it is unambiguous.
pub fn check(req: &RequestHeader) -> Result<(), &'static str> {
    let te: Vec<_> = req.headers.get_all(TRANSFER_ENCODING).iter().collect();
    let cl: Vec<_> = req.headers.get_all(CONTENT_LENGTH).iter().collect();
    if !te.is_empty() {
        if req.version < http::Version::HTTP_11 {
            return Err("Transfer-Encoding in an HTTP/1.0 request");
        }
        if !cl.is_empty() {
            return Err("both Content-Length and Transfer-Encoding");
        }
        // Byte-exact: no surrounding whitespace, tabs or extra codings.
        if te.len() != 1 || !te[0].as_bytes().eq_ignore_ascii_case(b"chunked") {
            return Err("Transfer-Encoding other than a single \"chunked\"");
        }
    }
    if cl.len() > 1 {
        return Err("more than one Content-Length");
    }
    if let Some(v) = cl.first() {
        let v = v.as_bytes();
        if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
            return Err("Content-Length is not a decimal number");
        }
    }
    Ok(())
}

/// Checks on the header block as the client wrote it: no bare LF anywhere, and any
/// Transfer-Encoding line written exactly `Transfer-Encoding: chunked` (any case). The
/// parser trims the whitespace around values, so `Transfer-Encoding:\tchunked` or a
/// doubled space would otherwise look clean — but nothing but an attempt to confuse some
/// other parser on the path ever writes them.
pub fn check_raw(raw: &[u8]) -> Result<(), &'static str> {
    if has_bare_lf(raw) {
        return Err("a header line ends in a bare LF");
    }
    // Counted here, not on the parsed header: Pingora drops Content-Length when
    // Transfer-Encoding is present (RFC 9112 lets a recipient do that), and we would
    // rather refuse a sender that framed its message two ways.
    let (mut te, mut cl) = (0, 0);
    for line in raw.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let name_end = line.iter().position(|&b| b == b':').unwrap_or(line.len());
        let name = line[..name_end].trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            cl += 1;
        }
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            te += 1;
            if !line.eq_ignore_ascii_case(b"transfer-encoding: chunked") {
                return Err("Transfer-Encoding not written as \"Transfer-Encoding: chunked\"");
            }
        }
    }
    if te > 0 && cl > 0 {
        return Err("both Content-Length and Transfer-Encoding");
    }
    if te > 1 || cl > 1 {
        return Err("a framing header sent more than once");
    }
    Ok(())
}

/// Whether the raw header block uses a bare LF anywhere (a line ending not preceded by
/// CR).
pub fn has_bare_lf(raw: &[u8]) -> bool {
    raw.iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || raw[i - 1] != b'\r'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(version: http::Version, headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build("POST", b"/x", None).unwrap();
        r.set_version(version);
        for (k, v) in headers {
            r.append_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn ambiguous_framing_is_refused() {
        const HTTP_10: http::Version = http::Version::HTTP_10;
        const HTTP_11: http::Version = http::Version::HTTP_11;
        let refused: &[(http::Version, &[(&str, &str)])] = &[
            (
                HTTP_11,
                &[("content-length", "3"), ("transfer-encoding", "chunked")],
            ),
            (HTTP_11, &[("content-length", "3"), ("content-length", "4")]),
            (HTTP_11, &[("content-length", "3"), ("content-length", "3")]),
            (HTTP_11, &[("content-length", "3, 3")]),
            (HTTP_11, &[("content-length", "+3")]),
            (HTTP_11, &[("transfer-encoding", "chunked, identity")]),
            (HTTP_11, &[("transfer-encoding", "xchunked")]),
            (HTTP_11, &[("transfer-encoding", " chunked")]),
            (HTTP_11, &[("transfer-encoding", "chunked\t")]),
            (
                HTTP_11,
                &[
                    ("transfer-encoding", "identity"),
                    ("transfer-encoding", "chunked"),
                ],
            ),
            (HTTP_10, &[("transfer-encoding", "chunked")]),
        ];
        for (version, headers) in refused {
            assert!(check(&req(*version, headers)).is_err(), "{headers:?}");
        }
        for headers in [
            &[("content-length", "3")][..],
            &[("transfer-encoding", "Chunked")][..],
            &[][..],
        ] {
            assert!(check(&req(HTTP_11, headers)).is_ok(), "{headers:?}");
        }
        assert!(has_bare_lf(b"GET / HTTP/1.1\nHost: x\r\n\r\n"));
        assert!(check_raw(b"POST / HTTP/1.1\r\nTransfer-Encoding:\tchunked\r\n\r\n").is_err());
        assert!(check_raw(b"POST / HTTP/1.1\r\nTransfer-Encoding:  chunked\r\n\r\n").is_err());
        assert!(check_raw(b"POST / HTTP/1.1\r\ntransfer-encoding: Chunked\r\n\r\n").is_ok());
        assert!(check_raw(
            b"POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        .is_err());
        assert!(!has_bare_lf(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    }
}
