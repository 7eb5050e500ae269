//! Where a request comes from, for the rules that keep a web page on another site from
//! using Tether through the user's browser (docs/hardening.md):
//!
//! - the **Host rule** (DNS rebinding): a request is answered only for the host names
//!   Tether is reached by: `localhost`, `127.0.0.1` and `[::1]` (without a port or with
//!   the listening one) and the `allowed_hosts`; a public address without `allowed_hosts`
//!   (allowed only with `[auth]`) answers any. Health paths also answer any IP-literal
//!   host: probes and scrapers address a pod by its IP, and a rebinding page can only
//!   ever send a name;
//! - the **site rule** (cross-site requests) on the paths Tether answers itself: a request
//!   from a page of a foreign origin (`Origin` not Tether's own nor in `allowed_origins`,
//!   `Origin: null`, or `Sec-Fetch-Site` cross-site/same-site other than a top-level
//!   navigation) is refused; a body a page can send without a CORS preflight (`text/plain`,
//!   `multipart/form-data`, and from a browser `application/x-www-form-urlencoded`) is
//!   refused by JSON endpoints;
//! - **CORS**: preflights on Tether's own paths are answered by Tether, granting only the
//!   origins the site rule lets through.
//!
//! Clients that are not browsers send neither `Origin` nor `Sec-Fetch-*` and are
//! unaffected by the site rule.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::header::{HOST, ORIGIN};
use http::Method;
use pingora::http::RequestHeader;

/// Why a request was refused by these rules; `status` is the HTTP status to answer.
#[derive(Debug, PartialEq, Eq)]
pub struct SiteError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl SiteError {
    fn new(status: u16, code: &'static str, message: String) -> Self {
        SiteError {
            status,
            code,
            message,
        }
    }
}

/// A host and its optional port, as written in a `Host` header or an `allowed_hosts`
/// entry; `None` when it is not one.
fn split_host(value: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if let Some(rest) = value.strip_prefix('[') {
        let end = rest.find(']')?;
        let name = &value[..end + 2];
        match &rest[end + 1..] {
            "" => (name, None),
            p => (name, Some(p.strip_prefix(':')?)),
        }
    } else {
        match value.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (value, None),
        }
    };
    let port = match port {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
        None => None,
    };
    (!name.is_empty()).then_some((name, port))
}

/// The host a request was sent to: `Host`, or the authority of an HTTP/2 request. (A
/// browser never sends an absolute-form target to an origin server.)
fn request_host(req: &RequestHeader) -> Option<String> {
    match req.headers.get(HOST) {
        Some(v) => Some(String::from_utf8_lossy(v.as_bytes()).into_owned()),
        None => req.uri.authority().map(|a| a.as_str().to_owned()),
    }
}

/// Whether a host name (lower case) is an IP literal (IPv6 in brackets).
fn is_ip_literal(name: &str) -> bool {
    match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<Ipv6Addr>().is_ok(),
        None => name.parse::<IpAddr>().is_ok(),
    }
}

/// Whether `value` is a valid `allowed_hosts` entry (lower case): `*`, or a host name
/// (optionally `*.` before it) or an IP literal, with an optional `:port`.
pub fn valid_host_pattern(value: &str) -> bool {
    if value == "*" {
        return true;
    }
    let Some((name, _)) = split_host(value) else {
        return false;
    };
    if name.starts_with('[') {
        return is_ip_literal(name);
    }
    let name = name.strip_prefix("*.").unwrap_or(name);
    !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        })
}

/// The Host rule, built once from the configuration.
#[derive(Debug)]
pub struct HostRule {
    /// `None`: any host (a public address guarded by `[auth]` without `allowed_hosts`).
    patterns: Option<Vec<String>>,
    /// The listening port: the only port a loopback name may come with.
    port: u16,
}

