//! Authentication and the identity-header boundary through the real binary: 401 with a
//! challenge on every surface, API keys and JWTs accepted, representative bad JWTs
//! refused, and no spelling of a client-supplied `x-account-id` ever reaching the agent.

use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::*;

pub const KEY_A: &str = "tk-account-a-0123456789abcdef";
pub const KEY_B: &str = "tk-account-b-0123456789abcdef";

/// `[auth]` with two API keys (acct-a, acct-b) and RS256 JWTs, then `extra` tables.
pub fn auth_conf(extra: &str) -> Conf {
    Conf::write(&format!(
        r#"
[[auth.api_keys]]
id = "a"
account_id = "acct-a"
sha256 = "{}"

[[auth.api_keys]]
id = "b"
account_id = "acct-b"
sha256 = "{}"

[auth.jwt]
algorithms = ["RS256"]
issuer = "https://idp.test"
audience = "tether"
public_key_files = ["{}"]

{extra}
"#,
        sha256_hex(KEY_A),
        sha256_hex(KEY_B),
        test_key("rsa.pub.pem").display(),
    ))
}

/// `chat_gateway` with `auth_conf(extra)` (read at start, so the file may go after).
pub fn authed_gateway(extra: &str) -> (TestStore, FakeAgent, Tether) {
    chat_gateway(&["--conf", &auth_conf(extra).arg()])
}

pub fn bearer(key: &str) -> (&'static str, String) {
    ("authorization", format!("Bearer {key}"))
}

fn claims(account: &str) -> Value {
    json!({ "iss": "https://idp.test", "aud": "tether", "sub": "user-1",
            "account_id": account, "iat": now(), "exp": now() + 300 })
}

#[test]
fn no_credential_is_a_401_with_a_challenge_on_every_surface() {
    let (store, agent, tether) = authed_gateway("");
    assert_eq!(get(&format!("{}/healthz", tether.url()), &[]).status, 200);
    assert_eq!(get(&format!("{}/readyz", tether.url()), &[]).status, 200);

    let openai = post_json(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("hi", None, false),
    );
    assert_eq!(openai.status, 401, "{}", openai.body);
    assert!(openai
        .header("www-authenticate")
        .unwrap()
        .starts_with("Bearer realm=\"tether\""));
    assert_eq!(openai.json()["error"]["type"], "authentication_error");

    let control = post_json(
        &format!("{}/agentengine/api/v1/ListSessions", tether.url()),
        &json!({}),
    );
    assert_eq!(control.status, 401);
    assert!(control.header("www-authenticate").is_some());
    assert_eq!(control.json()["Code"], 401);
    assert_eq!(control.json()["Action"], "ListSessions");

    let pass = get(&format!("{}/echo", tether.url()), &[]);
    assert_eq!(pass.status, 401);
    assert!(pass.header("www-authenticate").is_some());
    assert!(pass.json()["error"]["message"].is_string());

    let retrieve = get(&format!("{}/v1/responses/resp_x", tether.url()), &[]);
    assert_eq!(retrieve.status, 401);
    let subscribe = get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId=s",
            tether.url()
        ),
        &[],
    );
    assert_eq!(subscribe.status, 401);
    assert!(agent.requests().is_empty());
    assert_eq!(store.session_count("acct-a"), 0);
    assert_eq!(store.session_count("local"), 0);
    assert!(
        !tether.log_text().contains(KEY_A),
        "credentials are never logged"
    );
}

