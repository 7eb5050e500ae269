//! Authentication: turns a request's credential (an API key or a JWT) into the [`Identity`]
//! (account and credential) the gateway acts for, or an [`AuthError`] ready to become a 401.
//!
//! Rules that are easy to get wrong, and why they are here:
//! - The JWT algorithm comes from `auth.jwt.algorithms`, never from the token. The
//!   header's `alg` string is compared with the allowlist before anything else, so `none`
//!   in any spelling, and any algorithm not configured, is refused up front (RFC 8725 §3.1).
//! - Keys are picked by algorithm family and `kid` from configured sources only. Header
//!   parameters that carry or point at keys (`jwk`, `jku`, `x5u`, `x5c`) are ignored; an
//!   attacker who could choose the key could sign anything (RFC 8725 §3.10).
//! - HMAC keys come only from `auth.jwt.hmac_secret_env`, never from a JWKS, so a public
//!   key can never be used as an HMAC secret (algorithm confusion).
//! - API keys are stored as SHA-256 digests and compared in constant time.
//! - Error messages are fixed strings: a token or key is never echoed or logged.

use std::collections::HashSet;
use std::io::Read;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::HeaderMap;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{bad, parse_sha256_hex, AuthConfig, ConfigError, JwtConfig};

/// Who a request is from, as decided by the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The tenant every session, run and attachment belongs to.
    pub account_id: String,
    /// The credential used: `key:<id>` for an API key, `jwt:<sub>` for a token (falling
    /// back to `jwt:<account>` without a usable `sub`), `local` without authentication.
    /// Keys per-credential rate limits; safe to log.
    pub credential_id: String,
}

impl Identity {
    /// The single account served while no authentication is configured.
    pub fn local() -> Self {
        Self {
            account_id: crate::LOCAL_ACCOUNT.to_owned(),
            credential_id: "local".to_owned(),
        }
    }
}

/// Why a request is not authenticated. Messages are fixed text that never contains the
/// credential. Answer with [`AuthError::status`] and a `WWW-Authenticate` header of
/// [`AuthError::www_authenticate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No credential was sent (RFC 6750 §3.1: the challenge carries no error code).
    #[error("authentication required")]
    Missing,
    /// The request carries credentials in a way that cannot be interpreted (400).
    #[error("{0}")]
    InvalidRequest(&'static str),
    /// The credential is not valid (401).
    #[error("{0}")]
    InvalidToken(&'static str),
}

impl AuthError {
    pub fn status(&self) -> u16 {
        match self {
            AuthError::InvalidRequest(_) => 400,
            AuthError::Missing | AuthError::InvalidToken(_) => 401,
        }
    }

    /// The OAuth 2.0 Bearer error code (RFC 6750 §3.1), if any.
    pub fn code(&self) -> Option<&'static str> {
        match self {
            AuthError::Missing => None,
            AuthError::InvalidRequest(_) => Some("invalid_request"),
            AuthError::InvalidToken(_) => Some("invalid_token"),
        }
    }

    /// A message safe to return to the client and to log.
    pub fn message(&self) -> &'static str {
        match self {
            AuthError::Missing => "authentication required",
            AuthError::InvalidRequest(m) | AuthError::InvalidToken(m) => m,
        }
    }

    /// The `WWW-Authenticate` value, e.g.
    /// `Bearer realm="tether", error="invalid_token", error_description="token expired"`.
    pub fn www_authenticate(&self) -> String {
        match self.code() {
            None => "Bearer realm=\"tether\"".to_owned(),
            // Messages are static ASCII without quotes or backslashes, so no escaping.
            Some(code) => format!(
                "Bearer realm=\"tether\", error=\"{code}\", error_description=\"{}\"",
                self.message()
            ),
        }
    }
}

/// A JWKS URL could not be used; the last good key set stays in force.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("JWKS from {url}: {reason}")]
pub struct JwksError {
    pub url: String,
    pub reason: String,
}

const MAX_JWKS_BYTES: u64 = 1 << 20;
/// Keys tried for one token without a `kid`; bounds the work a token can cause.
const MAX_CANDIDATES: usize = 8;
/// RFC 7518 §3.2: an HS256 key is at least as long as the hash.
const MIN_HMAC_SECRET_BYTES: usize = 32;

