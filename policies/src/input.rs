//! Input limits on request bodies: JSON size and nesting depth, and attachment data URLs
//! (decoded, type-checked against an allowlist and by their magic bytes, size-limited).
//!
//! Storing an accepted attachment is the gateway's job; this module only says whether the
//! bytes may be stored and what they are.

use base64::Engine;

use crate::config::LimitsConfig;

/// Why input was refused. [`InputLimitError::status`] gives the HTTP status to answer with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputLimitError {
    #[error("request body is {size} bytes; the limit is {limit}")]
    BodyTooLarge { size: usize, limit: usize },
    #[error("JSON nesting is deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error("request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("attachment is not a base64 data URL (data:<type>;base64,<data>)")]
    NotDataUrl,
    #[error("attachment data is not valid base64")]
    BadBase64,
    #[error("attachment type {0:?} is not allowed")]
    TypeNotAllowed(String),
    #[error("attachment is declared as {declared:?} but its content is {actual}")]
    TypeMismatch {
        declared: String,
        actual: &'static str,
    },
    #[error("attachment is larger than {limit} bytes")]
    AttachmentTooLarge { limit: usize },
}

impl InputLimitError {
    /// 413 for sizes, 415 for refused types, 400 for everything malformed.
    pub fn status(&self) -> u16 {
        match self {
            Self::BodyTooLarge { .. } | Self::AttachmentTooLarge { .. } => 413,
            Self::TypeNotAllowed(_) | Self::TypeMismatch { .. } => 415,
            _ => 400,
        }
    }
}

/// Refuses a body longer than `max_bytes`.
pub fn check_body_size(len: usize, max_bytes: usize) -> Result<(), InputLimitError> {
    if len > max_bytes {
        return Err(InputLimitError::BodyTooLarge {
            size: len,
            limit: max_bytes,
        });
    }
    Ok(())
}

/// Checks that `body` is JSON nested at most `max_depth` arrays/objects deep, then that it
/// parses. The depth scan is a loop with a counter, not recursion, so a body of a million
/// `[` cannot exhaust the stack; the parse after it only ever sees shallow input.
pub fn check_json(body: &[u8], max_depth: usize) -> Result<(), InputLimitError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(InputLimitError::TooDeep { limit: max_depth });
                }
            }
            // Unbalanced closers are left for the parser to report.
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    // serde_json stops at 128 levels on its own; the scan above has already refused
    // anything deeper than `max_depth` (configuration caps it at 128).
    let mut de = serde_json::Deserializer::from_slice(body);
    <serde::de::IgnoredAny as serde::Deserialize>::deserialize(&mut de)
        .and_then(|_| de.end())
        .map_err(|e| InputLimitError::InvalidJson(e.to_string()))
}

/// Size and JSON limits for one request body, from `[limits]`.
pub fn check_body(body: &[u8], limits: &LimitsConfig) -> Result<(), InputLimitError> {
    check_body_size(body.len(), limits.max_body_bytes())?;
    check_json(body, limits.max_json_depth())
}

/// The attachment allowlist and size limit, from `[limits]`.
#[derive(Debug, Clone)]
pub struct AttachmentPolicy {
    allowed: Vec<String>,
    max_bytes: usize,
}

/// An accepted attachment: its normalized MIME type (parameters dropped) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub mime_type: String,
    pub bytes: Vec<u8>,
}

/// Types recognised by their first bytes. A payload declared as one of these must carry
/// its signature; a payload declared as anything else must not carry any of them.
const SIGNATURES: &[(&str, &[&[u8]])] = &[
    ("image/png", &[b"\x89PNG\r\n\x1a\n"]),
    ("image/jpeg", &[b"\xff\xd8\xff"]),
    ("image/gif", &[b"GIF87a", b"GIF89a"]),
    ("application/pdf", &[b"%PDF-"]),
];

/// What the content is by its magic bytes, if it is one of the sniffed types.
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    for (mime, sigs) in SIGNATURES {
        if sigs.iter().any(|s| bytes.starts_with(s)) {
            return Some(mime);
        }
    }
    // RIFF....WEBP
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        return Some("image/webp");
    }
    None
}

fn is_sniffed_type(mime: &str) -> bool {
    mime == "image/webp" || SIGNATURES.iter().any(|(m, _)| *m == mime)
}

