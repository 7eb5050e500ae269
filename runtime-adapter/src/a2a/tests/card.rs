//! Agent cards rewritten to point at Tether.

use super::*;

#[test]
fn agent_cards_point_at_tether() {
    let card = json_of(captures::CARD);
    let out = A2aSurface::AUTO.rewrite_forwarded(
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
            "https://tether.example.com/rest",
        ],
        "the agent offers no gRPC: by default neither does the card"
    );
    assert_eq!(out["skills"], card["skills"]);
    // `a2a_advertise_grpc = "always"`: Tether's own gRPC interface, scheme-less as gRPC
    // clients expect it.
    let out = A2aSurface::ALWAYS.rewrite_forwarded(
        &request("GET", "/.well-known/agent-card.json", None, &[], b""),
        "https://tether.example.com/",
        card.clone(),
    );
    let grpc = &out["supportedInterfaces"][4];
    assert_eq!(
        (
            &grpc["url"],
            &grpc["protocolBinding"],
            &grpc["protocolVersion"]
        ),
        (
            &json!("tether.example.com:443"),
            &json!("GRPC"),
            &json!("1.0")
        )
    );

    // The agent's own gRPC interface points at Tether too (a v0.3 one, which Tether does
    // not serve, is left out); other origins (documentation) are left alone; a card in a
    // JSON-RPC result (the extended card) is rewritten too.
    let card = json!({ "name": "x", "documentationUrl": "https://docs.example.com/a",
        "supportedInterfaces": [
            { "url": "http://agent:8000", "protocolBinding": "JSONRPC" },
            { "url": "agent:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0" },
            { "url": "agent:50052", "protocolBinding": "GRPC", "protocolVersion": "0.3" },
            { "url": "https://elsewhere.example.com/a2a", "protocolBinding": "HTTP+JSON" }] });
    let out = A2aSurface::AUTO.rewrite_forwarded(
        &request("POST", "/", None, &[], b""),
        "https://gw.example.com/agent1",
        json!({ "jsonrpc": "2.0", "id": 1, "result": card }),
    );
    let ifaces = &out["result"]["supportedInterfaces"];
    assert_eq!(ifaces.as_array().unwrap().len(), 3, "{ifaces}");
    assert_eq!(ifaces[0]["url"], "https://gw.example.com/agent1/");
    assert_eq!(ifaces[1]["url"], "gw.example.com:443");
    assert_eq!(ifaces[2]["url"], "https://gw.example.com/agent1/a2a");
    assert_eq!(
        out["result"]["documentationUrl"],
        "https://docs.example.com/a"
    );
    // `never`: the agent's gRPC interface is not listed either.
    let out = A2aSurface::NEVER.rewrite_forwarded(
        &request("POST", "/", None, &[], b""),
        "https://gw.example.com/agent1",
        json!({ "jsonrpc": "2.0", "id": 1, "result": card }),
    );
    let bindings: Vec<&Value> = out["result"]["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["protocolBinding"])
        .collect();
    assert_eq!(bindings, [&json!("JSONRPC"), &json!("HTTP+JSON")]);
    // Not a card: untouched.
    let other = json!({ "jsonrpc": "2.0", "id": 1, "result": { "url": "http://agent:8000/x" } });
    assert_eq!(
        A2aSurface::AUTO.rewrite_forwarded(
            &request("POST", "/", None, &[], b""),
            "https://gw",
            other.clone()
        ),
        other
    );
}

#[test]
fn a_v03_card_whose_main_interface_is_grpc_points_at_tethers_json_rpc() {
    let card = json!({ "name": "x", "skills": [], "url": "agent:50051", "preferredTransport": "GRPC",
        "additionalInterfaces": [
            { "url": "agent:50051", "transport": "GRPC" },
            { "url": "http://agent:8000/", "transport": "JSONRPC" }] });
    let out = A2aSurface::AUTO.rewrite_forwarded(
        &request("GET", "/.well-known/agent-card.json", None, &[], b""),
        "http://gw:8080",
        card,
    );
    assert_eq!(out["url"], "http://gw:8080/");
    assert_eq!(out["preferredTransport"], "JSONRPC");
    assert_eq!(
        out["additionalInterfaces"],
        json!([{ "url": "http://gw:8080/", "transport": "JSONRPC" }])
    );
}

#[test]
fn a_card_names_the_grpc_address_of_its_v10_interface() {
    use super::super::card::grpc_address;
    let card = |ifaces: serde_json::Value| {
        serde_json::to_vec(&json!({ "name": "x", "supportedInterfaces": ifaces })).unwrap()
    };
    let v03 = json!({ "url": "a:1", "protocolBinding": "GRPC", "protocolVersion": "0.3" });
    let v10 =
        json!({ "url": "127.0.0.1:50051", "protocolBinding": "GRPC", "protocolVersion": "1.0" });
    assert_eq!(
        grpc_address(&card(json!([v03, v10]))).as_deref(),
        Some("127.0.0.1:50051")
    );
    let with_scheme = json!({ "url": "grpc://agent:7000/", "protocolBinding": "GRPC" });
    assert_eq!(
        grpc_address(&card(json!([with_scheme]))).as_deref(),
        Some("agent:7000")
    );
    assert_eq!(grpc_address(&card(json!([v03]))), None);
    assert_eq!(grpc_address(b"not json"), None);
}