struct ApiKey {
    digest: [u8; 32],
    account_id: String,
    credential_id: String,
}

/// A verification key and what it may verify.
struct VerifyKey {
    kid: Option<String>,
    /// The JWK's `alg`, when it names one: the key then verifies only that algorithm.
    alg: Option<Algorithm>,
    family: AlgorithmFamily,
    key: DecodingKey,
}

impl VerifyKey {
    fn fits(&self, alg: Algorithm, kid: Option<&str>) -> bool {
        self.family == alg.family()
            && self.alg.is_none_or(|a| a == alg)
            // A key without a kid (PEM file, HMAC secret) may verify any token of its
            // family; a JWKS key with a kid only the tokens naming it.
            && match (&self.kid, kid) {
                (Some(mine), Some(theirs)) => mine == theirs,
                (Some(_), None) | (None, _) => true,
            }
    }
}

struct KeySet {
    keys: Vec<Arc<VerifyKey>>,
    /// When this set was fetched; `None` until the first successful fetch.
    fetched_at: Option<Instant>,
}

struct RemoteJwks {
    url: String,
    agent: ureq::Agent,
    set: RwLock<Arc<KeySet>>,
    /// Serialises fetches and remembers when a request last caused one (the cooldown).
    fetch: tokio::sync::Mutex<Option<Instant>>,
    refresh: Duration,
    cooldown: Duration,
    fetches: AtomicU64,
}

impl RemoteJwks {
    fn snapshot(&self) -> Arc<KeySet> {
        Arc::clone(&self.set.read().unwrap_or_else(PoisonError::into_inner))
    }

    async fn fetch_now(&self) -> Result<usize, JwksError> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let (agent, url) = (self.agent.clone(), self.url.clone());
        let result = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .spawn_blocking(move || fetch_jwks(&agent, &url))
                .await
                .unwrap_or_else(|e| Err(format!("fetch task failed: {e}"))),
            Err(_) => fetch_jwks(&agent, &url),
        };
        match result {
            Ok(keys) => {
                let n = keys.len();
                *self.set.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(KeySet {
                    keys,
                    fetched_at: Some(Instant::now()),
                });
                tracing::info!(url = %self.url, keys = n, "JWKS loaded");
                Ok(n)
            }
            Err(reason) => {
                tracing::warn!(url = %self.url, %reason, "JWKS fetch failed; keeping the last good key set");
                Err(JwksError {
                    url: self.url.clone(),
                    reason,
                })
            }
        }
    }

    /// A fetch caused by a request (unknown `kid`, stale or empty set): at most one per
    /// cooldown, and none if another request fetched while this one waited.
    async fn fetch_for_request(&self, seen: &Arc<KeySet>) {
        let mut last = self.fetch.lock().await;
        if !Arc::ptr_eq(seen, &self.snapshot()) {
            return;
        }
        if last.is_some_and(|t| t.elapsed() < self.cooldown) {
            return;
        }
        *last = Some(Instant::now());
        let _ = self.fetch_now().await;
    }
}