/// The names always answered (with the listening port or without): no rebinding page can
/// send them, since a page whose host is `localhost` is served from this machine.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl HostRule {
    pub fn new(listen: SocketAddr, allowed_hosts: &[String]) -> HostRule {
        let any = allowed_hosts.is_empty() && !listen.ip().is_loopback();
        HostRule {
            patterns: (!any).then(|| allowed_hosts.to_vec()),
            port: listen.port(),
        }
    }

    /// Checks the request's host; a request without one (HTTP/1.0) comes from no browser
    /// and passes.
    pub fn check(&self, req: &RequestHeader, health: bool) -> Result<(), SiteError> {
        let Some(host) = request_host(req) else {
            return Ok(());
        };
        if self.allows(&host.to_ascii_lowercase(), health) {
            Ok(())
        } else {
            Err(SiteError::new(
                421,
                "misdirected_request",
                format!(
                    "this gateway does not answer for the host {host:?}; \
                     add it to allowed_hosts if clients reach Tether by that name"
                ),
            ))
        }
    }

    fn allows(&self, host: &str, health: bool) -> bool {
        let Some(patterns) = &self.patterns else {
            return true;
        };
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        if health && is_ip_literal(name) {
            return true;
        }
        if LOOPBACK_NAMES.contains(&name) && port.is_none_or(|p| p == self.port) {
            return true;
        }
        patterns.iter().any(|p| {
            if p == "*" {
                return true;
            }
            let Some((p_name, p_port)) = split_host(p) else {
                return false;
            };
            if p_port.is_some() && p_port != port {
                return false;
            }
            match p_name.strip_prefix("*.") {
                Some(domain) => name
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
                None => name == p_name,
            }
        })
    }
}

/// The site rule, built once from the configuration.
#[derive(Debug)]
pub struct SiteRule {
    /// `allowed_origins`, lower case.
    origins: Vec<String>,
    /// The origin of `public_url`, which is Tether's own too.
    public_origin: Option<String>,
}

/// Whether the request looks like it comes from a browser at all.
fn from_browser(req: &RequestHeader) -> bool {
    req.headers.contains_key(ORIGIN) || req.headers.contains_key("sec-fetch-site")
}

fn header<'a>(req: &'a RequestHeader, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

/// `scheme://host[:port]` with the scheme's default port left out.
fn normal_origin(origin: &str) -> String {
    let o = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    for (scheme, port) in [("http://", ":80"), ("https://", ":443")] {
        if let Some(rest) = o.strip_prefix(scheme) {
            if let Some(host) = rest.strip_suffix(port) {
                return format!("{scheme}{host}");
            }
        }
    }
    o
}

impl SiteRule {
    pub fn new(allowed_origins: &[String], public_url: Option<&str>) -> SiteRule {
        SiteRule {
            origins: allowed_origins.iter().map(|o| normal_origin(o)).collect(),
            public_origin: public_url.map(|u| {
                let rest = u.split_once("://").map_or(u, |(_, r)| r);
                let authority = rest.split('/').next().unwrap_or_default();
                let scheme = if u.starts_with("https://") {
                    "https"
                } else {
                    "http"
                };
                normal_origin(&format!("{scheme}://{authority}"))
            }),
        }
    }

    /// Checks a request to one of Tether's own paths. `Ok(Some(origin))` when it comes
    /// from a configured foreign origin, whose answers must carry the CORS grant;
    /// `Ok(None)` for Tether's own origin and for clients that are not browsers.
    pub fn check(&self, req: &RequestHeader) -> Result<Option<String>, SiteError> {
        if let Some(origin) = req.headers.get(ORIGIN) {
            let origin = normal_origin(&String::from_utf8_lossy(origin.as_bytes()));
            if origin == "null" {
                return Err(SiteError::new(
                    403,
                    "cross_site_request",
                    "requests from an opaque origin (Origin: null) are refused".to_owned(),
                ));
            }
            if self.own(req, &origin) {
                return Ok(None);
            }
            if self.origins.contains(&origin) {
                return Ok(Some(origin));
            }
            return Err(SiteError::new(
                403,
                "cross_site_request",
                format!(
                    "requests from the origin {origin:?} are refused; \
                     add it to allowed_origins if its pages may call Tether"
                ),
            ));
        }
        match header(req, "sec-fetch-site") {
            Some("cross-site" | "same-site") => {
                // A link followed to the console (or to a file, served inert) is a
                // navigation; anything else a page makes without `Origin` is a
                // subresource load (an image, a script, a no-cors fetch of a GET).
                let navigation = matches!(req.method, Method::GET | Method::HEAD)
                    && header(req, "sec-fetch-mode") == Some("navigate");
                if navigation {
                    Ok(None)
                } else {
                    Err(SiteError::new(
                        403,
                        "cross_site_request",
                        "requests made by a page of another site are refused".to_owned(),
                    ))
                }
            }
            _ => Ok(None),
        }
    }