impl AttachmentPolicy {
    pub fn new(limits: &LimitsConfig) -> Self {
        Self {
            allowed: limits.attachment_types(),
            max_bytes: limits.attachment_max_bytes(),
        }
    }

    /// `allowed` entries are `type/subtype` or `type/*`, compared case-insensitively.
    pub fn with(allowed: &[&str], max_bytes: usize) -> Self {
        Self {
            allowed: allowed.iter().map(|t| t.to_ascii_lowercase()).collect(),
            max_bytes,
        }
    }

    fn allows(&self, mime: &str) -> bool {
        self.allowed.iter().any(|a| {
            a == mime
                || a.strip_suffix("/*")
                    .is_some_and(|family| mime.split_once('/').is_some_and(|(f, _)| f == family))
        })
    }

    /// Decodes `data:<type>[;params];base64,<data>`, then checks, in order: the declared
    /// type against the allowlist, the size (bounded before decoding, so a huge string is
    /// not decoded only to be refused), and the content's magic bytes against the declared
    /// type.
    pub fn decode_data_url(&self, url: &str) -> Result<Attachment, InputLimitError> {
        let rest = url
            .get(..5)
            .filter(|p| p.eq_ignore_ascii_case("data:"))
            .map(|_| &url[5..])
            .ok_or(InputLimitError::NotDataUrl)?;
        let (meta, data) = rest.split_once(',').ok_or(InputLimitError::NotDataUrl)?;
        let mut parts = meta.split(';').map(str::trim);
        let mime = parts.next().unwrap_or_default().to_ascii_lowercase();
        let mut base64 = false;
        for p in parts {
            if p.eq_ignore_ascii_case("base64") {
                base64 = true;
            }
        }
        // Only base64 is accepted: percent-encoded data URLs are rare for files and would
        // need a second decoder for no gain.
        if !base64 {
            return Err(InputLimitError::NotDataUrl);
        }
        let valid_mime = mime.split_once('/').is_some_and(|(a, b)| {
            !a.is_empty()
                && !b.is_empty()
                && mime
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"/.+-_".contains(&c))
        });
        if !valid_mime {
            return Err(InputLimitError::TypeNotAllowed(mime));
        }
        if !self.allows(&mime) {
            return Err(InputLimitError::TypeNotAllowed(mime));
        }
        let data = data.trim();
        // 4 base64 characters carry 3 bytes; anything longer than that bound is too big.
        if data.len() / 4 * 3 > self.max_bytes.saturating_add(3) {
            return Err(InputLimitError::AttachmentTooLarge {
                limit: self.max_bytes,
            });
        }
        let bytes = decode_base64(data)?;
        if bytes.len() > self.max_bytes {
            return Err(InputLimitError::AttachmentTooLarge {
                limit: self.max_bytes,
            });
        }
        match sniff(&bytes) {
            Some(actual) if actual != mime => {
                return Err(InputLimitError::TypeMismatch {
                    declared: mime,
                    actual,
                })
            }
            None if is_sniffed_type(&mime) => {
                return Err(InputLimitError::TypeMismatch {
                    declared: mime,
                    actual: "something else",
                })
            }
            _ => {}
        }
        Ok(Attachment {
            mime_type: mime,
            bytes,
        })
    }
}

