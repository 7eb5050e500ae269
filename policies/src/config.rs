//! Configuration tables for the policies: `[auth]`, `[[auth.api_keys]]`, `[auth.jwt]`,
//! `[rate_limits]` (with `[rate_limits.accounts.<id>]` overrides) and `[limits]`.
//!
//! The gateway embeds these structs in its own `Settings` (they all implement `Default`,
//! so `#[arg(skip)]` works) and calls [`AuthConfig::validate`],
//! [`RateLimitConfig::validate`] and [`LimitsConfig::validate`] at start-up. Every error
//! names the offending key with its full dotted path, e.g. `auth.jwt.algorithms`.
//!
//! ```toml
//! [auth]
//! identity_headers = ["x-user-id"]          # stripped from client requests, like x-account-id
//!
//! [[auth.api_keys]]
//! id = "ci"                                  # credential id (logs, per-credential limits)
//! account_id = "acme"
//! sha256 = "<64 hex digits: SHA-256 of the key>"
//!
//! [auth.jwt]
//! algorithms = ["RS256", "ES256"]            # required, never taken from the token
//! issuer = "https://idp.example"
//! audience = "tether"                        # a string or a list
//! leeway_seconds = 30
//! account_claim = "account_id"
//! public_key_files = ["/etc/tether/idp.pem"]
//! jwks_file = "/etc/tether/jwks.json"
//! jwks_url = "http://idp.internal/.well-known/jwks.json"
//! jwks_ca_file = "/etc/tether/idp-ca.pem"    # https only: trust this CA, not the web roots
//! jwks_refresh_seconds = 300
//! jwks_refetch_cooldown_seconds = 10
//! hmac_secret_env = "TETHER_JWT_SECRET"      # name of the variable, never the secret
//! max_token_bytes = 8192
//!
//! [rate_limits]
//! requests_per_second = 10.0
//! burst = 20
//! concurrent_runs = 4
//! per_credential_requests_per_second = 5.0
//! per_credential_burst = 10
//!
//! [rate_limits.accounts.acme]
//! requests_per_second = 100.0
//! burst = 200
//! concurrent_runs = 16
//!
//! [limits]
//! max_body_bytes = 10485760
//! header_timeout_seconds = 10
//! min_body_bytes_per_second = 1024
//! max_json_depth = 64
//! attachment_max_bytes = 20971520
//! attachment_types = ["image/png", "image/jpeg", "application/pdf", "text/plain"]
//! ```

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;

use jsonwebtoken::Algorithm;
use serde::Deserialize;

/// A configuration value that is refused; `key` is the full dotted path of the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration key `{key}`: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

pub(crate) fn bad(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

/// `[auth]`. With neither API keys nor `[auth.jwt]`, authentication is off and every
/// request belongs to the `local` account (see [`AuthConfig::is_enabled`]).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `[[auth.api_keys]]`: keys stored as SHA-256 digests.
    #[serde(default)]
    pub api_keys: Vec<ApiKeyConfig>,
    /// `[auth.jwt]`.
    pub jwt: Option<JwtConfig>,
    /// Header names (besides the built-in [`crate::headers::IDENTITY_HEADERS`]) a client may never
    /// send toward the agent.
    #[serde(default)]
    pub identity_headers: Vec<String>,
}

/// One `[[auth.api_keys]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Names the key in logs and per-credential limits (the key itself never appears).
    pub id: String,
    /// The account a caller presenting this key acts as.
    pub account_id: String,
    /// Lower- or upper-case hex SHA-256 of the key (`printf %s "$KEY" | sha256sum`).
    pub sha256: String,
}

