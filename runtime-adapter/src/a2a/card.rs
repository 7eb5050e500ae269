//! Agent cards name the agent's own address; the cards Tether forwards point every
//! interface at Tether instead, so that clients come back through it, and offer Tether's
//! own gRPC interface as configured (`AdvertiseGrpc`). Also: where an agent's card says
//! it serves gRPC, for calling it over gRPC.

use serde_json::{json, Value};

use crate::upstream::AgentRequest;

/// When the cards Tether serves list its gRPC interface (`a2a_advertise_grpc`). Tether
/// serves gRPC in front of any agent, but a card that lists an interface the agent's own
/// card does not is a surprise to clients that check every URL a card lists (ADK's
/// `RemoteA2aAgent` refuses a card with a scheme-less gRPC URL), so by default a card
/// lists gRPC only when the agent's does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdvertiseGrpc {
    /// When the agent's card lists a v1.0 gRPC interface.
    #[default]
    Auto,
    /// Always (added when the agent's card lists none).
    Always,
    /// Never (the agent's gRPC interfaces are left out; gRPC clients still get served).
    Never,
}

impl AdvertiseGrpc {
    /// The configuration's spelling: `auto`, `always` or `never`.
    pub fn parse(value: &str) -> Option<AdvertiseGrpc> {
        match value {
            "auto" => Some(AdvertiseGrpc::Auto),
            "always" => Some(AdvertiseGrpc::Always),
            "never" => Some(AdvertiseGrpc::Never),
            _ => None,
        }
    }
}

