//! Tether's request policies: who the caller is (the account), and which headers a caller
//! may never set toward the agent. Authentication and rate limits build on this.

/// The account every request belongs to while no authentication is configured.
pub const LOCAL_ACCOUNT: &str = "local";

/// The header carrying the gateway's account id toward the agent.
pub const ACCOUNT_HEADER: &str = "x-account-id";

/// Identity headers a client must not be able to set: any spelling of these (case,
/// underscores for dashes) is removed before the gateway injects its own value.
pub const IDENTITY_HEADERS: &[&str] = &[
    ACCOUNT_HEADER,
    "x-tether-account-id",
    "x-tether-session-owner",
];

/// Whether `name` is an identity header in any spelling.
pub fn is_identity_header(name: &str) -> bool {
    let normalized: String = name
        .trim()
        .chars()
        .map(|c| {
            if c == '_' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    IDENTITY_HEADERS.contains(&normalized.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_is_caught() {
        for name in [
            "x-account-id",
            "X-Account-Id",
            "X_ACCOUNT_ID",
            "x_account-id",
            " x-account-id",
        ] {
            assert!(is_identity_header(name), "{name}");
        }
        assert!(!is_identity_header("x-account-idx"));
        assert!(!is_identity_header("content-type"));
    }
}
