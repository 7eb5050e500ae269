//! Authentication tests: a JWT rejection table drawn from RFC 8725 and the OWASP JWT
//! cheat sheet, acceptance cases for every key source, JWKS rotation against a loopback
//! HTTP server, and API keys. Keys are the TEST-ONLY ones under `policies/tests/keys/`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use http::HeaderValue;
use jsonwebtoken::EncodingKey;
use serde_json::json;

use super::*;
use crate::config::AuthConfig;

const ISS: &str = "https://idp.test";
const AUD: &str = "tether";

fn key_path(name: &str) -> String {
    // At run time, not build time: a shared target directory may hold a binary built in
    // another checkout.
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
    format!("{crate_dir}/tests/keys/{name}")
}

fn key_bytes(name: &str) -> Vec<u8> {
    std::fs::read(key_path(name)).expect("test key")
}

fn jwk(name: &str) -> Value {
    serde_json::from_slice(&key_bytes(&format!("{name}.jwk.json"))).expect("jwk")
}

fn jwks(names: &[&str]) -> String {
    json!({ "keys": names.iter().map(|n| jwk(n)).collect::<Vec<_>>() }).to_string()
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn claims() -> Value {
    json!({ "iss": ISS, "aud": AUD, "sub": "user-1", "account_id": "acme",
            "iat": now(), "exp": now() + 600 })
}

fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

fn without(mut base: Value, key: &str) -> Value {
    if let Some(m) = base.as_object_mut() {
        m.remove(key);
    }
    base
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Signs `header.payload` exactly as given (header and payload are raw JSON text).
fn sign_raw(header: &str, payload: &str, alg: Algorithm, key: &EncodingKey) -> String {
    let message = format!("{}.{}", b64(header.as_bytes()), b64(payload.as_bytes()));
    let sig = jsonwebtoken::crypto::sign(message.as_bytes(), key, alg).expect("sign");
    format!("{message}.{sig}")
}

fn private(name: &str, alg: Algorithm) -> EncodingKey {
    let pem = key_bytes(&format!("{name}.key.pem"));
    match alg.family() {
        AlgorithmFamily::Rsa => EncodingKey::from_rsa_pem(&pem),
        AlgorithmFamily::Ec => EncodingKey::from_ec_pem(&pem),
        AlgorithmFamily::Ed => EncodingKey::from_ed_pem(&pem),
        AlgorithmFamily::Hmac => Ok(EncodingKey::from_secret(&pem)),
    }
    .expect("private key")
}

/// A token signed by the named test key, with `header` extended by `alg` (and `kid`).
fn token_with(
    key: &str,
    alg: Algorithm,
    kid: Option<&str>,
    mut header: Value,
    body: &Value,
) -> String {
    header["alg"] = json!(format!("{alg:?}"));
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    sign_raw(
        &header.to_string(),
        &body.to_string(),
        alg,
        &private(key, alg),
    )
}

fn token(key: &str, alg: Algorithm, kid: Option<&str>, body: &Value) -> String {
    token_with(key, alg, kid, json!({ "typ": "JWT" }), body)
}

fn rs(body: &Value) -> String {
    token("rsa", Algorithm::RS256, Some("rsa-kid"), body)
}

/// An unsigned token with a hand-written header.
fn unsigned(header: &str, body: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        b64(header.as_bytes()),
        b64(body.to_string().as_bytes())
    )
}

#[derive(serde::Deserialize)]
struct File {
    auth: AuthConfig,
}

fn parse(toml_text: &str) -> AuthConfig {
    toml::from_str::<File>(toml_text)
        .expect("config parses")
        .auth
}

fn authenticator(toml_text: &str) -> Authenticator {
    Authenticator::new(&parse(toml_text)).expect("config is valid")
}

/// JWKS file with the RSA, EC and Ed25519 test keys; RS256, ES256 and EdDSA allowed.
fn jwks_file_auth(dir: &tempfile::TempDir) -> Authenticator {
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&["rsa", "ec", "ed"])).expect("write jwks");
    authenticator(&format!(
        r#"[auth.jwt]
        algorithms = ["RS256", "ES256", "EdDSA"]
        issuer = "{ISS}"
        audience = "{AUD}"
        jwks_file = "{}""#,
        path.display()
    ))
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    h
}