/// A forwarded answer with the agent card in it (the card itself, or a JSON-RPC result
/// holding the extended card) pointed at `public_url`; anything else as it is.
pub(super) fn rewrite_forwarded(
    mut body: Value,
    public_url: &str,
    advertise_grpc: AdvertiseGrpc,
) -> Value {
    if looks_like_card(&body) {
        rewrite_card(&mut body, public_url, advertise_grpc);
    } else if let Some(result) = body.get_mut("result").filter(|r| looks_like_card(r)) {
        rewrite_card(result, public_url, advertise_grpc);
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

fn is_grpc(transport: &Value) -> bool {
    transport
        .as_str()
        .is_some_and(|t| t.eq_ignore_ascii_case("GRPC"))
}

/// Whether an interface is of A2A v1.0 (or names no version), which is the only gRPC
/// service Tether serves (v0.3's `a2a.v1.A2AService` has other messages).
fn is_v10(iface: &Value) -> bool {
    iface["protocolVersion"]
        .as_str()
        .is_none_or(|v| v.trim().starts_with('1'))
}

/// Points every interface of the agent at Tether: the HTTP ones (JSON-RPC, HTTP+JSON) at
/// `public_url`, keeping their paths; v1.0 gRPC ones at Tether's `host:port`. v0.3 gRPC
/// interfaces, which Tether does not serve, are left out; `advertise_grpc` decides
/// whether a v1.0 card lists Tether's gRPC interface. Every other URL in the card
/// (documentation, icons) stays as it is.
fn rewrite_card(card: &mut Value, public_url: &str, advertise_grpc: AdvertiseGrpc) {
    let public = public_url.trim_end_matches('/');
    let grpc_address = authority(public);
    let point = |url: &mut Value| {
        let Some((_, rest)) = url.as_str().and_then(split_origin) else {
            return;
        };
        let rest = if rest.is_empty() { "/" } else { rest };
        *url = json!(format!("{public}{rest}"));
    };
    // v0.3 names the main interface at the top, with its transport beside it.
    if is_grpc(&card["preferredTransport"]) {
        card["preferredTransport"] = json!("JSONRPC");
        card["url"] = json!(format!("{public}/"));
    } else if let Some(url) = card.get_mut("url") {
        point(url);
    }
    if let Some(ifaces) = card
        .get_mut("additionalInterfaces")
        .and_then(Value::as_array_mut)
    {
        ifaces.retain(|iface| !is_grpc(&iface["transport"]));
        ifaces.iter_mut().for_each(|iface| point(&mut iface["url"]));
    }
    let Some(ifaces) = card
        .get_mut("supportedInterfaces")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    let keeps_grpc = |iface: &Value| advertise_grpc != AdvertiseGrpc::Never && is_v10(iface);
    ifaces.retain(|iface| !is_grpc(&iface["protocolBinding"]) || keeps_grpc(iface));
    let mut offers_grpc = false;
    for iface in ifaces.iter_mut() {
        if is_grpc(&iface["protocolBinding"]) {
            iface["url"] = json!(grpc_address);
            offers_grpc = true;
        } else {
            point(&mut iface["url"]);
        }
    }
    if !offers_grpc && advertise_grpc == AdvertiseGrpc::Always {
        ifaces.push(json!({
            "url": grpc_address,
            "protocolBinding": "GRPC",
            "protocolVersion": "1.0",
        }));
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

/// `host:port` of a URL, as gRPC names a server; the scheme's port when it names none.
fn authority(url: &str) -> String {
    let (origin, _) = split_origin(url).unwrap_or((url, ""));
    let (scheme, host) = origin.split_once("://").unwrap_or(("http", origin));
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    match (has_port, scheme) {
        (true, _) => host.to_owned(),
        (false, "https") => format!("{host}:443"),
        (false, _) => format!("{host}:80"),
    }
}

/// The `host:port` of the v1.0 gRPC interface an agent card lists, if any.
pub(super) fn grpc_address(card: &Value) -> Option<String> {
    let iface = card["supportedInterfaces"]
        .as_array()?
        .iter()
        .find(|i| is_grpc(&i["protocolBinding"]) && is_v10(i))?;
    let url = iface["url"].as_str()?.trim();
    let url = url.strip_prefix("dns:///").unwrap_or(url);
    Some(if url.contains("://") {
        authority(url)
    } else {
        url.trim_end_matches('/').to_owned()
    })
}

/// Whether a card offers the agent only in v0.3 (kagent's runtimes, ADK's `to_a2a()`):
/// it is a card, and none of its interfaces is of v1.0.
pub(super) fn speaks_only_v03(card: &Value) -> bool {
    let v10 = card["supportedInterfaces"]
        .as_array()
        .is_some_and(|ifaces| ifaces.iter().any(is_v10));
    looks_like_card(card) && !v10
}

/// The URL a card lists for `binding` (`JSONRPC`, `HTTP+JSON`) in `v03` or v1.0: v1.0's
/// `supportedInterfaces`, or v0.3's `url` (of `preferredTransport`, JSON-RPC when it
/// names none) and `additionalInterfaces`.
fn interface_url<'c>(card: &'c Value, binding: &str, v03: bool) -> Option<&'c str> {
    let named = |t: &Value| t.as_str().is_some_and(|t| t.eq_ignore_ascii_case(binding));
    let listed = card["supportedInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| named(&i["protocolBinding"]) && is_v10(i) != v03);
    if let Some(url) = listed.and_then(|i| i["url"].as_str()) {
        return Some(url);
    }
    if !v03 {
        return None;
    }
    let preferred = card
        .get("preferredTransport")
        .cloned()
        .unwrap_or_else(|| json!("JSONRPC"));
    if named(&preferred) {
        if let Some(url) = card["url"].as_str() {
            return Some(url);
        }
    }
    card["additionalInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| named(&i["transport"]))
        .and_then(|i| i["url"].as_str())
}

/// The path of a card's URL (its origin is not used: Tether reaches the agent at its
/// configured upstream, where the card's public name may not lead).
fn url_path(url: &str) -> &str {
    match split_origin(url).map(|(_, rest)| rest.split(['?', '#']).next().unwrap_or("")) {
        Some("") | None => "/",
        Some(path) => path,
    }
}

/// Where an HTTP request to the agent goes by its card: a JSON-RPC request (v0.3 when
/// its method has v0.3's `a/b` form) to the card's JSON-RPC URL of that version; an
/// HTTP+JSON one to its operation (`message:send`, `tasks/…`, `extendedAgentCard`)
/// below the card's HTTP+JSON URL of that version (v0.3's operations are below `v1/`).
/// `None` for a request of no binding (the card itself) or one the card lists nothing
/// for: it keeps its path.
pub(super) fn relocated(card: &Value, request: &AgentRequest) -> Option<String> {
    if request.grpc.is_some() {
        return None;
    }
    if let Some(body) = request.body.as_ref().filter(|b| b.get("jsonrpc").is_some()) {
        let v03 = body["method"].as_str().is_some_and(|m| m.contains('/'));
        return interface_url(card, "JSONRPC", v03).map(|url| url_path(url).to_owned());
    }
    let (path, query) = match request.path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (request.path.as_str(), None),
    };
    let at = ["message:send", "message:stream", "extendedAgentCard"]
        .iter()
        .find_map(|op| path.strip_suffix(op).map(str::len))
        .or_else(|| path.rfind("/tasks").map(|i| i + 1))?;
    let (base, operation) = path.split_at(at);
    let v03 = base.ends_with("/v1/");
    let prefix = url_path(interface_url(card, "HTTP+JSON", v03)?).trim_end_matches('/');
    let version = if v03 { "/v1/" } else { "/" };
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    Some(format!("{prefix}{version}{operation}{query}"))
}
