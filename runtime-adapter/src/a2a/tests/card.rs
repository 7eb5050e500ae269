//! Agent cards rewritten to point at Tether.

use super::*;

#[test]
fn agent_cards_point_at_tether() {
    let card = json_of(captures::CARD);
    let out = A2aSurface.rewrite_forwarded(
        &request("GET", "/.well-known/agent-card.json", None, &[], b""),
        "https://tether.example.com/",
        card.clone(),
    );
    assert_eq!(out["url"], "https://tether.example.com/");
    assert_eq!(
        out["additionalInterfaces"][0]["url"],
        "https://tether.example.com/rest"
    );
    let urls: Vec<&str> = out["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls,
        [
            "https://tether.example.com/",
            "https://tether.example.com/rest",
            "https://tether.example.com/",
            "https://tether.example.com/rest"
        ]
    );
    assert_eq!(out["skills"], card["skills"]);

    // Other origins (documentation, a gRPC port) are left alone; a card in a JSON-RPC
    // result (the extended card) is rewritten too.
    let card = json!({ "name": "x", "documentationUrl": "https://docs.example.com/a",
        "supportedInterfaces": [
            { "url": "http://agent:8000", "protocolBinding": "JSONRPC" },
            { "url": "http://agent:50051", "protocolBinding": "GRPC" },
            { "url": "https://elsewhere.example.com/a2a", "protocolBinding": "HTTP+JSON" }] });
    let out = A2aSurface.rewrite_forwarded(
        &request("POST", "/", None, &[], b""),
        "https://gw.example.com/agent1",
        json!({ "jsonrpc": "2.0", "id": 1, "result": card }),
    );
    let ifaces = &out["result"]["supportedInterfaces"];
    assert_eq!(ifaces[0]["url"], "https://gw.example.com/agent1/");
    assert_eq!(ifaces[1]["url"], "http://agent:50051");
    assert_eq!(ifaces[2]["url"], "https://gw.example.com/agent1/a2a");
    assert_eq!(
        out["result"]["documentationUrl"],
        "https://docs.example.com/a"
    );
    // Not a card: untouched.
    let other = json!({ "jsonrpc": "2.0", "id": 1, "result": { "url": "http://agent:8000/x" } });
    assert_eq!(
        A2aSurface.rewrite_forwarded(
            &request("POST", "/", None, &[], b""),
            "https://gw",
            other.clone()
        ),
        other
    );
}
