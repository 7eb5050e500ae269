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
    let card = |ifaces: serde_json::Value| json!({ "name": "x", "supportedInterfaces": ifaces });
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
    assert_eq!(grpc_address(&json!("not a card")), None);
}

/// A card of an agent mounted under `/agent`: JSON-RPC at `/agent/jsonrpc` (v1.0) and
/// `/agent/rpc03` (v0.3), HTTP+JSON below `/agent/rest`.
fn mounted_card() -> serde_json::Value {
    let iface = |url: &str, binding: &str, version: &str| {
        json!({ "url": format!("http://public.example:80{url}"), "protocolBinding": binding,
                "protocolVersion": version })
    };
    json!({ "name": "x", "supportedInterfaces": [
        iface("/agent/jsonrpc", "JSONRPC", "1.0"), iface("/agent/rest/", "HTTP+JSON", "1.0"),
        iface("/agent/rpc03", "JSONRPC", "0.3"), iface("/agent/rest", "HTTP+JSON", "0.3"),
    ] })
}

#[test]
fn each_request_goes_to_the_url_its_card_lists_for_its_binding_and_version() {
    use super::super::card::relocated;
    use crate::upstream::AgentRequest;
    let card = mounted_card();
    let rpc = |method: &str| {
        AgentRequest::post("/", json!({ "jsonrpc": "2.0", "id": 1, "method": method }))
    };
    let at = |request: AgentRequest| relocated(&card, &request);
    assert_eq!(at(rpc("SendMessage")).as_deref(), Some("/agent/jsonrpc"));
    assert_eq!(at(rpc("message/send")).as_deref(), Some("/agent/rpc03"));
    let rest = |path: &str| at(AgentRequest::post(path, json!({})));
    assert_eq!(
        rest("/message:send").as_deref(),
        Some("/agent/rest/message:send")
    );
    assert_eq!(
        rest("/rest/v1/message:stream").as_deref(),
        Some("/agent/rest/v1/message:stream")
    );
    assert_eq!(
        at(AgentRequest::get("/rest/tasks/t%2F1?historyLength=0")).as_deref(),
        Some("/agent/rest/tasks/t%2F1?historyLength=0")
    );
    assert_eq!(
        rest("/rest/tasks/t1:cancel").as_deref(),
        Some("/agent/rest/tasks/t1:cancel")
    );
    // The card itself, and a binding the card does not list, keep their paths.
    assert_eq!(at(AgentRequest::get("/.well-known/agent-card.json")), None);
    let only_v10_rpc = json!({ "name": "x", "supportedInterfaces": [
        { "url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0" }] });
    assert_eq!(
        relocated(
            &only_v10_rpc,
            &AgentRequest::post("/x/message:send", json!({}))
        ),
        None
    );
    assert_eq!(relocated(&only_v10_rpc, &rpc("message/send")), None);
    // A v0.3 card: `url` is its preferred transport's, the others are additional.
    let v03 = json!({ "name": "x", "url": "http://a:1/api/", "preferredTransport": "JSONRPC",
        "protocolVersion": "0.3.0", "capabilities": {},
        "additionalInterfaces": [{ "transport": "HTTP+JSON", "url": "http://a:1/api/rest" }] });
    assert_eq!(
        relocated(&v03, &rpc("message/send")).as_deref(),
        Some("/api/")
    );
    assert_eq!(
        relocated(&v03, &AgentRequest::post("/v1/message:send", json!({}))).as_deref(),
        Some("/api/rest/v1/message:send")
    );
}

#[test]
fn a_card_with_no_v10_interface_speaks_only_v03() {
    use super::super::card::speaks_only_v03;
    assert!(!speaks_only_v03(&mounted_card()));
    let v03 = json!({ "name": "kagent", "url": "http://a:1/", "protocolVersion": "0.3.0",
        "capabilities": {}, "skills": [] });
    assert!(speaks_only_v03(&v03));
    let listed_v03 = json!({ "name": "x", "supportedInterfaces": [
        { "url": "http://a/", "protocolBinding": "JSONRPC", "protocolVersion": "0.3" }] });
    assert!(speaks_only_v03(&listed_v03));
    assert!(!speaks_only_v03(&json!({ "error": "not a card" })));
}