async fn check(auth: &Authenticator, token: &str) -> Result<Identity, AuthError> {
    auth.authenticate(&bearer(token)).await
}

#[tokio::test]
async fn jwt_rejection_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth = jwks_file_auth(&dir);
    let c = claims();
    let good = rs(&c);
    let mut parts = good.split('.').map(str::to_owned);
    let (h, p, s) = (
        parts.next().expect("h"),
        parts.next().expect("p"),
        parts.next().expect("s"),
    );
    let rsa_public_pem = key_bytes("rsa.pub.pem");

    // Attacker material: their own key, advertised in the token itself.
    let attacker = jwk("attacker");
    let tampered_sig = {
        let mut sig = s.clone().into_bytes();
        sig[10] = if sig[10] == b'A' { b'B' } else { b'A' };
        format!("{h}.{p}.{}", String::from_utf8(sig).expect("ascii"))
    };
    let tampered_payload = format!(
        "{h}.{}.{s}",
        b64(with(c.clone(), "account_id", json!("victim"))
            .to_string()
            .as_bytes())
    );
    let signed_payload = |payload: &str| {
        sign_raw(
            r#"{"alg":"RS256","kid":"rsa-kid"}"#,
            payload,
            Algorithm::RS256,
            &private("rsa", Algorithm::RS256),
        )
    };

    let cases: Vec<(&str, String, &str)> = vec![
        // RFC 8725 §2.1 / OWASP: unsigned tokens, every spelling, with and without a signature.
        (
            "alg none",
            unsigned(r#"{"alg":"none"}"#, &c, ""),
            "algorithm not allowed",
        ),
        (
            "alg None",
            unsigned(r#"{"alg":"None"}"#, &c, ""),
            "algorithm not allowed",
        ),
        (
            "alg NONE",
            unsigned(r#"{"alg":"NONE"}"#, &c, &s),
            "algorithm not allowed",
        ),
        (
            "alg nOnE",
            unsigned(r#"{"alg":"nOnE","kid":"rsa-kid"}"#, &c, &s),
            "algorithm not allowed",
        ),
        (
            "alg missing",
            unsigned(r#"{"typ":"JWT"}"#, &c, &s),
            "malformed token",
        ),
        (
            "alg not a string",
            unsigned(r#"{"alg":["RS256"]}"#, &c, &s),
            "malformed token",
        ),
        // RFC 8725 §2.1: algorithm confusion, the RSA public key used as an HMAC secret.
        (
            "HS256 with the RSA public key as secret",
            sign_raw(
                r#"{"alg":"HS256","kid":"rsa-kid"}"#,
                &c.to_string(),
                Algorithm::HS256,
                &EncodingKey::from_secret(&rsa_public_pem),
            ),
            "algorithm not allowed",
        ),
        (
            "algorithm not allowed (RS512)",
            token("rsa", Algorithm::RS512, Some("rsa-kid"), &c),
            "algorithm not allowed",
        ),
        (
            "algorithm not allowed (PS256)",
            token("rsa", Algorithm::PS256, Some("rsa-kid"), &c),
            "algorithm not allowed",
        ),
        (
            "alg in lower case",
            unsigned(r#"{"alg":"rs256","kid":"rsa-kid"}"#, &c, &s),
            "algorithm not allowed",
        ),
        // Duplicate alg members: the header must not parse two ways.
        (
            "duplicate alg",
            unsigned(r#"{"alg":"none","alg":"RS256","kid":"rsa-kid"}"#, &c, &s),
            "malformed token",
        ),
        (
            "unknown kid",
            token("rsa", Algorithm::RS256, Some("who-knows"), &c),
            "unknown key id",
        ),
        ("tampered signature", tampered_sig, "invalid signature"),
        ("tampered payload", tampered_payload, "invalid signature"),
        (
            "expired",
            rs(&with(c.clone(), "exp", json!(now() - 3600))),
            "token expired",
        ),
        (
            "expired beyond leeway",
            rs(&with(c.clone(), "exp", json!(now() - 31))),
            "token expired",
        ),
        (
            "not yet valid",
            rs(&with(c.clone(), "nbf", json!(now() + 3600))),
            "token not yet valid",
        ),
        (
            "iat in the future",
            rs(&with(c.clone(), "iat", json!(now() + 3600))),
            "token issued in the future",
        ),
        (
            "iat not a number",
            rs(&with(c.clone(), "iat", json!("yesterday"))),
            "iat is not a number",
        ),
        (
            "wrong iss",
            rs(&with(c.clone(), "iss", json!("https://evil.test"))),
            "wrong issuer",
        ),
        (
            "missing iss",
            rs(&without(c.clone(), "iss")),
            "missing iss claim",
        ),
        (
            "wrong aud",
            rs(&with(c.clone(), "aud", json!("someone-else"))),
            "wrong audience",
        ),
        (
            "wrong aud list",
            rs(&with(c.clone(), "aud", json!(["a", "b"]))),
            "wrong audience",
        ),
        (
            "missing aud",
            rs(&without(c.clone(), "aud")),
            "missing aud claim",
        ),
        (
            "missing exp",
            rs(&without(c.clone(), "exp")),
            "missing exp claim",
        ),
        // A string `exp` is not a NumericDate: treated as absent.
        (
            "exp as a string",
            rs(&with(c.clone(), "exp", json!("99999999999"))),
            "missing exp claim",
        ),
        (
            "missing account claim",
            rs(&without(c.clone(), "account_id")),
            "account claim missing",
        ),
        (
            "empty account claim",
            rs(&with(c.clone(), "account_id", json!(""))),
            "account claim is empty",
        ),
        (
            "account claim a number",
            rs(&with(c.clone(), "account_id", json!(42))),
            "account claim is not a string",
        ),
        (
            "account claim an array",
            rs(&with(c.clone(), "account_id", json!(["acme"]))),
            "account claim is not a string",
        ),
        (
            "account claim null",
            rs(&with(c.clone(), "account_id", Value::Null)),
            "account claim is not a string",
        ),
        (
            "account claim with a newline",
            rs(&with(c.clone(), "account_id", json!("a\nb"))),
            "account claim is not a valid account id",
        ),
        // Malformed serialisations.
        ("one segment", h.clone(), "malformed token"),
        ("two segments", format!("{h}.{p}"), "malformed token"),
        ("four segments", format!("{good}.{s}"), "malformed token"),
        ("empty segments", "..".to_owned(), "malformed token"),
        (
            "bad base64 header",
            format!("%%%.{p}.{s}"),
            "malformed token",
        ),
        ("padded base64", format!("{h}=.{p}.{s}"), "malformed token"),
        (
            "bad JSON header",
            format!("{}.{p}.{s}", b64(b"{not json")),
            "malformed token",
        ),
        (
            "header not an object",
            format!("{}.{p}.{s}", b64(b"\"RS256\"")),
            "malformed token",
        ),
        (
            "bad base64 payload",
            format!("{h}.!!.{s}"),
            "malformed token",
        ),
        (
            "payload not JSON, validly signed",
            signed_payload("not json"),
            "malformed token",
        ),
        (
            "oversized token",
            rs(&with(c.clone(), "pad", json!("x".repeat(10_000)))),
            "token too large",
        ),
        // RFC 8725 §3.10 / OWASP: keys carried or referenced by the token are never used.
        (
            "embedded jwk, attacker kid",
            token_with(
                "attacker",
                Algorithm::RS256,
                Some("attacker-kid"),
                json!({ "jwk": attacker }),
                &c,
            ),
            "unknown key id",
        ),
        (
            "embedded jwk, trusted kid",
            token_with(
                "attacker",
                Algorithm::RS256,
                Some("rsa-kid"),
                json!({ "jwk": attacker }),
                &c,
            ),
            "invalid signature",
        ),
        (
            "embedded jwk, no kid",
            token_with(
                "attacker",
                Algorithm::RS256,
                None,
                json!({ "jwk": attacker }),
                &c,
            ),
            "invalid signature",
        ),
        (
            "x5c certificate chain",
            token_with(
                "attacker",
                Algorithm::RS256,
                Some("rsa-kid"),
                json!({ "x5c": ["MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"] }),
                &c,
            ),
            "invalid signature",
        ),
        (
            "critical extension",
            token_with(
                "rsa",
                Algorithm::RS256,
                Some("rsa-kid"),
                json!({ "crit": ["exp"], "exp": 1 }),
                &c,
            ),
            "unsupported critical header parameter",
        ),
        // A key that is not in the JWKS, claiming a trusted kid or none.
        (
            "signed by a key not in the JWKS",
            token("attacker", Algorithm::RS256, Some("rsa-kid"), &c),
            "invalid signature",
        ),
        (
            "ES256 by the wrong key type",
            token("ed", Algorithm::EdDSA, Some("ec-kid"), &c),
            "unknown key id",
        ),
    ];
    assert!(cases.len() >= 20);
    for (name, token, expected) in &cases {
        let err = check(&auth, token).await.expect_err(name);
        assert_eq!(err.message(), *expected, "{name}");
        assert_eq!(err.status(), 401, "{name}");
        let challenge = err.www_authenticate();
        assert!(
            challenge.starts_with("Bearer realm=\"tether\", error=\"invalid_token\""),
            "{name}: {challenge}"
        );
        assert!(
            !challenge.contains(token.as_str()) || token.is_empty(),
            "{name}: token echoed"
        );
    }
}

/// A tiny loopback HTTP server: serves `body` (or 503 when `None`) and counts requests.
struct JwksServer {
    url: String,
    body: Arc<Mutex<Option<String>>>,
    hits: Arc<AtomicUsize>,
}

fn serve(body: Option<String>) -> JwksServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
    let body = Arc::new(Mutex::new(body));
    let hits = Arc::new(AtomicUsize::new(0));
    let (b, n) = (Arc::clone(&body), Arc::clone(&hits));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            n.fetch_add(1, Ordering::SeqCst);
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16384 {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => req.extend_from_slice(&buf[..k]),
                }
            }
            let current = b.lock().expect("lock").clone();
            let response = match current {
                Some(body) => format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                ),
                None => "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned(),
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    JwksServer { url, body, hits }
}

#[tokio::test]
async fn jku_and_x5u_are_never_fetched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth = jwks_file_auth(&dir);
    let evil = serve(Some(jwks(&["attacker"])));
    for param in ["jku", "x5u"] {
        for kid in [Some("attacker-kid"), Some("rsa-kid"), None] {
            let t = token_with(
                "attacker",
                Algorithm::RS256,
                kid,
                json!({ param: evil.url }),
                &claims(),
            );
            let err = check(&auth, &t).await.expect_err(param);
            assert!(
                ["unknown key id", "invalid signature"].contains(&err.message()),
                "{param} {kid:?}: {}",
                err.message()
            );
        }
    }
    assert_eq!(
        evil.hits.load(Ordering::SeqCst),
        0,
        "the attacker's URL was fetched"
    );
}

#[tokio::test]
async fn hs256_with_rsa_public_key_fails_even_when_hs256_is_allowed() {
    // SAFETY of the test: a variable name no other test uses.
    std::env::set_var(
        "POLICIES_TEST_HS_SECRET_1",
        "0123456789abcdef0123456789abcdef-test-only",
    );
    let auth = authenticator(&format!(
        r#"[auth.jwt]
        algorithms = ["RS256", "HS256"]
        public_key_files = ["{}"]
        hmac_secret_env = "POLICIES_TEST_HS_SECRET_1""#,
        key_path("rsa.pub.pem")
    ));
    let forged = sign_raw(
        r#"{"alg":"HS256"}"#,
        &claims().to_string(),
        Algorithm::HS256,
        &EncodingKey::from_secret(&key_bytes("rsa.pub.pem")),
    );
    assert_eq!(
        check(&auth, &forged).await.expect_err("forged").message(),
        "invalid signature"
    );
    // The real secret and the real RSA key both work.
    let hs = sign_raw(
        r#"{"alg":"HS256"}"#,
        &claims().to_string(),
        Algorithm::HS256,
        &EncodingKey::from_secret(b"0123456789abcdef0123456789abcdef-test-only"),
    );
    assert_eq!(check(&auth, &hs).await.expect("hs").account_id, "acme");
    assert_eq!(
        check(&auth, &rs(&claims())).await.expect("rs").account_id,
        "acme"
    );
}

#[tokio::test]
async fn accepted_tokens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth = jwks_file_auth(&dir);
    let c = claims();
    for (name, t) in [
        ("RS256 from JWKS", rs(&c)),
        (
            "ES256 from JWKS",
            token("ec", Algorithm::ES256, Some("ec-kid"), &c),
        ),
        (
            "EdDSA from JWKS",
            token("ed", Algorithm::EdDSA, Some("ed-kid"), &c),
        ),
        ("EdDSA without kid", token("ed", Algorithm::EdDSA, None, &c)),
        (
            "exp within leeway",
            rs(&with(c.clone(), "exp", json!(now() - 10))),
        ),
        (
            "nbf within leeway",
            rs(&with(c.clone(), "nbf", json!(now() + 10))),
        ),
        (
            "iat within leeway",
            rs(&with(c.clone(), "iat", json!(now() + 10))),
        ),
        (
            "no iat, no sub",
            rs(&without(without(c.clone(), "iat"), "sub")),
        ),
        (
            "aud in a list",
            rs(&with(c.clone(), "aud", json!(["other", AUD]))),
        ),
        (
            "embedded jwk ignored",
            token_with(
                "rsa",
                Algorithm::RS256,
                Some("rsa-kid"),
                json!({ "jwk": jwk("attacker") }),
                &c,
            ),
        ),
    ] {
        let id = check(&auth, &t)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(id.account_id, "acme", "{name}");
    }
    let id = check(&auth, &rs(&c)).await.expect("ok");
    assert_eq!(id.credential_id, "jwt:user-1");
    let id = check(&auth, &rs(&without(c.clone(), "sub")))
        .await
        .expect("ok");
    assert_eq!(id.credential_id, "jwt:acme");

    // RS256 from a PEM file, with a custom account claim and no iss/aud configured.
    let pem = authenticator(&format!(
        r#"[auth.jwt]
        algorithms = ["RS256"]
        account_claim = "https://tether/account"
        public_key_files = ["{}"]"#,
        key_path("rsa.pub.pem")
    ));
    let body = json!({ "exp": now() + 60, "https://tether/account": "tenant-7" });
    let id = check(&pem, &token("rsa", Algorithm::RS256, None, &body))
        .await
        .expect("pem");
    assert_eq!(id.account_id, "tenant-7");
    assert!(check(&pem, &token("rsa2", Algorithm::RS256, None, &body))
        .await
        .is_err());

    // HS256 from an environment secret.
    std::env::set_var(
        "POLICIES_TEST_HS_SECRET_2",
        "another-test-only-secret-of-32-bytes!!",
    );
    let hs = authenticator(
        r#"[auth.jwt]
        algorithms = ["HS256"]
        hmac_secret_env = "POLICIES_TEST_HS_SECRET_2""#,
    );
    let t = sign_raw(
        r#"{"alg":"HS256","typ":"JWT"}"#,
        &claims().to_string(),
        Algorithm::HS256,
        &EncodingKey::from_secret(b"another-test-only-secret-of-32-bytes!!"),
    );
    assert_eq!(check(&hs, &t).await.expect("hs").account_id, "acme");
}

#[test]
fn key_loading_errors_name_the_key() {
    let cfg = |extra: &str| parse(&format!("[auth.jwt]\n{extra}"));
    let err = Authenticator::new(&cfg(
        "algorithms = [\"HS256\"]\nhmac_secret_env = \"POLICIES_TEST_UNSET_VARIABLE\"",
    ))
    .expect_err("unset");
    assert_eq!(err.key, "auth.jwt.hmac_secret_env");
    std::env::set_var("POLICIES_TEST_SHORT_SECRET", "short");
    let err = Authenticator::new(&cfg(
        "algorithms = [\"HS256\"]\nhmac_secret_env = \"POLICIES_TEST_SHORT_SECRET\"",
    ))
    .expect_err("short");
    assert_eq!(err.key, "auth.jwt.hmac_secret_env");
    assert!(!err.message.contains("short\""), "secret echoed: {err}");
    let err = Authenticator::new(&cfg(
        "algorithms = [\"RS256\"]\npublic_key_files = [\"/nonexistent.pem\"]",
    ))
    .expect_err("missing file");
    assert_eq!(err.key, "auth.jwt.public_key_files");
    let err = Authenticator::new(&cfg(&format!(
        "algorithms = [\"RS256\"]\npublic_key_files = [\"{}\"]",
        key_path("rsa.jwk.json")
    )))
    .expect_err("not pem");
    assert_eq!(err.key, "auth.jwt.public_key_files");
    let err = Authenticator::new(&cfg(&format!(
        "algorithms = [\"RS256\"]\njwks_file = \"{}\"",
        key_path("rsa.pub.pem")
    )))
    .expect_err("not jwks");
    assert_eq!(err.key, "auth.jwt.jwks_file");
}

#[test]
fn jwks_parsing_skips_unusable_keys() {
    let doc = json!({ "keys": [
        { "kty": "oct", "k": "c2VjcmV0", "kid": "hmac" },
        with(jwk("rsa"), "use", json!("enc")),
        with(jwk("rsa"), "alg", json!("RSA-OAEP")),
        { "kty": "weird", "kid": "x" },
        jwk("ec"),
    ]});
    let keys = parse_jwks(doc.to_string().as_bytes()).expect("one usable key");
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].kid.as_deref(), Some("ec-kid"));
    assert_eq!(keys[0].alg, Some(Algorithm::ES256));
    assert!(parse_jwks(br#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).is_err());
    assert!(parse_jwks(b"[]").is_err());
}

fn url_auth(url: &str, cooldown: u64) -> Authenticator {
    authenticator(&format!(
        r#"[auth.jwt]
        algorithms = ["RS256", "ES256"]
        issuer = "{ISS}"
        audience = "{AUD}"
        jwks_url = "{url}"
        jwks_refetch_cooldown_seconds = {cooldown}"#
    ))
}

#[tokio::test]
async fn jwks_url_rotation_and_keep_last_good() {
    let server = serve(Some(jwks(&["rsa"])));
    let auth = url_auth(&server.url, 10);
    assert_eq!(auth.refresh_jwks().await.expect("initial load"), 1);
    assert_eq!(auth.jwks_fetch_count(), 1);
    let c = claims();
    assert!(check(&auth, &rs(&c)).await.is_ok());
    assert_eq!(auth.jwks_fetch_count(), 1, "a known kid needs no fetch");

    // The provider rotates: a new kid appears at the URL.
    *server.body.lock().expect("lock") = Some(jwks(&["rsa", "rsa2"]));
    let rotated = token("rsa2", Algorithm::RS256, Some("rsa2-kid"), &c);
    let id = check(&auth, &rotated)
        .await
        .expect("new kid verifies after one refetch");
    assert_eq!(id.account_id, "acme");
    assert_eq!(auth.jwks_fetch_count(), 2);

    // Made-up kids within the cooldown cause no further fetches.
    for i in 0..5 {
        let t = token("rsa", Algorithm::RS256, Some(&format!("made-up-{i}")), &c);
        assert_eq!(
            check(&auth, &t).await.expect_err("unknown").message(),
            "unknown key id"
        );
    }
    assert_eq!(auth.jwks_fetch_count(), 2, "refetch is rate-limited");
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);

    // The URL goes down: a forced refresh fails, the last good set stays in force.
    *server.body.lock().expect("lock") = None;
    assert!(auth.refresh_jwks().await.is_err());
    assert!(check(&auth, &rs(&c)).await.is_ok());
    assert!(check(&auth, &rotated).await.is_ok());
    assert_eq!(server.hits.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn jwks_url_loaded_on_first_use_and_survives_outage() {
    let server = serve(Some(jwks(&["rsa", "ec"])));
    // No cooldown: every unknown kid may refetch, so the outage is really exercised.
    let auth = url_auth(&server.url, 0);
    let c = claims();
    assert!(
        check(&auth, &token("ec", Algorithm::ES256, Some("ec-kid"), &c))
            .await
            .is_ok()
    );
    assert_eq!(auth.jwks_fetch_count(), 1);
    *server.body.lock().expect("lock") = None;
    let unknown = token("rsa2", Algorithm::RS256, Some("rsa2-kid"), &c);
    assert_eq!(
        check(&auth, &unknown).await.expect_err("down").message(),
        "unknown key id"
    );
    assert_eq!(auth.jwks_fetch_count(), 2, "tried the URL");
    assert!(check(&auth, &rs(&c)).await.is_ok(), "last good set kept");

    // A URL that never answered: no keys, a clean 401, not a panic.
    let dead = serve(None);
    let auth = url_auth(&dead.url, 10);
    let err = check(&auth, &rs(&c)).await.expect_err("no keys");
    assert_eq!(err.message(), "unknown key id");
    assert!(check(&auth, &rs(&c)).await.is_err());
    assert_eq!(
        dead.hits.load(Ordering::SeqCst),
        1,
        "cooldown also bounds failed fetches"
    );
}

// ---- API keys and header handling ----

/// SHA-256 of "sk-test-acme" and "sk-test-beta".
fn api_key_auth() -> Authenticator {
    let digest = |k: &str| {
        Sha256::digest(k.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    authenticator(&format!(
        r#"[[auth.api_keys]]
        id = "acme-ci"
        account_id = "acme"
        sha256 = "{}"
        [[auth.api_keys]]
        id = "beta-1"
        account_id = "beta"
        sha256 = "{}""#,
        digest("sk-test-acme"),
        digest("sk-test-beta").to_uppercase()
    ))
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (n, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(n.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}

#[tokio::test]
async fn api_keys() {
    let auth = api_key_auth();
    let ok = auth
        .authenticate(&headers(&[("authorization", "Bearer sk-test-acme")]))
        .await
        .expect("bearer");
    assert_eq!(
        ok,
        Identity {
            account_id: "acme".into(),
            credential_id: "key:acme-ci".into()
        }
    );
    let ok = auth
        .authenticate(&headers(&[("x-api-key", "sk-test-beta")]))
        .await
        .expect("x-api-key, upper-case digest");
    assert_eq!(ok.account_id, "beta");
    let ok = auth
        .authenticate(&headers(&[("authorization", "bearer   sk-test-acme ")]))
        .await
        .expect("scheme is case-insensitive");
    assert_eq!(ok.account_id, "acme");

    type Case<'a> = (&'a [(&'a str, &'a str)], u16, &'a str);
    let cases: &[Case] = &[
        (&[], 401, "authentication required"),
        (
            &[("authorization", "Bearer sk-test-wrong")],
            401,
            "unknown API key",
        ),
        (&[("x-api-key", "sk-test-acm")], 401, "unknown API key"),
        (&[("x-api-key", "SK-TEST-ACME")], 401, "unknown API key"),
        (
            &[("authorization", "Basic c2stdGVzdC1hY21lOg==")],
            400,
            "unsupported authorization scheme; use Bearer",
        ),
        (
            &[("authorization", "sk-test-acme")],
            400,
            "Authorization must be \"Bearer <token>\"",
        ),
        (
            &[("authorization", "Bearer ")],
            400,
            "Authorization must be \"Bearer <token>\"",
        ),
        (&[("x-api-key", "")], 400, "empty credential"),
        (
            &[
                ("authorization", "Bearer sk-test-acme"),
                ("authorization", "Bearer sk-test-beta"),
            ],
            400,
            "credential header sent more than once",
        ),
        (
            &[
                ("authorization", "Bearer sk-test-acme"),
                ("x-api-key", "sk-test-beta"),
            ],
            400,
            "send either Authorization or x-api-key, not both",
        ),
        // A JWT-shaped credential when no JWT is configured.
        (&[("authorization", "Bearer a.b.c")], 401, "unknown API key"),
    ];
    for (h, status, message) in cases {
        let err = auth.authenticate(&headers(h)).await.expect_err(message);
        assert_eq!((err.status(), err.message()), (*status, *message), "{h:?}");
    }
    let missing = auth
        .authenticate(&HeaderMap::new())
        .await
        .expect_err("missing");
    assert_eq!(missing.www_authenticate(), "Bearer realm=\"tether\"");
    let wrong = auth
        .authenticate(&headers(&[("x-api-key", "sk-test-secret-value")]))
        .await
        .expect_err("wrong");
    assert_eq!(
        wrong.www_authenticate(),
        "Bearer realm=\"tether\", error=\"invalid_token\", error_description=\"unknown API key\""
    );
    assert!(!format!("{wrong} {wrong:?} {auth:?}").contains("sk-test"));
}

#[tokio::test]
async fn api_keys_and_jwt_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&["rsa"])).expect("write");
    let digest: String = Sha256::digest(b"sk-test-acme")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let auth = authenticator(&format!(
        r#"[[auth.api_keys]]
        id = "k"
        account_id = "keyed"
        sha256 = "{digest}"
        [auth.jwt]
        algorithms = ["RS256"]
        jwks_file = "{}""#,
        path.display()
    ));
    assert_eq!(
        check(&auth, "sk-test-acme").await.expect("key").account_id,
        "keyed"
    );
    assert_eq!(
        check(&auth, &rs(&claims())).await.expect("jwt").account_id,
        "acme"
    );
    assert_eq!(
        check(&auth, "not-a-key").await.expect_err("bad").message(),
        "malformed token"
    );
    // A JWT in x-api-key is not a JWT.
    let err = auth
        .authenticate(&headers(&[("x-api-key", &rs(&claims()))]))
        .await
        .expect_err("jwt in x-api-key");
    assert_eq!(err.message(), "unknown API key");
}

#[tokio::test]
async fn no_auth_configured_is_local() {
    let auth = Authenticator::new(&AuthConfig::default()).expect("empty config");
    assert!(!auth.is_enabled());
    let id = auth
        .authenticate(&headers(&[
            ("authorization", "Bearer anything"),
            ("x-account-id", "evil"),
        ]))
        .await
        .expect("local");
    assert_eq!(id, Identity::local());
    assert_eq!(id.account_id, crate::LOCAL_ACCOUNT);
}

#[cfg(feature = "jwks-https")]
mod https;
