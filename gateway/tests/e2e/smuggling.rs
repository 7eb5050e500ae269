//! Request smuggling over raw TCP against pass-through paths: every ambiguous framing is
//! refused (a 4xx, or the connection closed without a 2xx), and the agent receives no
//! request it should not — counted through the tee, which records every exchange that
//! reaches the agent through the proxy pipeline.

use std::time::Duration;

use crate::harness::*;

/// A request hidden in the body of the outer one; it must never reach the agent.
const SMUGGLED: &str = "GET /echo?smuggled=1 HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[test]
fn ambiguous_framing_is_refused_and_nothing_is_smuggled() {
    let (store, agent, tether) = chat_gateway(&[]);
    let post = |headers: &str, body: &str| {
        format!("POST /echo?outer=1 HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n{body}")
    };
    let cases: Vec<(&str, String)> = vec![
        ("CL + TE", post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE + CL", post("Transfer-Encoding: chunked\r\nContent-Length: 60\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("two Content-Lengths", post("Content-Length: 0\r\nContent-Length: 44\r\n", SMUGGLED)),
        ("Content-Length list", post("Content-Length: 0, 44\r\n", SMUGGLED)),
        ("Content-Length +0", post("Content-Length: +0\r\n", SMUGGLED)),
        ("TE chunked, identity", post("Transfer-Encoding: chunked, identity\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE identity, chunked twice", post("Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE leading space", post("Transfer-Encoding:  chunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE xchunked", post("Transfer-Encoding: xchunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE tab", post("Transfer-Encoding:\tchunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE trailing tab", post("Transfer-Encoding: chunked\t\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE space before colon", post("Transfer-Encoding : chunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("TE vertical tab", post("Transfer-Encoding:\x0bchunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("chunk-size overflow", post("Transfer-Encoding: chunked\r\n", &format!("ffffffffffffffffff\r\nab\r\n0\r\n\r\n{SMUGGLED}"))),
        ("bare LF", format!("POST /echo?outer=1 HTTP/1.1\nHost: localhost\nContent-Length: 0\n\n{SMUGGLED}")),
        ("bare LF in one header", format!("GET /echo?outer=1 HTTP/1.1\r\nHost: localhost\nX-A: b\r\n\r\n{SMUGGLED}")),
        ("obs-fold", post("X-Fold: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", SMUGGLED)),
        ("obs-fold of TE", post("Transfer-Encoding:\r\n chunked\r\n", &format!("0\r\n\r\n{SMUGGLED}"))),
        ("HTTP/1.0 with TE", format!("POST /echo?outer=1 HTTP/1.0\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}")),
    ];
    let mut failures = Vec::new();
    for (name, request) in &cases {
        // The outer request's query names the case, so a leak says which one.
        let request = request.replace("outer=1", &format!("outer={}", name.replace(' ', "_")));
        let (raw, closed) = raw_exchange(tether.port, request.as_bytes(), Duration::from_secs(2));
        let codes = statuses(&raw);
        let refused = !codes.iter().any(|c| (200..300).contains(c))
            && (codes.first().is_some_and(|c| (400..500).contains(c))
                || (codes.is_empty() && closed));
        if !refused {
            failures.push(format!(
                "{name}: {codes:?} closed={closed}: {}",
                String::from_utf8_lossy(&raw)
            ));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let reached: Vec<String> = teed_requests(&store.events("local", "passthrough"))
        .iter()
        .map(|r| r["path"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        failures.is_empty(),
        "accepted: {failures:#?}\nreached the agent: {reached:?}"
    );
    assert!(
        !reached.iter().any(|p| p.contains("smuggled")),
        "smuggled: {reached:?}"
    );
    // Chunked bodies are read (and their framing checked) before the agent is
    // contacted, so even a chunk-size overflow stops at the gateway.
    assert!(reached.is_empty(), "reached the agent: {reached:?}");
    // A well-formed request still works, on a fresh connection.
    let ok = raw_exchange(
        tether.port,
        b"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
        Duration::from_secs(3),
    );
    assert_eq!(
        statuses(&ok.0),
        vec![200],
        "{}",
        String::from_utf8_lossy(&ok.0)
    );
    assert!(agent.requests().is_empty(), "no model requests either");
}
