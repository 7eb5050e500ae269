//! The request-head check (`gateway/src/client/head.rs`, with `framing.rs`) on any bytes
//! a client could send: parsed as Pingora's parser does (httparse), then checked; it must
//! never panic, and a head it accepts has a Host (HTTP/1.1), no dot segment and only
//! visible-ASCII header values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pingora::http::RequestHeader;

#[path = "../../gateway/src/client/framing.rs"]
#[allow(dead_code)]
mod framing;
#[path = "../../gateway/src/client/head.rs"]
#[allow(dead_code)]
mod head;

fn tether_path(p: &str) -> bool {
    p.starts_with("/v1/") || p.starts_with("/agentengine/") || p == "/healthz"
}

fuzz_target!(|data: &[u8]| {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(end)) = parsed.parse(data) else {
        return;
    };
    let (Some(method), Some(path), Some(version)) = (parsed.method, parsed.path, parsed.version)
    else {
        return;
    };
    let Ok(mut req) = RequestHeader::build(method, path.as_bytes(), None) else {
        return;
    };
    req.set_version(if version == 0 {
        http::Version::HTTP_10
    } else {
        http::Version::HTTP_11
    });
    for h in parsed.headers.iter() {
        let Ok(value) = http::HeaderValue::from_bytes(h.value) else {
            return;
        };
        if req.append_header(h.name.to_owned(), value).is_err() {
            return;
        }
    }
    if head::check(&req, Some(&data[..end]), tether_path).is_ok() {
        for (_, v) in req.headers.iter() {
            assert!(head::check_value(v.as_bytes()).is_ok());
        }
        let segments = req.uri.path().split('/');
        for s in segments {
            let d = percent_encoding::percent_decode_str(s).decode_utf8_lossy();
            assert!(d != "." && d != "..", "a dot segment passed: {path}");
        }
    }
});
