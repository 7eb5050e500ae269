//! The account boundary on headers: removes every client-supplied identity header before
//! the gateway injects its own, however the client spelled or smuggled it.
//!
//! Spellings caught: any letter case, `_` for `-` (some servers and frameworks fold them
//! together, so `x_account_id` would reach an agent as `x-account-id`), leading or trailing
//! whitespace, any number of duplicates, and identity names listed as tokens of the
//! `Connection` header. The last one matters because a hop-by-hop token tells the next
//! proxy to delete that header: a client sending `Connection: x-account-id` could make the
//! gateway's own injected value vanish on the way to the agent. Such tokens are removed from
//! `Connection` (other tokens, e.g. `upgrade`, are kept so WebSockets still work).

use http::header::{HeaderMap, HeaderName, CONNECTION};
use http::HeaderValue;

/// The header carrying the gateway's account id toward the agent.
pub const ACCOUNT_HEADER: &str = "x-account-id";

/// Identity headers a client must not be able to set: any spelling of these (case,
/// underscores for dashes) is removed before the gateway injects its own value.
pub const IDENTITY_HEADERS: &[&str] = &[
    ACCOUNT_HEADER,
    "x-tether-account-id",
    "x-tether-session-owner",
];

/// Whether `name` is one of the built-in identity headers in any spelling. (Configured
/// extra names are handled by [`IdentityHeaders`].)
pub fn is_identity_header(name: &str) -> bool {
    let normalized = normalize_name(name);
    IDENTITY_HEADERS.contains(&normalized.as_str())
}

/// Lower-cases, trims, and turns `_` into `-`: the one spelling compared.
pub fn normalize_name(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c == '_' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// The built-in identity headers plus a configured list (`auth.identity_headers`).
#[derive(Debug, Clone)]
pub struct IdentityHeaders {
    names: Vec<String>,
}

impl Default for IdentityHeaders {
    fn default() -> Self {
        Self::new::<&str>(&[])
    }
}

impl IdentityHeaders {
    /// `extra` names are matched in every spelling too.
    pub fn new<S: AsRef<str>>(extra: &[S]) -> Self {
        let mut names: Vec<String> = IDENTITY_HEADERS.iter().map(|n| (*n).to_owned()).collect();
        for n in extra {
            let n = normalize_name(n.as_ref());
            if !n.is_empty() && !names.contains(&n) {
                names.push(n);
            }
        }
        Self { names }
    }

    /// Whether `name` is an identity header in any spelling.
    pub fn is_identity(&self, name: &str) -> bool {
        let n = normalize_name(name);
        self.names.contains(&n)
    }

    /// Removes every identity header from `headers` (all copies, every spelling) and the
    /// identity tokens from `Connection`. Returns how many header values were removed, so the
    /// caller can count spoofing attempts without logging their values.
    pub fn strip(&self, headers: &mut HeaderMap) -> usize {
        let mut removed = 0;
        // Names given as Connection tokens: if a client lists an identity header there, the
        // header itself goes (already covered below) and so does the token.
        self.strip_connection_tokens(headers);
        let doomed: Vec<HeaderName> = headers
            .keys()
            .filter(|n| self.is_identity(n.as_str()))
            .cloned()
            .collect();
        for name in doomed {
            // `remove` drops only one entry per call in older `http`; drain them all.
            if let http::header::Entry::Occupied(e) = headers.entry(name) {
                removed += e.remove_entry_mult().1.count();
            }
        }
        removed
    }

    fn strip_connection_tokens(&self, headers: &mut HeaderMap) {
        if !headers.contains_key(CONNECTION) {
            return;
        }
        let mut kept: Vec<String> = Vec::new();
        let mut changed = false;
        for value in headers.get_all(CONNECTION) {
            // A value that is not visible ASCII cannot be a list of tokens; drop it whole.
            let Ok(text) = value.to_str() else {
                changed = true;
                continue;
            };
            for token in text.split(',') {
                let token = token.trim();
                if token.is_empty() {
                    continue;
                }
                if self.is_identity(token) {
                    changed = true;
                } else {
                    kept.push(token.to_owned());
                }
            }
        }
        if !changed {
            return;
        }
        headers.remove(CONNECTION);
        if !kept.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&kept.join(", ")) {
                headers.insert(CONNECTION, v);
            }
        }
    }

    /// What [`IdentityHeaders::strip`] would do, for header containers that must be
    /// edited through their own API (pingora's `RequestHeader` keeps a case-preserving
    /// name map beside its `HeaderMap`, so use `remove_header`/`insert_header` there):
    /// the names to remove (each with all its copies), and, when the `Connection` header
    /// must change, its new value (`Some(None)`: remove it).
    pub fn plan(&self, headers: &HeaderMap) -> StripPlan {
        let remove = headers
            .keys()
            .filter(|n| self.is_identity(n.as_str()))
            .cloned()
            .collect();
        let mut copy = HeaderMap::new();
        for v in headers.get_all(CONNECTION) {
            copy.append(CONNECTION, v.clone());
        }
        let before: Vec<HeaderValue> = copy.get_all(CONNECTION).iter().cloned().collect();
        self.strip_connection_tokens(&mut copy);
        let after: Vec<HeaderValue> = copy.get_all(CONNECTION).iter().cloned().collect();
        let connection = (before != after).then(|| after.into_iter().next());
        StripPlan { remove, connection }
    }

    /// Strips, then sets exactly one `x-account-id` to the authenticated account.
    pub fn strip_and_inject(
        &self,
        headers: &mut HeaderMap,
        account_id: &str,
    ) -> Result<usize, http::header::InvalidHeaderValue> {
        let value = HeaderValue::from_str(account_id)?;
        let removed = self.strip(headers);
        headers.insert(HeaderName::from_static(ACCOUNT_HEADER), value);
        Ok(removed)
    }
}