/// `aud` accepted as a single string or a list.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// `[auth.jwt]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// The only algorithms accepted (RS256/384/512, PS256/384/512, ES256/384, EdDSA,
    /// HS256/384/512). Required: the token's own `alg` is checked against it, never trusted.
    pub algorithms: Vec<String>,
    /// Required `iss` value, when set.
    pub issuer: Option<String>,
    /// Accepted `aud` values (one must match), when set.
    pub audience: Option<OneOrMany>,
    /// Clock skew tolerated for `exp`, `nbf` and `iat`.
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
    /// The top-level claim holding the account id; must be a non-empty string.
    #[serde(default = "default_account_claim")]
    pub account_claim: String,
    /// PEM public keys (RSA, EC or Ed25519, SPKI or PKCS#1).
    #[serde(default)]
    pub public_key_files: Vec<PathBuf>,
    /// Name of the environment variable holding the HMAC secret (at least 32 bytes).
    pub hmac_secret_env: Option<String>,
    /// A JWKS document on disk, read once at start.
    pub jwks_file: Option<PathBuf>,
    /// A JWKS URL, fetched on first use, refreshed when older than
    /// `jwks_refresh_seconds` and on an unknown `kid`; the last good set is kept when the
    /// URL fails.
    pub jwks_url: Option<String>,
    /// PEM certificate authorities an https `jwks_url`'s certificate must chain to,
    /// trusted instead of the built-in web roots (an identity provider with a private CA).
    pub jwks_ca_file: Option<PathBuf>,
    #[serde(default = "default_jwks_refresh")]
    pub jwks_refresh_seconds: u64,
    /// Least time between two fetches caused by requests (unknown `kid`, stale set), so a
    /// flood of made-up `kid`s cannot be turned into a flood toward the identity provider.
    #[serde(default = "default_refetch_cooldown")]
    pub jwks_refetch_cooldown_seconds: u64,
    /// Tokens longer than this are refused before any decoding.
    #[serde(default = "default_max_token_bytes")]
    pub max_token_bytes: usize,
}

fn default_leeway() -> u64 {
    30
}
fn default_account_claim() -> String {
    "account_id".to_owned()
}
fn default_jwks_refresh() -> u64 {
    300
}
fn default_refetch_cooldown() -> u64 {
    10
}
fn default_max_token_bytes() -> usize {
    8192
}

/// Algorithm names accepted in `auth.jwt.algorithms`, exactly as spelled in a JWT header.
pub const SUPPORTED_ALGORITHMS: &[&str] = &[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384", "EdDSA",
];

impl AuthConfig {
    /// Whether any authentication is configured. When false the gateway serves the single
    /// `local` account and should refuse a non-loopback listen address unless told to run
    /// unauthenticated.
    pub fn is_enabled(&self) -> bool {
        !self.api_keys.is_empty() || self.jwt.is_some()
    }

    /// Checks everything that can be checked without reading files or the environment
    /// ([`crate::auth::Authenticator::new`] does that and names the key too).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut ids = HashSet::new();
        let mut digests = HashSet::new();
        for (i, key) in self.api_keys.iter().enumerate() {
            let at = |field: &str| format!("auth.api_keys[{i}].{field}");
            if key.id.trim().is_empty() {
                return Err(bad(at("id"), "is empty"));
            }
            if !ids.insert(key.id.as_str()) {
                return Err(bad(at("id"), format!("{:?} is used twice", key.id)));
            }
            crate::validate_account_id(&key.account_id).map_err(|m| bad(at("account_id"), m))?;
            let digest = parse_sha256_hex(&key.sha256).ok_or_else(|| {
                bad(
                    at("sha256"),
                    "must be 64 hex digits (the SHA-256 of the key, not the key)",
                )
            })?;
            if !digests.insert(digest) {
                return Err(bad(at("sha256"), "the same key digest is listed twice"));
            }
        }
        for name in &self.identity_headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(bad(
                    "auth.identity_headers",
                    format!("{name:?} is not a header name"),
                ));
            }
        }
        if let Some(jwt) = &self.jwt {
            jwt.validate()?;
        }
        Ok(())
    }
}

