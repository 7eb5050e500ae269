//! A JWKS fetched over https from a loopback server whose certificate is signed by a
//! certificate authority made for this test run (`auth.jwt.jwks_ca_file`), and refused
//! when that authority is not the one configured.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::AtomicUsize;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::*;

/// A certificate authority and the PEM file that names it.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
    pem_file: tempfile::NamedTempFile,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let cert = params.self_signed(&key).expect("CA certificate");
    let pem_file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(pem_file.path(), cert.pem()).expect("write CA");
    Ca {
        cert,
        key,
        pem_file,
    }
}

/// Serves `body` at `https://127.0.0.1:PORT/jwks.json` with a certificate for 127.0.0.1
/// that `ca` signed; counts the TLS handshakes that completed.
fn serve_https(ca: &Ca, body: String) -> (String, Arc<AtomicUsize>) {
    let key = KeyPair::generate().expect("server key");
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    let cert = params.signed_by(&key, &ca.cert, &ca.key).expect("sign");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .expect("server config");
    let config = Arc::new(config);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("https://{}/jwks.json", listener.local_addr().expect("addr"));
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let Ok(conn) = rustls::ServerConnection::new(Arc::clone(&config)) else {
                continue;
            };
            let mut tls = rustls::StreamOwned::new(conn, stream);
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            // A client that refuses the certificate ends the handshake here with an error.
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16384 {
                match tls.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => req.extend_from_slice(&buf[..k]),
                }
            }
            if !req.starts_with(b"GET /jwks.json ") {
                continue;
            }
            count.fetch_add(1, Ordering::SeqCst);
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.write_all(response.as_bytes());
            tls.conn.send_close_notify();
            let _ = tls.flush();
        }
    });
    (url, served)
}

fn https_auth(url: &str, ca_file: Option<&std::path::Path>) -> Result<Authenticator, ConfigError> {
    let ca_line = ca_file
        .map(|p| format!("jwks_ca_file = \"{}\"", p.display()))
        .unwrap_or_default();
    Authenticator::new(&parse(&format!(
        r#"[auth.jwt]
        algorithms = ["RS256"]
        issuer = "{ISS}"
        audience = "{AUD}"
        jwks_url = "{url}"
        {ca_line}"#
    )))
}

#[tokio::test]
async fn a_jwks_over_https_is_trusted_through_the_configured_ca() {
    let ca = ca("Tether test CA");
    let (url, served) = serve_https(&ca, jwks(&["rsa"]));
    let auth = https_auth(&url, Some(ca.pem_file.path())).expect("valid config");
    assert_eq!(auth.refresh_jwks().await.expect("fetched over https"), 1);
    assert_eq!(served.load(Ordering::SeqCst), 1);
    let id = check(&auth, &rs(&claims())).await.expect("verified");
    assert_eq!(id.account_id, "acme");
}

#[tokio::test]
async fn a_jwks_server_signed_by_another_ca_is_refused() {
    let ca_server = ca("the server's CA");
    let (url, served) = serve_https(&ca_server, jwks(&["rsa"]));
    // The built-in web roots do not know a private CA...
    let web_roots = https_auth(&url, None).expect("valid config");
    let e = web_roots.refresh_jwks().await.expect_err("untrusted");
    assert!(e.to_string().contains("transport"), "{e}");
    // ...and neither does another CA's file.
    let other = ca("another CA");
    let wrong = https_auth(&url, Some(other.pem_file.path())).expect("valid config");
    assert!(wrong.refresh_jwks().await.is_err());
    assert_eq!(served.load(Ordering::SeqCst), 0, "no request got through");
    // With no keys loaded, a token is refused.
    assert!(check(&wrong, &rs(&claims())).await.is_err());
}

#[test]
fn a_ca_file_must_hold_a_certificate_and_serve_an_https_url() {
    let empty = tempfile::NamedTempFile::new().expect("temp file");
    let Err(e) = https_auth("https://127.0.0.1:9/jwks.json", Some(empty.path())) else {
        panic!("a CA file with no certificate was accepted");
    };
    assert_eq!(e.key, "auth.jwt.jwks_ca_file");
    assert!(e.message.contains("no PEM certificate"), "{}", e.message);
    let missing = std::path::Path::new("/nonexistent/ca.pem");
    let Err(e) = https_auth("https://127.0.0.1:9/jwks.json", Some(missing)) else {
        panic!("a missing CA file was accepted");
    };
    assert_eq!(e.key, "auth.jwt.jwks_ca_file");
    let e = parse(
        r#"[auth.jwt]
        algorithms = ["RS256"]
        jwks_url = "http://127.0.0.1:9/jwks.json"
        jwks_ca_file = "/etc/ca.pem""#,
    )
    .validate()
    .expect_err("a CA for plain http");
    assert_eq!(e.key, "auth.jwt.jwks_ca_file");
}