    /// Whether `origin` is Tether's own: its host is the one the request was sent to
    /// (already checked by the Host rule), or it is `public_url`'s.
    fn own(&self, req: &RequestHeader, origin: &str) -> bool {
        if self.public_origin.as_deref() == Some(origin) {
            return true;
        }
        let Some(host) = request_host(req).map(|h| h.to_ascii_lowercase()) else {
            return false;
        };
        let authority = origin.split_once("://").map_or("", |(_, a)| a);
        authority == host
            || ["http://", "https://"]
                .iter()
                .any(|scheme| normal_origin(&format!("{scheme}{host}")) == origin)
    }
}

/// Whether the request is a CORS preflight.
pub fn is_preflight(req: &RequestHeader) -> bool {
    req.method == Method::OPTIONS
        && req.headers.contains_key(ORIGIN)
        && req.headers.contains_key("access-control-request-method")
}

/// The headers of a granted preflight for `origin` (one the site rule let through).
pub fn preflight_grant(req: &RequestHeader, origin: &str) -> Vec<(&'static str, String)> {
    // The origin is trusted: it may send what headers it asks for (an SDK in the page
    // adds its own), as long as they are header names.
    let asked = header(req, "access-control-request-headers")
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_, ".contains(&b))
        })
        .unwrap_or("authorization, content-type");
    vec![
        ("access-control-allow-origin", origin.to_owned()),
        (
            "access-control-allow-methods",
            "GET, POST, DELETE".to_owned(),
        ),
        ("access-control-allow-headers", asked.to_owned()),
        ("access-control-max-age", "600".to_owned()),
        ("vary", "origin".to_owned()),
    ]
}

