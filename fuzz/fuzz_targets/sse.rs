//! SSE reassembly on any bytes, cut at a point the input chooses: never panics, and the
//! frames are the same as when the bytes come whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime_adapter::sse::SseParser;

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let whole = {
        let mut p = SseParser::new();
        let mut out = p.feed(body);
        out.extend(p.finish());
        out
    };
    let at = usize::from(cut).min(body.len());
    let mut p = SseParser::new();
    let mut out = p.feed(&body[..at]);
    out.extend(p.feed(&body[at..]));
    out.extend(p.finish());
    assert_eq!(out, whole);
});