/// Standard or URL-safe alphabet, padded or not: clients differ, the bytes do not.
fn decode_base64(data: &str) -> Result<Vec<u8>, InputLimitError> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let data = data.as_bytes();
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        if let Ok(b) = engine.decode(data) {
            return Ok(b);
        }
    }
    Err(InputLimitError::BadBase64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;

    #[test]
    fn json_depth_is_limited_without_recursion() {
        assert!(check_json(br#"{"a":[1,{"b":[]}]}"#, 4).is_ok());
        assert_eq!(
            check_json(br#"{"a":[1,{"b":[]}]}"#, 3),
            Err(InputLimitError::TooDeep { limit: 3 })
        );
        // Brackets inside strings (with escaped quotes) do not count.
        assert!(check_json(br#"{"a":"[[[[\"[[[[{{{{"}"#, 1).is_ok());
        // A million levels: refused fast, no stack overflow.
        let deep = vec![b'['; 1_000_000];
        assert_eq!(
            check_json(&deep, 64),
            Err(InputLimitError::TooDeep { limit: 64 })
        );
        let deep_obj = "{\"a\":".repeat(100_000);
        assert!(matches!(
            check_json(deep_obj.as_bytes(), 64),
            Err(InputLimitError::TooDeep { .. })
        ));
        // Deep configured limits still parse.
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(check_json(ok.as_bytes(), 100).is_ok());
    }

    #[test]
    fn json_must_parse() {
        for bad in [&b"{"[..], b"[1,]", b"{\"a\" 1}", b"", b"{} {}", b"]]]"] {
            let e = check_json(bad, 64).expect_err("invalid");
            assert!(matches!(e, InputLimitError::InvalidJson(_)), "{bad:?}");
            assert_eq!(e.status(), 400);
        }
    }

    #[test]
    fn body_size() {
        let limits = LimitsConfig {
            max_body_bytes: Some(8),
            ..Default::default()
        };
        assert!(check_body(b"[1,2,3]", &limits).is_ok());
        let e = check_body(b"[1,2,3,4,5]", &limits).expect_err("too big");
        assert_eq!(e.status(), 413);
    }

    fn url(mime: &str, bytes: &[u8]) -> String {
        format!("data:{mime};base64,{}", STANDARD.encode(bytes))
    }

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    const PDF: &[u8] = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n";

    #[test]
    fn data_urls_decode_and_sniff() {
        let p = AttachmentPolicy::with(
            &["image/png", "application/pdf", "text/plain", "image/*"],
            1024,
        );
        let a = p.decode_data_url(&url("image/png", PNG)).expect("png");
        assert_eq!(a.mime_type, "image/png");
        assert_eq!(a.bytes, PNG);
        let a = p
            .decode_data_url(&url("Application/PDF", PDF))
            .expect("pdf");
        assert_eq!(a.mime_type, "application/pdf");
        let a = p
            .decode_data_url("DATA:text/plain;charset=utf-8;base64,aGVsbG8")
            .expect("text, unpadded");
        assert_eq!(a.bytes, b"hello");
        // URL-safe alphabet.
        assert_eq!(
            p.decode_data_url("data:text/plain;base64,-_8=")
                .expect("urlsafe")
                .bytes,
            [0xfb, 0xff]
        );
        // A family wildcard still sniffs.
        let gif = b"GIF89a\x01\0\x01\0";
        assert_eq!(
            p.decode_data_url(&url("image/gif", gif))
                .expect("gif")
                .mime_type,
            "image/gif"
        );
    }

    #[test]
    fn refused_attachments() {
        let p = AttachmentPolicy::with(&["image/png", "application/pdf", "text/plain"], 64);
        let cases: Vec<(String, u16)> = vec![
            // Not on the allowlist.
            (url("application/x-msdownload", b"MZ\x90\0"), 415),
            (url("image/svg+xml", b"<svg/>"), 415),
            // Mislabelled: PDF bytes declared as PNG, PNG declared as text, text as PDF.
            (url("image/png", PDF), 415),
            (url("text/plain", PNG), 415),
            (url("application/pdf", b"just text"), 415),
            // Too big after decoding, and too big before decoding.
            (url("text/plain", &[b'a'; 65]), 413),
            (
                format!("data:text/plain;base64,{}", "A".repeat(10_000)),
                413,
            ),
            // Malformed.
            ("data:text/plain,hello".to_owned(), 400),
            ("https://example.com/x.png".to_owned(), 400),
            ("data:text/plain;base64,@@@@".to_owned(), 400),
            ("data:;base64,aGVsbG8=".to_owned(), 415),
            ("data".to_owned(), 400),
            ("dätä:x".to_owned(), 400),
        ];
        for (u, status) in cases {
            let e = p.decode_data_url(&u).expect_err(&u[..u.len().min(60)]);
            assert_eq!(e.status(), status, "{}: {e}", &u[..u.len().min(60)]);
        }
    }

    #[test]
    fn sniffing() {
        assert_eq!(sniff(PNG), Some("image/png"));
        assert_eq!(sniff(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff(PDF), Some("application/pdf"));
        assert_eq!(sniff(b"hello"), None);
        assert_eq!(sniff(b""), None);
    }
}