fn fetch_jwks(agent: &ureq::Agent, url: &str) -> Result<Vec<Arc<VerifyKey>>, String> {
    let response = agent.get(url).call().map_err(|e| match e {
        ureq::Error::Status(code, _) => format!("HTTP status {code}"),
        ureq::Error::Transport(t) => format!("transport: {t}"),
    })?;
    let mut body = Vec::new();
    response
        .into_reader()
        .take(MAX_JWKS_BYTES + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading body: {e}"))?;
    if body.len() as u64 > MAX_JWKS_BYTES {
        return Err("larger than 1 MiB".to_owned());
    }
    parse_jwks(&body)
}

/// Usable signature keys of a JWKS document. Keys this build cannot use are skipped rather
/// than failing the set (providers publish encryption keys and new key types too);
/// symmetric (`oct`) keys are always skipped: HMAC secrets come from the environment only.
fn parse_jwks(bytes: &[u8]) -> Result<Vec<Arc<VerifyKey>>, String> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let entries = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("no \"keys\" array")?;
    let mut keys = Vec::new();
    for entry in entries {
        if entry.get("kty").and_then(Value::as_str) == Some("oct") {
            continue;
        }
        if entry
            .get("use")
            .and_then(Value::as_str)
            .is_some_and(|u| u != "sig")
        {
            continue;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(entry.clone()) else {
            continue;
        };
        let alg = match &jwk.common.key_algorithm {
            None => None,
            Some(ka) => match Algorithm::from_str(&ka.to_string()) {
                Ok(a) => Some(a),
                // An encryption algorithm (RSA-OAEP, …): not a signature key.
                Err(_) => continue,
            },
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        keys.push(Arc::new(VerifyKey {
            kid: jwk.common.key_id.clone(),
            alg,
            family: key.family(),
            key,
        }));
    }
    if keys.is_empty() {
        return Err("no usable signature keys".to_owned());
    }
    Ok(keys)
}

fn load_pem(bytes: &[u8]) -> Option<DecodingKey> {
    DecodingKey::from_rsa_pem(bytes)
        .or_else(|_| DecodingKey::from_ec_pem(bytes))
        .or_else(|_| DecodingKey::from_ed_pem(bytes))
        .ok()
}

struct JwtVerifier {
    algorithms: Vec<Algorithm>,
    issuer: Option<String>,
    audience: Option<Vec<String>>,
    leeway: u64,
    account_claim: String,
    max_token_bytes: usize,
    keys: Vec<Arc<VerifyKey>>,
    remote: Option<RemoteJwks>,
}

/// Decides who a request is from. Build once with [`Authenticator::new`]; share it.
pub struct Authenticator {
    api_keys: Vec<ApiKey>,
    jwt: Option<JwtVerifier>,
}

impl std::fmt::Debug for Authenticator {
    // Hand-written so key material can never reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("api_keys", &self.api_keys.len())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

impl Authenticator {
    /// Validates `config`, reads PEM files, the JWKS file and the HMAC secret's environment
    /// variable. A JWKS URL is not fetched here: call [`Authenticator::refresh_jwks`] at
    /// start-up (a failure there is worth a warning, not a refusal to start, since the first
    /// request retries) — or let the first request fetch it.
    pub fn new(config: &AuthConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let api_keys = config
            .api_keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                Ok(ApiKey {
                    digest: parse_sha256_hex(&k.sha256)
                        .ok_or_else(|| bad(format!("auth.api_keys[{i}].sha256"), "bad digest"))?,
                    account_id: k.account_id.clone(),
                    credential_id: format!("key:{}", k.id),
                })
            })
            .collect::<Result<_, ConfigError>>()?;
        let jwt = config.jwt.as_ref().map(JwtVerifier::new).transpose()?;
        Ok(Self { api_keys, jwt })
    }

    /// Whether any authentication is configured; without it every request is
    /// [`Identity::local`].
    pub fn is_enabled(&self) -> bool {
        !self.api_keys.is_empty() || self.jwt.is_some()
    }

    /// Fetches the JWKS URL now (start-up, or a periodic background refresh), regardless of
    /// the cooldown. Returns how many keys were loaded; on failure the last good set stays.
    /// `Ok(0)` when no URL is configured.
    pub async fn refresh_jwks(&self) -> Result<usize, JwksError> {
        match self.jwt.as_ref().and_then(|j| j.remote.as_ref()) {
            Some(remote) => {
                let _guard = remote.fetch.lock().await;
                remote.fetch_now().await
            }
            None => Ok(0),
        }
    }

    /// How often the gateway should call [`Authenticator::refresh_jwks`] in the
    /// background (`auth.jwt.jwks_refresh_seconds`), if a JWKS URL is configured.
    /// Requests also refresh a stale set themselves, so this is an optimisation.
    pub fn jwks_refresh_interval(&self) -> Option<Duration> {
        self.jwt
            .as_ref()
            .and_then(|j| j.remote.as_ref())
            .map(|r| r.refresh)
    }

    /// How many JWKS fetches were attempted (for metrics and tests).
    pub fn jwks_fetch_count(&self) -> u64 {
        self.jwt
            .as_ref()
            .and_then(|j| j.remote.as_ref())
            .map_or(0, |r| r.fetches.load(Ordering::Relaxed))
    }

    /// Authenticates a request from its headers: `Authorization: Bearer <API key or JWT>`
    /// or `x-api-key: <API key>`. Without configured authentication, [`Identity::local`].
    pub async fn authenticate(&self, headers: &HeaderMap) -> Result<Identity, AuthError> {
        if !self.is_enabled() {
            return Ok(Identity::local());
        }
        let mut authorization = headers.get_all(http::header::AUTHORIZATION).iter();
        let mut api_key = headers.get_all("x-api-key").iter();
        let (auth, key) = (authorization.next(), api_key.next());
        if authorization.next().is_some() || api_key.next().is_some() {
            return Err(AuthError::InvalidRequest(
                "credential header sent more than once",
            ));
        }
        let credential = match (auth, key) {
            (None, None) => return Err(AuthError::Missing),
            (Some(_), Some(_)) => {
                return Err(AuthError::InvalidRequest(
                    "send either Authorization or x-api-key, not both",
                ))
            }
            (Some(v), None) => {
                let v = v
                    .to_str()
                    .map_err(|_| AuthError::InvalidRequest("malformed Authorization header"))?;
                let (scheme, rest) = v.trim().split_once(' ').ok_or(AuthError::InvalidRequest(
                    "Authorization must be \"Bearer <token>\"",
                ))?;
                if !scheme.eq_ignore_ascii_case("bearer") {
                    return Err(AuthError::InvalidRequest(
                        "unsupported authorization scheme; use Bearer",
                    ));
                }
                rest.trim()
            }
            (None, Some(v)) => v
                .to_str()
                .map_err(|_| AuthError::InvalidRequest("malformed x-api-key header"))?
                .trim(),
        };
        if credential.is_empty() {
            return Err(AuthError::InvalidRequest("empty credential"));
        }
        if let Some(identity) = self.match_api_key(credential) {
            return Ok(identity);
        }
        match (&self.jwt, key.is_some()) {
            (Some(jwt), false) => jwt.verify(credential).await.inspect_err(|e| {
                tracing::debug!(reason = e.message(), "JWT refused");
            }),
            _ => {
                tracing::debug!("unknown API key");
                Err(AuthError::InvalidToken("unknown API key"))
            }
        }
    }

    fn match_api_key(&self, presented: &str) -> Option<Identity> {
        if self.api_keys.is_empty() {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Compare against every key without stopping early: timing reveals nothing about
        // which key, or how much of one, matched.
        let mut found = None;
        for k in &self.api_keys {
            if bool::from(k.digest.ct_eq(&digest)) {
                found = Some(k);
            }
        }
        found.map(|k| Identity {
            account_id: k.account_id.clone(),
            credential_id: k.credential_id.clone(),
        })
    }
}

impl JwtVerifier {
    fn new(c: &JwtConfig) -> Result<Self, ConfigError> {
        let algorithms = c.parsed_algorithms()?;
        let mut keys = Vec::new();
        for path in &c.public_key_files {
            let bytes = std::fs::read(path).map_err(|e| {
                bad(
                    "auth.jwt.public_key_files",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let key = load_pem(&bytes).ok_or_else(|| {
                bad(
                    "auth.jwt.public_key_files",
                    format!("{} is not an RSA, EC or Ed25519 PEM key", path.display()),
                )
            })?;
            keys.push(Arc::new(VerifyKey {
                kid: None,
                alg: None,
                family: key.family(),
                key,
            }));
        }
        if let Some(path) = &c.jwks_file {
            let bytes = std::fs::read(path).map_err(|e| {
                bad(
                    "auth.jwt.jwks_file",
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            keys.extend(
                parse_jwks(&bytes)
                    .map_err(|e| bad("auth.jwt.jwks_file", format!("{}: {e}", path.display())))?,
            );
        }
        if let Some(var) = &c.hmac_secret_env {
            let secret = std::env::var_os(var).ok_or_else(|| {
                bad(
                    "auth.jwt.hmac_secret_env",
                    format!("environment variable {var} is not set"),
                )
            })?;
            let secret = secret.as_encoded_bytes();
            if secret.len() < MIN_HMAC_SECRET_BYTES {
                return Err(bad(
                    "auth.jwt.hmac_secret_env",
                    format!("the secret in {var} is shorter than {MIN_HMAC_SECRET_BYTES} bytes"),
                ));
            }
            keys.push(Arc::new(VerifyKey {
                kid: None,
                alg: None,
                family: AlgorithmFamily::Hmac,
                key: DecodingKey::from_secret(secret),
            }));
        }
        let agent = match &c.jwks_url {
            Some(_) => Some(jwks_tls::agent(c.jwks_ca_file.as_deref())?),
            None => None,
        };
        let remote = c
            .jwks_url
            .as_ref()
            .zip(agent)
            .map(|(url, agent)| RemoteJwks {
                url: url.clone(),
                agent,
                set: RwLock::new(Arc::new(KeySet {
                    keys: Vec::new(),
                    fetched_at: None,
                })),
                fetch: tokio::sync::Mutex::new(None),
                refresh: Duration::from_secs(c.jwks_refresh_seconds),
                cooldown: Duration::from_secs(c.jwks_refetch_cooldown_seconds),
                fetches: AtomicU64::new(0),
            });
        Ok(Self {
            algorithms,
            issuer: c.issuer.clone(),
            audience: c.audience.as_ref().map(|a| a.to_vec()),
            leeway: c.leeway_seconds,
            account_claim: c.account_claim.clone(),
            max_token_bytes: c.max_token_bytes,
            keys,
            remote,
        })
    }

    fn candidates(
        &self,
        remote: Option<&KeySet>,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Vec<Arc<VerifyKey>> {
        self.keys
            .iter()
            .chain(remote.into_iter().flat_map(|s| s.keys.iter()))
            .filter(|k| k.fits(alg, kid))
            .take(MAX_CANDIDATES)
            .cloned()
            .collect()
    }

    /// Checks done on the raw text, before any library decoding: size, shape, and the
    /// header's `alg` against the allowlist.
    fn precheck(&self, token: &str) -> Result<Algorithm, AuthError> {
        const MALFORMED: AuthError = AuthError::InvalidToken("malformed token");
        if token.len() > self.max_token_bytes {
            return Err(AuthError::InvalidToken("token too large"));
        }
        let parts: Vec<&str> = token.split('.').collect();
        if parts.len() != 3 {
            return Err(MALFORMED);
        }
        let b64url = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if parts[0].is_empty() || parts[1].is_empty() || !parts.iter().all(|p| b64url(p)) {
            return Err(MALFORMED);
        }
        let header = URL_SAFE_NO_PAD.decode(parts[0]).map_err(|_| MALFORMED)?;
        let header: Map<String, Value> = serde_json::from_slice(&header).map_err(|_| MALFORMED)?;
        let alg_name = header.get("alg").and_then(Value::as_str).ok_or(MALFORMED)?;
        // Exact, case-sensitive comparison with configured names: "none", "None",
        // "NONE", "nOnE", "rs256" … are all simply not on the list.
        let alg = self
            .algorithms
            .iter()
            .copied()
            .find(|a| format!("{a:?}") == alg_name)
            .ok_or(AuthError::InvalidToken("algorithm not allowed"))?;
        // An unsigned token has an empty signature; nothing allowed produces one.
        if parts[2].is_empty() {
            return Err(MALFORMED);
        }
        // RFC 7515 §4.1.11: extensions marked critical must be understood; none are.
        if header.contains_key("crit") {
            return Err(AuthError::InvalidToken(
                "unsupported critical header parameter",
            ));
        }
        Ok(alg)
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.leeway = self.leeway;
        v.validate_exp = true;
        v.validate_nbf = true;
        let mut required: HashSet<String> = HashSet::from(["exp".to_owned()]);
        match &self.issuer {
            Some(iss) => {
                v.set_issuer(&[iss]);
                required.insert("iss".to_owned());
            }
            None => v.iss = None,
        }
        match &self.audience {
            Some(aud) => {
                v.set_audience(aud);
                required.insert("aud".to_owned());
            }
            None => v.validate_aud = false,
        }
        v.required_spec_claims = required;
        v
    }

    async fn verify(&self, token: &str) -> Result<Identity, AuthError> {
        let alg = self.precheck(token)?;
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| AuthError::InvalidToken("malformed token"))?;
        // Only `alg` and `kid` are read from the header; jwk/jku/x5u/x5c are ignored.
        let kid = header.kid.as_deref();
        let mut snapshot = self.remote.as_ref().map(RemoteJwks::snapshot);
        let mut keys = self.candidates(snapshot.as_deref(), alg, kid);
        if let (Some(remote), Some(seen)) = (&self.remote, &snapshot) {
            let stale = seen
                .fetched_at
                .is_none_or(|t| t.elapsed() >= remote.refresh);
            if keys.is_empty() || stale {
                remote.fetch_for_request(seen).await;
                snapshot = Some(remote.snapshot());
                keys = self.candidates(snapshot.as_deref(), alg, kid);
            }
        }
        if keys.is_empty() {
            return Err(AuthError::InvalidToken(if kid.is_some() {
                "unknown key id"
            } else {
                "no key for this algorithm"
            }));
        }
        let validation = self.validation(alg);
        let mut error = AuthError::InvalidToken("invalid signature");
        for key in keys {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
                Ok(data) => return self.identity(data.claims),
                Err(e) => {
                    let mapped = map_jwt_error(e.kind());
                    // A claim error means the signature verified with this key: report it
                    // rather than a signature failure from another candidate.
                    if mapped != AuthError::InvalidToken("invalid signature") {
                        error = mapped;
                    }
                }
            }
        }
        Err(error)
    }

    /// Checks jsonwebtoken leaves alone (`iat`), then extracts the account.
    fn identity(&self, claims: Map<String, Value>) -> Result<Identity, AuthError> {
        let now = jsonwebtoken::get_current_timestamp();
        if let Some(iat) = claims.get("iat") {
            let iat = iat
                .as_u64()
                .ok_or(AuthError::InvalidToken("iat is not a number"))?;
            if iat > now.saturating_add(self.leeway) {
                return Err(AuthError::InvalidToken("token issued in the future"));
            }
        }
        let account = match claims.get(&self.account_claim) {
            None => return Err(AuthError::InvalidToken("account claim missing")),
            Some(Value::String(s)) => s,
            Some(_) => return Err(AuthError::InvalidToken("account claim is not a string")),
        };
        if account.is_empty() {
            return Err(AuthError::InvalidToken("account claim is empty"));
        }
        crate::validate_account_id(account)
            .map_err(|_| AuthError::InvalidToken("account claim is not a valid account id"))?;
        let credential = match claims.get("sub").and_then(Value::as_str) {
            Some(sub) if crate::validate_account_id(sub).is_ok() => format!("jwt:{sub}"),
            _ => format!("jwt:{account}"),
        };
        Ok(Identity {
            account_id: account.clone(),
            credential_id: credential,
        })
    }
}

fn map_jwt_error(kind: &ErrorKind) -> AuthError {
    AuthError::InvalidToken(match kind {
        ErrorKind::ExpiredSignature => "token expired",
        ErrorKind::ImmatureSignature => "token not yet valid",
        ErrorKind::InvalidIssuer => "wrong issuer",
        ErrorKind::InvalidAudience => "wrong audience",
        ErrorKind::MissingRequiredClaim(c) if c == "exp" => "missing exp claim",
        ErrorKind::MissingRequiredClaim(c) if c == "iss" => "missing iss claim",
        ErrorKind::MissingRequiredClaim(c) if c == "aud" => "missing aud claim",
        ErrorKind::MissingRequiredClaim(_) => "missing required claim",
        ErrorKind::InvalidClaimFormat(_) => "malformed claim",
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => "algorithm not allowed",
        ErrorKind::InvalidToken
        | ErrorKind::Base64(_)
        | ErrorKind::Json(_)
        | ErrorKind::Utf8(_) => "malformed token",
        _ => "invalid signature",
    })
}

mod jwks_tls;
#[cfg(test)]
mod tests;
