//! Tether's request policies: who the caller is (the account), which headers a caller may
//! never set toward the agent, how fast an account may go, and what input is accepted.
//!
//! The gateway wires them in with a few calls, all built once from configuration:
//!
//! ```no_run
//! # async fn demo(headers: &mut http::HeaderMap) -> Result<(), Box<dyn std::error::Error>> {
//! use policies::{auth::Authenticator, headers::IdentityHeaders, limits::RateLimits};
//! use policies::config::{AuthConfig, LimitsConfig, RateLimitConfig};
//! # let (auth_cfg, rate_cfg, limits_cfg) =
//! #     (AuthConfig::default(), RateLimitConfig::default(), LimitsConfig::default());
//! auth_cfg.validate()?;
//! rate_cfg.validate()?;
//! limits_cfg.validate()?;
//! let auth = Authenticator::new(&auth_cfg)?;          // reads key files and env once
//! let limits = RateLimits::new(&rate_cfg);
//! let strip = IdentityHeaders::new(&auth_cfg.identity_headers);
//!
//! // request_filter:
//! let identity = auth.authenticate(headers).await?;    // 401: err.www_authenticate()
//! limits.check(&identity)?;                            // 429: Retry-After, RateLimit*
//! let _permit = limits.try_acquire_run(&identity.account_id)?; // held for the run
//! policies::input::check_json(b"{}", limits_cfg.max_json_depth())?;
//!
//! // upstream_request_filter:
//! strip.strip(headers);
//! headers.insert(policies::ACCOUNT_HEADER, identity.account_id.parse()?);
//!
//! // a background service, every minute or so:
//! limits.retain_recent();
//! # Ok(()) }
//! ```

pub mod auth;
pub mod config;
pub mod headers;
pub mod input;
pub mod limits;

pub use auth::{AuthError, Authenticator, Identity};
pub use config::ConfigError;
pub use headers::{
    is_identity_header, IdentityHeaders, StripPlan, ACCOUNT_HEADER, IDENTITY_HEADERS,
};
pub use input::InputLimitError;
pub use limits::{Limited, RateLimits, RunPermit};

/// The account every request belongs to while no authentication is configured.
pub const LOCAL_ACCOUNT: &str = "local";

/// Longest account id accepted from a token or configuration.
pub const MAX_ACCOUNT_ID_BYTES: usize = 256;

/// Account ids end up in a header toward the agent, in log fields and in store keys, so
/// they are restricted to visible ASCII without separators that would confuse any of them.
pub fn validate_account_id(id: &str) -> Result<(), &'static str> {
    if id.is_empty() {
        return Err("is empty");
    }
    if id.len() > MAX_ACCOUNT_ID_BYTES {
        return Err("is longer than 256 bytes");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_graphic() && !b",;\"\\".contains(&b))
    {
        return Err("may hold only visible ASCII without , ; \" or \\");
    }
    Ok(())
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

    #[test]
    fn account_ids() {
        assert!(validate_account_id("acme-01.prod:eu").is_ok());
        for bad in ["", "a b", "a,b", "a\nb", "é", &"a".repeat(257)] {
            assert!(validate_account_id(bad).is_err(), "{bad:?}");
        }
    }
}