impl JwtConfig {
    /// The allowlist parsed; `validate` has already refused anything unparsable.
    pub(crate) fn parsed_algorithms(&self) -> Result<Vec<Algorithm>, ConfigError> {
        let mut out = Vec::new();
        for name in &self.algorithms {
            // `none` is not an algorithm jsonwebtoken knows, but say so plainly.
            if name.trim().eq_ignore_ascii_case("none") {
                return Err(bad(
                    "auth.jwt.algorithms",
                    "\"none\" (unsigned tokens) is never accepted",
                ));
            }
            if !SUPPORTED_ALGORITHMS.contains(&name.as_str()) {
                return Err(bad(
                    "auth.jwt.algorithms",
                    format!(
                        "{name:?} is not supported; use one of {}",
                        SUPPORTED_ALGORITHMS.join(", ")
                    ),
                ));
            }
            let alg = Algorithm::from_str(name)
                .map_err(|_| bad("auth.jwt.algorithms", format!("{name:?} is not supported")))?;
            if !out.contains(&alg) {
                out.push(alg);
            }
        }
        Ok(out)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.algorithms.is_empty() {
            return Err(bad(
                "auth.jwt.algorithms",
                "is required: list the algorithms your issuer signs with, e.g. [\"RS256\"]",
            ));
        }
        let algs = self.parsed_algorithms()?;
        let hmac = algs.iter().any(|a| is_hmac(*a));
        let asymmetric = algs.iter().any(|a| !is_hmac(*a));
        if hmac && self.hmac_secret_env.is_none() {
            return Err(bad(
                "auth.jwt.hmac_secret_env",
                "an HS* algorithm is allowed, so name the environment variable holding the secret",
            ));
        }
        if !hmac && self.hmac_secret_env.is_some() {
            return Err(bad(
                "auth.jwt.hmac_secret_env",
                "is set but no HS* algorithm is in auth.jwt.algorithms",
            ));
        }
        if let Some(env) = &self.hmac_secret_env {
            if env.is_empty() || env.contains('=') || env.contains('\0') {
                return Err(bad(
                    "auth.jwt.hmac_secret_env",
                    "must be the name of an environment variable (not the secret itself)",
                ));
            }
        }
        let has_public = !self.public_key_files.is_empty()
            || self.jwks_file.is_some()
            || self.jwks_url.is_some();
        if asymmetric && !has_public {
            return Err(bad(
                "auth.jwt.algorithms",
                "lists a public-key algorithm but none of public_key_files, jwks_file, jwks_url is set",
            ));
        }
        if !asymmetric && has_public {
            return Err(bad(
                "auth.jwt.algorithms",
                "public keys are configured but only HS* algorithms are allowed",
            ));
        }
        if let Some(url) = &self.jwks_url {
            validate_jwks_url(url)?;
        }
        if self.jwks_ca_file.is_some()
            && !self
                .jwks_url
                .as_ref()
                .is_some_and(|u| u.starts_with("https://"))
        {
            return Err(bad(
                "auth.jwt.jwks_ca_file",
                "is only used for an https:// jwks_url",
            ));
        }
        if self.leeway_seconds > 300 {
            return Err(bad(
                "auth.jwt.leeway_seconds",
                "at most 300 (a few seconds of clock skew is the intent)",
            ));
        }
        if self.account_claim.trim().is_empty() {
            return Err(bad("auth.jwt.account_claim", "is empty"));
        }
        if let Some(iss) = &self.issuer {
            if iss.is_empty() {
                return Err(bad("auth.jwt.issuer", "is empty"));
            }
        }
        if let Some(aud) = &self.audience {
            let v = aud.to_vec();
            if v.is_empty() || v.iter().any(|a| a.is_empty()) {
                return Err(bad("auth.jwt.audience", "contains an empty value"));
            }
        }
        if self.jwks_refresh_seconds == 0 {
            return Err(bad(
                "auth.jwt.jwks_refresh_seconds",
                "must be greater than 0",
            ));
        }
        if !(256..=65536).contains(&self.max_token_bytes) {
            return Err(bad("auth.jwt.max_token_bytes", "must be in 256..=65536"));
        }
        Ok(())
    }
}