#[test]
fn api_keys_and_jwts_are_accepted_and_bad_jwts_are_not() {
    let (_store, _agent, tether) = authed_gateway("");
    let echo = |headers: &[(&str, &str)]| get(&format!("{}/echo", tether.url()), headers);

    let (k, v) = bearer(KEY_A);
    let r = echo(&[(k, &v)]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["headers"]["x-account-id"], "acct-a");
    assert!(
        r.json()["headers"].get("authorization").is_none(),
        "not forwarded"
    );
    let r = echo(&[("x-api-key", KEY_B)]);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["headers"]["x-account-id"], "acct-b");
    assert!(
        r.json()["headers"].get("x-api-key").is_none(),
        "not forwarded"
    );

    let good = rs256(&claims("acct-jwt"), "rsa.key.pem");
    let r = echo(&[("authorization", &format!("Bearer {good}"))]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["headers"]["x-account-id"], "acct-jwt");

    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = claims("acct-jwt");
        f(&mut c);
        rs256(&c, "rsa.key.pem")
    };
    let b64 = |v: &Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let parts: Vec<&str> = good.split('.').collect();
    let mut tampered_sig = parts[2].to_owned();
    tampered_sig.replace_range(
        ..4,
        if &tampered_sig[..4] == "AAAA" {
            "BBBB"
        } else {
            "AAAA"
        },
    );
    let bad: Vec<(&str, String)> = vec![
        ("wrong key", "x-api-key-not-a-key".into()),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(&json!({"alg": "none", "typ": "JWT"})),
                parts[1]
            ),
        ),
        (
            "alg NoNe",
            format!("{}.{}.", b64(&json!({"alg": "NoNe"})), parts[1]),
        ),
        ("expired", with(&|c| c["exp"] = json!(now() - 3600))),
        ("wrong aud", with(&|c| c["aud"] = json!("someone-else"))),
        (
            "wrong iss",
            with(&|c| c["iss"] = json!("https://evil.test")),
        ),
        (
            "no account claim",
            with(&|c| {
                c.as_object_mut().unwrap().remove("account_id");
            }),
        ),
        (
            "tampered payload",
            format!("{}.{}.{}", parts[0], b64(&claims("acct-a")), parts[2]),
        ),
        (
            "tampered signature",
            format!("{}.{}.{}", parts[0], parts[1], tampered_sig),
        ),
        (
            "attacker's key",
            rs256(&claims("acct-jwt"), "attacker.key.pem"),
        ),
    ];
    for (name, token) in bad {
        let r = echo(&[("authorization", &format!("Bearer {token}"))]);
        assert_eq!(r.status, 401, "{name}: {}", r.body);
        let challenge = r.header("www-authenticate").unwrap();
        assert!(challenge.contains("invalid_token"), "{name}: {challenge}");
        assert!(!r.body.contains(&token), "{name}: the token is not echoed");
    }
    // Both credential headers at once is ambiguous: refused, not guessed.
    let r = echo(&[(k, &v), ("x-api-key", KEY_B)]);
    assert_eq!(r.status, 400);
    assert!(!tether.log_text().contains(&good));
}

/// One raw request through /echo with the given extra header lines; returns what the
/// agent saw as x-account-id (a string, or an array when repeated).
fn echo_raw(port: u16, header_lines: &str) -> Value {
    let request = format!(
        "GET /echo HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {KEY_A}\r\n{header_lines}\r\n"
    );
    let (raw, _) = raw_exchange(port, request.as_bytes(), Duration::from_secs(3));
    assert_eq!(
        statuses(&raw).first(),
        Some(&200),
        "{header_lines:?}: {}",
        String::from_utf8_lossy(&raw)
    );
    raw_json(&raw)
}

#[test]
fn spoofed_identity_headers_never_reach_the_agent() {
    let (_store, agent, tether) = authed_gateway("");
    let cases: &[(&str, &str)] = &[
        ("plain", "x-account-id: evil\r\n"),
        ("upper", "X-ACCOUNT-ID: evil\r\n"),
        ("mixed", "X-Account-Id: evil\r\n"),
        ("underscores", "x_account_id: evil\r\n"),
        ("mixed separators", "X_Account-Id: evil\r\n"),
        (
            "duplicates",
            "x-account-id: evil1\r\nx-account-id: evil2\r\nX-Account-ID: evil3\r\n",
        ),
        (
            "duplicate spellings",
            "x-account-id: e1\r\nx_account_id: e2\r\nX_ACCOUNT_ID: e3\r\n",
        ),
        ("multiple values", "x-account-id: evil1, evil2\r\n"),
        (
            "connection-listed",
            "Connection: x-account-id\r\nx-account-id: evil\r\n",
        ),
        (
            "connection-listed only",
            "Connection: keep-alive, X-Account-Id\r\n",
        ),
        (
            "connection-listed underscore",
            "Connection: x_account_id\r\nx_account_id: evil\r\n",
        ),
        (
            "tether aliases",
            "x-tether-account-id: evil\r\nX_Tether_Session_Owner: evil\r\n",
        ),
        ("empty value", "x-account-id:\r\n"),
    ];
    for (name, lines) in cases {
        let echo = echo_raw(tether.port, lines);
        let headers = echo["headers"].as_object().unwrap();
        assert_eq!(
            headers.get("x-account-id"),
            Some(&json!("acct-a")),
            "{name}: {echo}"
        );
        for (k, v) in headers {
            let norm = k.to_ascii_lowercase().replace('_', "-");
            if norm.contains("account") || norm.contains("session-owner") {
                assert_eq!(k, "x-account-id", "{name}: stray {k}: {v}");
            }
            if k == "connection" {
                assert!(
                    !v.to_string().to_ascii_lowercase().contains("account"),
                    "{name}: {v}"
                );
            }
        }
    }

    // Runs: the agent's request is the gateway's own; client headers add nothing.
    let (k, v) = bearer(KEY_A);
    let r = post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("Reply with OK", None, false).to_string(),
        &[
            (k, &v),
            ("x-account-id", "evil"),
            ("X_Account_Id", "evil2"),
            ("Connection", "x-account-id"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let requests = agent.requests();
    let seen = &requests.last().unwrap()["headers"];
    assert_eq!(seen["x-account-id"], "acct-a", "{seen}");
    assert!(seen.get("x_account_id").is_none(), "{seen}");
    assert!(seen.get("authorization").is_none(), "{seen}");
}
