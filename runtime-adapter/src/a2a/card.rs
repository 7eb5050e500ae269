//! Agent cards name the agent's own address; the cards Tether forwards point the
//! interfaces it carries at Tether instead, so that clients come back through it.

use serde_json::{json, Value};

/// A forwarded answer with the agent card in it (the card itself, or a JSON-RPC result
/// holding the extended card) pointed at `public_url`; anything else as it is.
pub(super) fn rewrite_forwarded(mut body: Value, public_url: &str) -> Value {
    if looks_like_card(&body) {
        rewrite_card(&mut body, public_url);
    } else if let Some(result) = body.get_mut("result").filter(|r| looks_like_card(r)) {
        rewrite_card(result, public_url);
    }
    body
}

fn looks_like_card(v: &Value) -> bool {
    v.is_object()
        && v.get("name").is_some()
        && (v.get("supportedInterfaces").is_some()
            || (v.get("url").is_some()
                && (v.get("capabilities").is_some() || v.get("skills").is_some())))
}

/// Points every interface of the agent that Tether carries (JSON-RPC, HTTP+JSON) at
/// `public_url`, keeping paths. gRPC interfaces are left alone, since Tether does not
/// carry gRPC; so is every other URL in the card (documentation, icons).
fn rewrite_card(card: &mut Value, public_url: &str) {
    let public = public_url.trim_end_matches('/');
    let is_grpc = |transport: &Value| {
        transport
            .as_str()
            .is_some_and(|t| t.eq_ignore_ascii_case("GRPC"))
    };
    let point = |url: &mut Value| {
        let Some((_, rest)) = url.as_str().and_then(split_origin) else {
            return;
        };
        let rest = if rest.is_empty() { "/" } else { rest };
        *url = json!(format!("{public}{rest}"));
    };
    // v0.3 names the main interface at the top, with its transport beside it.
    if !is_grpc(&card["preferredTransport"]) {
        if let Some(url) = card.get_mut("url") {
            point(url);
        }
    }
    for (list, transport) in [
        ("additionalInterfaces", "transport"),
        ("supportedInterfaces", "protocolBinding"),
    ] {
        let ifaces = card.get_mut(list).and_then(Value::as_array_mut);
        for iface in ifaces.into_iter().flatten() {
            if !is_grpc(&iface[transport]) {
                if let Some(url) = iface.get_mut("url") {
                    point(url);
                }
            }
        }
    }
}

/// Splits `scheme://host:port/path` into its origin and the rest.
fn split_origin(url: &str) -> Option<(&str, &str)> {
    let after_scheme = url.find("://")? + 3;
    let end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| after_scheme + i);
    Some((&url[..end], &url[end..]))
}