fn validate_jwks_url(url: &str) -> Result<(), ConfigError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| bad("auth.jwt.jwks_url", format!("{url:?} is not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") if cfg!(feature = "jwks-https") => {}
        Some("https") => {
            return Err(bad(
                "auth.jwt.jwks_url",
                "https needs the policies crate's `jwks-https` feature; this build has only http",
            ))
        }
        _ => {
            return Err(bad(
                "auth.jwt.jwks_url",
                "must be an http:// or https:// URL",
            ))
        }
    }
    if uri.host().is_none() {
        return Err(bad("auth.jwt.jwks_url", "has no host"));
    }
    Ok(())
}

pub(crate) fn is_hmac(alg: Algorithm) -> bool {
    matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// 64 hex digits into 32 bytes.
pub(crate) fn parse_sha256_hex(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// `[rate_limits]`. A missing rate disables that limit; the whole table missing means no
/// rate limiting at all.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second per account (fractions allowed, e.g. 0.5).
    pub requests_per_second: Option<f64>,
    /// Requests an idle account may send at once (default: the rate, rounded up).
    pub burst: Option<u32>,
    /// Runs an account may have in flight at once.
    pub concurrent_runs: Option<u32>,
    /// Sustained requests per second per credential (API key id or JWT subject).
    pub per_credential_requests_per_second: Option<f64>,
    pub per_credential_burst: Option<u32>,
    /// `[rate_limits.accounts.<account_id>]`: overrides for one account.
    #[serde(default)]
    pub accounts: BTreeMap<String, AccountRateLimit>,
}

/// `[rate_limits.accounts.<id>]`: any key left out falls back to `[rate_limits]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountRateLimit {
    pub requests_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub concurrent_runs: Option<u32>,
}

fn check_rate(key: &str, rps: Option<f64>, burst: Option<u32>) -> Result<(), ConfigError> {
    if let Some(r) = rps {
        if !r.is_finite() || r <= 0.0 || r > 1_000_000.0 {
            return Err(bad(
                key,
                "must be a number greater than 0 (at most 1000000)",
            ));
        }
        // governor works in whole nanoseconds per token.
        if 1.0 / r > 86_400.0 {
            return Err(bad(key, "is below one request per day"));
        }
    }
    if burst == Some(0) {
        return Err(bad(
            key.replace("requests_per_second", "burst"),
            "must be greater than 0",
        ));
    }
    Ok(())
}

impl RateLimitConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_rate(
            "rate_limits.requests_per_second",
            self.requests_per_second,
            self.burst,
        )?;
        check_rate(
            "rate_limits.per_credential_requests_per_second",
            self.per_credential_requests_per_second,
            self.per_credential_burst,
        )?;
        if self.concurrent_runs == Some(0) {
            return Err(bad("rate_limits.concurrent_runs", "must be greater than 0"));
        }
        for (account, o) in &self.accounts {
            crate::validate_account_id(account)
                .map_err(|m| bad(format!("rate_limits.accounts.{account}"), m))?;
            check_rate(
                &format!("rate_limits.accounts.{account}.requests_per_second"),
                o.requests_per_second,
                o.burst,
            )?;
            if o.concurrent_runs == Some(0) {
                return Err(bad(
                    format!("rate_limits.accounts.{account}.concurrent_runs"),
                    "must be greater than 0",
                ));
            }
            if o.burst.is_some() && o.requests_per_second.or(self.requests_per_second).is_none() {
                return Err(bad(
                    format!("rate_limits.accounts.{account}.burst"),
                    "has no rate to go with it (set requests_per_second)",
                ));
            }
        }
        if self.burst.is_some() && self.requests_per_second.is_none() {
            return Err(bad(
                "rate_limits.burst",
                "has no rate to go with it (set requests_per_second)",
            ));
        }
        if self.per_credential_burst.is_some() && self.per_credential_requests_per_second.is_none()
        {
            return Err(bad(
                "rate_limits.per_credential_burst",
                "has no rate to go with it (set per_credential_requests_per_second)",
            ));
        }
        Ok(())
    }
}

/// `[limits]`: request size and pace limits. Every key has a default (see the accessors).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_body_bytes: Option<usize>,
    pub header_timeout_seconds: Option<u64>,
    pub min_body_bytes_per_second: Option<u64>,
    pub max_json_depth: Option<usize>,
    pub attachment_max_bytes: Option<usize>,
    /// MIME types accepted in attachments; `type/*` allows a whole family.
    pub attachment_types: Option<Vec<String>>,
}