/// The headers of an answer to a configured foreign origin.
pub fn response_grant(origin: &str) -> [(&'static str, String); 3] {
    [
        ("access-control-allow-origin", origin.to_owned()),
        (
            "access-control-expose-headers",
            "x-session-id, x-run-id, x-response-id, x-invocation-id, x-idempotent-replay, \
             x-previous-session-id, retry-after, www-authenticate"
                .to_owned(),
        ),
        ("vary", "origin".to_owned()),
    ]
}

/// JSON endpoints refuse a body of a type a page can send without a preflight.
pub fn check_content_type(req: &RequestHeader) -> Result<(), SiteError> {
    if matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let Some(value) = header(req, "content-type") else {
        return Ok(());
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let refused = match essence.as_str() {
        "text/plain" | "multipart/form-data" => true,
        // What `curl -d` sends: refused only from a browser.
        "application/x-www-form-urlencoded" => from_browser(req),
        _ => false,
    };
    if refused {
        Err(SiteError::new(
            415,
            "unsupported_media_type",
            format!("this endpoint takes JSON (content-type: application/json), not {essence}"),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, host: &str, headers: &[(&str, &str)]) -> RequestHeader {
        let mut r = RequestHeader::build(method, b"/v1/responses", None).unwrap();
        r.insert_header("host", host).unwrap();
        for (k, v) in headers {
            r.insert_header(k.to_string(), *v).unwrap();
        }
        r
    }

    #[test]
    fn loopback_answers_loopback_names_on_its_port_only() {
        let rule = HostRule::new("127.0.0.1:8080".parse().unwrap(), &[]);
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "LOCALHOST:8080",
        ] {
            assert!(rule.check(&req("GET", ok, &[]), false).is_ok(), "{ok}");
        }
        for bad in [
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "attacker.example:8080",
            "localhost:9999",
            "[::1",
            "localhost:",
            "10.0.0.1:8080",
        ] {
            let e = rule.check(&req("GET", bad, &[]), false).unwrap_err();
            assert_eq!(e.status, 421, "{bad}");
        }
        // Health paths answer probes that address the pod by IP.
        assert!(rule.check(&req("GET", "10.0.0.1:8080", &[]), true).is_ok());
        assert!(rule.check(&req("GET", "[fd00::1]:8080", &[]), true).is_ok());
        assert!(rule.check(&req("GET", "evil.example", &[]), true).is_err());
    }

    #[test]
    fn allowed_hosts_take_wildcards_and_ports() {
        let allowed = ["gw.example", "*.corp.example", "other.example:9000"].map(String::from);
        let rule = HostRule::new("0.0.0.0:8080".parse().unwrap(), &allowed);
        for ok in [
            "gw.example",
            "gw.example:443",
            "a.corp.example",
            "a.b.corp.example:1",
            "other.example:9000",
        ] {
            assert!(rule.allows(ok, false), "{ok}");
        }
        for bad in ["corp.example", "xcorp.example", "other.example", "10.0.0.1"] {
            assert!(!rule.allows(bad, false), "{bad}");
        }
        // The loopback names stay (kubectl port-forward, the CLI in the pod).
        assert!(rule.allows("localhost:8080", false));
        assert!(!rule.allows("localhost:18080", false));
        let open = HostRule::new("0.0.0.0:8080".parse().unwrap(), &[]);
        assert!(open.allows("anything.example", false));
        for p in ["*", "a.b", "*.a", "[::1]:80", "10.0.0.1"] {
            assert!(valid_host_pattern(p), "{p}");
        }
        for p in ["", "a..b", "*x.a", "a:b", "[zz]", "a/b", "*.*.a"] {
            assert!(!valid_host_pattern(p), "{p}");
        }
    }

    #[test]
    fn the_site_rule() {
        let rule = SiteRule::new(&["https://app.example".to_owned()], None);
        let host = "localhost:8080";
        let check = |h: &[(&str, &str)]| rule.check(&req("POST", host, h));
        // No browser marks: SDKs and curl.
        assert_eq!(check(&[]), Ok(None));
        assert_eq!(check(&[("origin", "http://localhost:8080")]), Ok(None));
        assert_eq!(
            check(&[("origin", "https://app.example")]),
            Ok(Some("https://app.example".to_owned()))
        );
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost:9999",
            "http://localhost.evil.example:8080",
        ] {
            assert_eq!(check(&[("origin", bad)]).unwrap_err().status, 403, "{bad}");
        }
        assert!(check(&[("sec-fetch-site", "cross-site")]).is_err());
        assert!(check(&[("sec-fetch-site", "same-site")]).is_err());
        assert_eq!(check(&[("sec-fetch-site", "same-origin")]), Ok(None));
        let nav = [
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
        ];
        assert_eq!(rule.check(&req("GET", host, &nav)), Ok(None));
        assert!(rule.check(&req("POST", host, &nav)).is_err());
        // public_url's origin is Tether's own.
        let public = SiteRule::new(&[], Some("https://gw.example/base"));
        assert_eq!(
            public.check(&req(
                "POST",
                "10.1.1.1:8080",
                &[("origin", "https://gw.example:443")]
            )),
            Ok(None)
        );
    }

    #[test]
    fn json_endpoints_refuse_simple_request_bodies() {
        let ct = |h: &[(&str, &str)]| check_content_type(&req("POST", "h", h));
        assert!(ct(&[("content-type", "application/json")]).is_ok());
        assert!(ct(&[]).is_ok());
        assert_eq!(
            ct(&[("content-type", "text/plain;charset=UTF-8")])
                .unwrap_err()
                .status,
            415
        );
        assert!(ct(&[("content-type", "multipart/form-data; boundary=x")]).is_err());
        assert!(ct(&[("content-type", "application/x-www-form-urlencoded")]).is_ok());
        assert!(ct(&[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", "http://h")
        ])
        .is_err());
        assert!(check_content_type(&req("GET", "h", &[("content-type", "text/plain")])).is_ok());
    }
}
