//! The sessions console at `/ui/`: plain HTML, CSS and JavaScript modules from
//! `gateway/ui/`, embedded in the binary at build time and served before authentication
//! (they hold no data; every request the page makes for data is authenticated like any
//! other client's). A strict Content-Security-Policy allows nothing but this origin.

use std::sync::OnceLock;

use bytes::Bytes;
use http::Method;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use pingora::Result;

use crate::digest::sha256_hex;

/// Where the console lives.
pub const PREFIX: &str = "/ui/";

/// No inline script or style, nothing from another host: scripts, styles, fetches and
/// images come from this origin (images also from `blob:`, for attachments the page
/// fetched with its credential).
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self' blob: data:; connect-src 'self'; font-src 'self'; \
                   object-src 'none'; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! assets {
    ($($path:literal => $type:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            content_type: $type,
            body: include_bytes!(concat!("../ui/", $path)),
        }),*]
    };
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Every file under `gateway/ui/` (a unit test keeps this list and the folder equal).
static ASSETS: &[Asset] = assets!(
    "index.html" => HTML,
    "style.css" => CSS,
    "icon.svg" => SVG,
    "js/api.js" => JS,
    "js/approvals.js" => JS,
    "js/app.js" => JS,
    "js/dom.js" => JS,
    "js/session.js" => JS,
    "js/sessions.js" => JS,
    "js/timeline.js" => JS,
    "js/workspace.js" => JS,
);

/// Strong validators, one per asset: the content's hash, so a new binary with changed
/// files is never answered from a stale cache.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS
            .iter()
            .map(|a| {
                // 96 bits of it are plenty to tell versions apart.
                format!("\"{}\"", &sha256_hex(a.body)[..24])
            })
            .collect()
    })
}

/// Whether a request is for the console (`/ui` or anything under `/ui/`).
pub fn claims(path: &str) -> bool {
    path == "/ui" || path.starts_with(PREFIX)
}

/// Answers a request `claims` accepted.
pub async fn serve(session: &mut Session, method: &Method, path: &str) -> Result<()> {
    if path == "/ui" {
        return respond(session, 308, &[("location", PREFIX)], "text/plain", b"").await;
    }
    if method != Method::GET && method != Method::HEAD {
        return respond(
            session,
            405,
            &[("allow", "GET, HEAD")],
            "text/plain; charset=utf-8",
            b"the console is read with GET\n",
        )
        .await;
    }
    let name = match &path[PREFIX.len()..] {
        "" => "index.html",
        name => name,
    };
    let Some(i) = ASSETS.iter().position(|a| a.path == name) else {
        return respond(
            session,
            404,
            &[],
            "text/plain; charset=utf-8",
            b"not found\n",
        )
        .await;
    };
    let (asset, etag) = (&ASSETS[i], etags()[i].as_str());
    let fresh = session
        .req_header()
        .headers
        .get_all("if-none-match")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    let (status, body): (u16, &[u8]) = if fresh { (304, b"") } else { (200, asset.body) };
    let body = if *method == Method::HEAD {
        &b""[..]
    } else {
        body
    };
    let headers = [
        ("etag", etag),
        // Revalidated on every load (a 304 costs one round trip), so a page and its
        // modules always come from the same binary.
        ("cache-control", "no-cache"),
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "no-referrer"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ];
    let length = if status == 200 { asset.body.len() } else { 0 };
    write(session, status, &headers, asset.content_type, length, body).await
}

async fn respond(
    session: &mut Session,
    status: u16,
    headers: &[(&str, &str)],
    content_type: &str,
    body: &'static [u8],
) -> Result<()> {
    let mut all = vec![
        ("cache-control", "no-store"),
        ("x-content-type-options", "nosniff"),
    ];
    all.extend_from_slice(headers);
    write(session, status, &all, content_type, body.len(), body).await
}

/// `length` is the entity's (a HEAD answers the length a GET would send).
async fn write(
    session: &mut Session,
    status: u16,
    headers: &[(&str, &str)],
    content_type: &str,
    length: usize,
    body: &'static [u8],
) -> Result<()> {
    let mut h = ResponseHeader::build(status, Some(2 + headers.len()))?;
    if status != 304 {
        h.insert_header("content-type", content_type)?;
        h.insert_header("content-length", length.to_string())?;
    }
    for (name, value) in headers {
        h.insert_header(name.to_string(), *value)?;
    }
    crate::client::respond::drain(session).await;
    session
        .write_response_header(Box::new(h), body.is_empty())
        .await?;
    if body.is_empty() {
        return Ok(());
    }
    session
        .write_response_body(Some(Bytes::from_static(body)), true)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under gateway/ui/ is served, and every served file exists there.
    #[test]
    fn every_console_file_is_embedded() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let rel = path.strip_prefix(&root).unwrap();
                    on_disk.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = ASSETS.iter().map(|a| a.path.to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
        for a in ASSETS {
            let ext = a.path.rsplit('.').next().unwrap();
            let expected = match ext {
                "html" => HTML,
                "css" => CSS,
                "js" => JS,
                "svg" => SVG,
                other => panic!("no content type for .{other}"),
            };
            assert_eq!(a.content_type, expected, "{}", a.path);
        }
    }

    /// The pages keep to the policy: no inline script or style, no URL of another host
    /// (the SVG namespace is a name, never fetched).
    #[test]
    fn pages_name_no_other_host_and_inline_nothing() {
        const NAMESPACE: &str = "http://www.w3.org/2000/svg";
        for a in ASSETS {
            let text = std::str::from_utf8(a.body).unwrap().replace(NAMESPACE, "");
            for needle in [
                "http://",
                "https://",
                "//cdn",
                "<script>",
                " style=",
                " onclick=",
            ] {
                assert!(!text.contains(needle), "{} contains {needle:?}", a.path);
            }
        }
    }
}