/// The edits [`IdentityHeaders::plan`] computed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StripPlan {
    /// Header names to remove, every copy.
    pub remove: Vec<HeaderName>,
    /// `Some(new)` when `Connection` must be replaced by `new` (`None`: removed).
    pub connection: Option<Option<HeaderValue>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(
                HeaderName::from_bytes(n.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    /// Every spoofing variant ends with exactly one x-account-id, the authenticated one.
    #[test]
    fn spoofing_table() {
        let strip = IdentityHeaders::new(&["X-User-Id"]);
        let cases: &[(&str, &[(&str, &str)])] = &[
            ("plain", &[("x-account-id", "evil")]),
            ("upper", &[("X-ACCOUNT-ID", "evil")]),
            ("mixed", &[("X-Account-Id", "evil")]),
            ("underscores", &[("x_account_id", "evil")]),
            ("mixed separators", &[("x_account-id", "evil")]),
            ("upper underscores", &[("X_ACCOUNT_ID", "evil")]),
            (
                "duplicates",
                &[
                    ("x-account-id", "a"),
                    ("x-account-id", "b"),
                    ("x-account-id", "c"),
                ],
            ),
            (
                "duplicate spellings",
                &[
                    ("x-account-id", "a"),
                    ("x_account_id", "b"),
                    ("X-Account_Id", "c"),
                ],
            ),
            ("tether alias", &[("x-tether-account-id", "evil")]),
            ("owner alias", &[("x_tether_session_owner", "evil")]),
            (
                "configured extra",
                &[("x-user-id", "evil"), ("X_USER_ID", "evil")],
            ),
            ("empty value", &[("x-account-id", "")]),
            (
                "connection token",
                &[
                    ("connection", "keep-alive, x-account-id"),
                    ("x-account-id", "evil"),
                ],
            ),
            ("connection token only", &[("connection", "X_Account_Id")]),
            (
                "connection duplicate",
                &[("connection", "close"), ("connection", "x-user-id")],
            ),
        ];
        for (what, pairs) in cases {
            let mut h = map(pairs);
            h.append("content-type", HeaderValue::from_static("application/json"));
            strip.strip_and_inject(&mut h, "acme").expect("inject");
            let ids: Vec<_> = h.get_all("x-account-id").iter().collect();
            assert_eq!(ids, vec![HeaderValue::from_static("acme")], "{what}");
            for name in h.keys() {
                let n = name.as_str();
                assert!(
                    n == "x-account-id" || !strip.is_identity(n),
                    "{what}: {n} survived"
                );
            }
            for v in h.get_all(CONNECTION) {
                let v = v.to_str().expect("ascii").to_ascii_lowercase();
                assert!(!v.contains("account") && !v.contains("user"), "{what}: {v}");
            }
            assert_eq!(
                h.get("content-type").map(|v| v.as_bytes()),
                Some(&b"application/json"[..]),
                "{what}"
            );
        }
    }

    #[test]
    fn plan_matches_strip() {
        let strip = IdentityHeaders::new(&["x-user-id"]);
        let mut h = map(&[
            ("connection", "Upgrade, x_account_id"),
            ("x-account-id", "a"),
            ("X_User_Id", "b"),
            ("upgrade", "websocket"),
        ]);
        let plan = strip.plan(&h);
        assert_eq!(plan.remove.len(), 2);
        assert_eq!(
            plan.connection,
            Some(Some(HeaderValue::from_static("Upgrade")))
        );
        assert_eq!(
            strip
                .plan(&map(&[("connection", "x-account-id")]))
                .connection,
            Some(None)
        );
        assert_eq!(
            strip.plan(&map(&[("connection", "close")])).connection,
            None
        );
        strip.strip(&mut h);
        assert_eq!(strip.plan(&h), StripPlan::default());
    }

    #[test]
    fn other_connection_tokens_are_kept() {
        let strip = IdentityHeaders::default();
        let mut h = map(&[
            ("connection", "Upgrade, x-account-id"),
            ("upgrade", "websocket"),
        ]);
        assert_eq!(strip.strip(&mut h), 0);
        assert_eq!(
            h.get(CONNECTION).map(|v| v.as_bytes()),
            Some(&b"Upgrade"[..])
        );
        assert!(h.contains_key("upgrade"));
        let mut h = map(&[("connection", "close")]);
        strip.strip(&mut h);
        assert_eq!(h.get(CONNECTION).map(|v| v.as_bytes()), Some(&b"close"[..]));
    }

    #[test]
    fn counts_removed_values_and_keeps_lookalikes() {
        let strip = IdentityHeaders::default();
        let mut h = map(&[
            ("x-account-id", "a"),
            ("x_account_id", "b"),
            ("x-account-idx", "keep"),
            ("x-accountid", "keep"),
        ]);
        assert_eq!(strip.strip(&mut h), 2);
        assert!(h.contains_key("x-account-idx"));
        assert!(h.contains_key("x-accountid"));
        assert!(strip.strip_and_inject(&mut h, "bad\nvalue").is_err());
    }
}