/// Attachment types allowed when `limits.attachment_types` is not set.
pub const DEFAULT_ATTACHMENT_TYPES: &[&str] = &[
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
];

impl LimitsConfig {
    /// Largest request body (default 10 MiB); larger is 413.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes.unwrap_or(10 << 20)
    }
    /// Total time a client has to send the request headers (default 10 s).
    pub fn header_timeout_seconds(&self) -> u64 {
        self.header_timeout_seconds.unwrap_or(10)
    }
    /// Slowest accepted body upload, averaged (default 1024 B/s); slower is cut off.
    pub fn min_body_bytes_per_second(&self) -> u64 {
        self.min_body_bytes_per_second.unwrap_or(1024)
    }
    /// Deepest accepted JSON nesting (default 64, at most 128).
    pub fn max_json_depth(&self) -> usize {
        self.max_json_depth.unwrap_or(64)
    }
    /// Largest decoded attachment (default 20 MiB).
    pub fn attachment_max_bytes(&self) -> usize {
        self.attachment_max_bytes.unwrap_or(20 << 20)
    }
    /// The attachment allowlist, lower-cased.
    pub fn attachment_types(&self) -> Vec<String> {
        match &self.attachment_types {
            Some(v) => v.iter().map(|t| t.trim().to_ascii_lowercase()).collect(),
            None => DEFAULT_ATTACHMENT_TYPES
                .iter()
                .map(|t| (*t).to_owned())
                .collect(),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |key: &str, v: Option<u64>| match v {
            Some(0) => Err(bad(key, "must be greater than 0")),
            _ => Ok(()),
        };
        positive(
            "limits.max_body_bytes",
            self.max_body_bytes.map(|v| v as u64),
        )?;
        positive("limits.header_timeout_seconds", self.header_timeout_seconds)?;
        positive(
            "limits.max_json_depth",
            self.max_json_depth.map(|v| v as u64),
        )?;
        positive(
            "limits.attachment_max_bytes",
            self.attachment_max_bytes.map(|v| v as u64),
        )?;
        if self.max_json_depth() > 128 {
            return Err(bad("limits.max_json_depth", "at most 128"));
        }
        if let Some(types) = &self.attachment_types {
            for t in types {
                let t = t.trim();
                let ok = t.split_once('/').is_some_and(|(a, b)| {
                    !a.is_empty()
                        && a != "*"
                        && !b.is_empty()
                        && t.bytes().all(|c| c.is_ascii_graphic() && c != b';')
                });
                if !ok {
                    return Err(bad(
                        "limits.attachment_types",
                        format!("{t:?} is not a MIME type such as image/png or image/*"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        auth: AuthConfig,
        #[serde(default)]
        rate_limits: RateLimitConfig,
        #[serde(default)]
        limits: LimitsConfig,
    }

    const KEY_HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn full_example_parses_and_validates() {
        let text = format!(
            r#"
            [auth]
            identity_headers = ["x-user-id"]
            [[auth.api_keys]]
            id = "ci"
            account_id = "acme"
            sha256 = "{KEY_HEX}"
            [auth.jwt]
            algorithms = ["RS256", "ES256"]
            issuer = "https://idp.example"
            audience = ["tether", "other"]
            jwks_url = "http://127.0.0.1:9/jwks.json"
            [rate_limits]
            requests_per_second = 10.0
            burst = 20
            concurrent_runs = 4
            [rate_limits.accounts.acme]
            requests_per_second = 100.0
            [limits]
            max_json_depth = 32
            attachment_types = ["image/png", "image/*"]
            "#
        );
        let f: File = toml::from_str(&text).expect("parses");
        f.auth.validate().expect("auth");
        f.rate_limits.validate().expect("rate");
        f.limits.validate().expect("limits");
        let jwt = f.auth.jwt.as_ref().expect("jwt");
        assert_eq!(jwt.leeway_seconds, 30);
        assert_eq!(jwt.account_claim, "account_id");
        assert!(f.auth.is_enabled());
        assert!(!AuthConfig::default().is_enabled());
    }

    #[test]
    fn unknown_keys_are_refused() {
        for text in [
            "[auth]\napi_key = []",
            "[auth.jwt]\nalgorithms=[\"RS256\"]\nalg = \"RS256\"",
            "[rate_limits]\nrps = 1",
            "[rate_limits.accounts.a]\nrate = 1",
            "[limits]\nmax_body = 1",
        ] {
            assert!(toml::from_str::<File>(text).is_err(), "{text}");
        }
    }

    fn jwt(extra: &str) -> Result<(), ConfigError> {
        let f: File = toml::from_str(&format!("[auth.jwt]\n{extra}"))
            .map_err(|e| bad("toml", e.to_string()))?;
        f.auth.validate()
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases: &[(&str, &str)] = &[
            ("algorithms = []\njwks_file = \"x\"", "auth.jwt.algorithms"),
            ("algorithms = [\"none\"]", "auth.jwt.algorithms"),
            (
                "algorithms = [\"RS257\"]\njwks_file = \"x\"",
                "auth.jwt.algorithms",
            ),
            ("algorithms = [\"RS256\"]", "auth.jwt.algorithms"),
            ("algorithms = [\"HS256\"]", "auth.jwt.hmac_secret_env"),
            (
                "algorithms = [\"RS256\"]\njwks_file = \"x\"\nhmac_secret_env = \"S\"",
                "auth.jwt.hmac_secret_env",
            ),
            (
                "algorithms = [\"HS256\"]\nhmac_secret_env = \"a=b\"",
                "auth.jwt.hmac_secret_env",
            ),
            (
                "algorithms = [\"RS256\"]\njwks_url = \"ftp://x/\"",
                "auth.jwt.jwks_url",
            ),
            (
                "algorithms = [\"RS256\"]\njwks_file = \"x\"\nleeway_seconds = 3600",
                "auth.jwt.leeway_seconds",
            ),
            (
                "algorithms = [\"RS256\"]\njwks_file = \"x\"\naccount_claim = \"\"",
                "auth.jwt.account_claim",
            ),
            (
                "algorithms = [\"RS256\"]\njwks_file = \"x\"\nmax_token_bytes = 10",
                "auth.jwt.max_token_bytes",
            ),
        ];
        for (text, key) in cases {
            let err = jwt(text).expect_err(text);
            assert_eq!(err.key, *key, "{text}: {err}");
        }
        let f: File = toml::from_str(
            "[[auth.api_keys]]\nid = \"a\"\naccount_id = \"acme\"\nsha256 = \"abc\"",
        )
        .expect("parses");
        assert_eq!(
            f.auth.validate().expect_err("short").key,
            "auth.api_keys[0].sha256"
        );
        let f: File = toml::from_str(&format!(
            "[[auth.api_keys]]\nid = \"a\"\naccount_id = \"\"\nsha256 = \"{KEY_HEX}\""
        ))
        .expect("parses");
        assert_eq!(
            f.auth.validate().expect_err("empty").key,
            "auth.api_keys[0].account_id"
        );
        let f: File = toml::from_str("[rate_limits]\nrequests_per_second = 0.0").expect("parses");
        assert_eq!(
            f.rate_limits.validate().expect_err("zero").key,
            "rate_limits.requests_per_second"
        );
        let f: File =
            toml::from_str("[rate_limits.accounts.acme]\nconcurrent_runs = 0").expect("parses");
        assert_eq!(
            f.rate_limits.validate().expect_err("zero").key,
            "rate_limits.accounts.acme.concurrent_runs"
        );
        let f: File = toml::from_str("[limits]\nattachment_types = [\"png\"]").expect("parses");
        assert_eq!(
            f.limits.validate().expect_err("type").key,
            "limits.attachment_types"
        );
        let f: File = toml::from_str("[limits]\nmax_body_bytes = 0").expect("parses");
        assert_eq!(
            f.limits.validate().expect_err("zero").key,
            "limits.max_body_bytes"
        );
    }
}
