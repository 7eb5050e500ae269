//! The HTTP agent a JWKS URL is fetched with: ureq with rustls (the `jwks-https` feature,
//! on by default), trusting the built-in web roots or, with `auth.jwt.jwks_ca_file`, only
//! the certificate authorities in that file (an identity provider with a private CA).

use std::path::Path;
use std::time::Duration;

use crate::config::{bad, ConfigError};

const KEY: &str = "auth.jwt.jwks_ca_file";

/// An agent for `auth.jwt.jwks_url`: short timeouts and no redirects (a redirect could
/// send the fetch somewhere the configuration never named).
pub(super) fn agent(ca_file: Option<&Path>) -> Result<ureq::Agent, ConfigError> {
    let builder = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .redirects(0);
    match ca_file {
        None => Ok(builder.build()),
        Some(path) => with_roots(builder, path),
    }
}

#[cfg(feature = "jwks-https")]
fn with_roots(builder: ureq::AgentBuilder, path: &Path) -> Result<ureq::Agent, ConfigError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    let pem = std::fs::read(path)
        .map_err(|e| bad(KEY, format!("cannot read {}: {e}", path.display())))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(KEY, format!("{}: {e}", path.display())))?;
        roots
            .add(cert)
            .map_err(|e| bad(KEY, format!("{}: {e}", path.display())))?;
    }
    if roots.is_empty() {
        return Err(bad(
            KEY,
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    // The provider named rather than taken from the process default: ureq brings ring,
    // and nothing here should depend on which other crates enabled which provider.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(KEY, e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(builder.tls_config(std::sync::Arc::new(tls)).build())
}

#[cfg(not(feature = "jwks-https"))]
fn with_roots(_: ureq::AgentBuilder, _: &Path) -> Result<ureq::Agent, ConfigError> {
    Err(bad(
        KEY,
        "needs the policies crate's `jwks-https` feature; this build has only http",
    ))
}
