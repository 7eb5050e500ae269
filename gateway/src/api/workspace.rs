//! Workspace files: `ListWorkspaceFiles` and the workspace half of `AttachmentContent`,
//! read-only, under `workspace_dir/<account_id>/`. A path is refused (400, logged) when it
//! could name anything outside that root: `..`, absolute paths, backslashes, NUL,
//! percent-escapes left after the query was decoded once, and symlinks that resolve
//! outside the root. Served files are capped in size and typed by their content, never
//! by their name.

use std::path::{Component, Path, PathBuf};

use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{respond_envelope, ActionResult, Call, ControlError};
use crate::state::State;

/// Most entries one listing returns; the rest are left out (`Truncated: true`).
const MAX_ENTRIES: usize = 1000;

/// Why a workspace request was refused.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// The path could reach outside the account's root (400).
    Unsafe(&'static str),
    /// Nothing there, or not visible to this account (404).
    NotFound,
    /// A directory where a file was asked for, or the reverse (400).
    WrongKind(&'static str),
}

impl Refusal {
    fn into_error(self, path: &str) -> ControlError {
        match self {
            Refusal::Unsafe(reason) => {
                let mut e = ControlError::bad_request(format!(
                    "workspace path {path:?} is not allowed: {reason}"
                ));
                e.data = json!({ "code": "path_not_allowed" });
                e
            }
            Refusal::NotFound => ControlError::not_found("workspace file", path),
            Refusal::WrongKind(what) => ControlError::bad_request(format!("{path:?} is {what}")),
        }
    }
}

/// The checks that need no file system: a workspace-relative path made only of normal
/// names. Returns those names (`.` and empty components dropped).
fn lexical(path: &str) -> Result<Vec<&str>, Refusal> {
    if path.contains('\0') {
        return Err(Refusal::Unsafe("it contains NUL"));
    }
    if path.contains('\\') {
        return Err(Refusal::Unsafe("backslashes are not path separators here"));
    }
    // The query string was decoded once; an escape still here was encoded twice, which
    // only a path trick needs.
    let escaped = path.split('%').skip(1).any(|rest| {
        rest.get(..2)
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    if escaped {
        return Err(Refusal::Unsafe("it holds a percent-escape"));
    }
    if path.starts_with('/') || Path::new(path).is_absolute() {
        return Err(Refusal::Unsafe("absolute paths are not workspace-relative"));
    }
    let mut names = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(Refusal::Unsafe("it climbs out with ..")),
            name => names.push(name),
        }
    }
    Ok(names)
}

/// The account's root, canonical, if the account id can name a directory and the root
/// is a directory inside `workspace_dir` (a symlinked account root leaving it is refused
/// like any other).
pub(super) fn account_root(workspace_dir: &Path, account_id: &str) -> Option<PathBuf> {
    let plain = !account_id.is_empty()
        && account_id != "."
        && account_id != ".."
        && !account_id.contains(['/', '\\', '\0']);
    if !plain {
        tracing::warn!(account_id, "account id cannot name a workspace directory");
        return None;
    }
    let root = workspace_dir.join(account_id).canonicalize().ok()?;
    (root.starts_with(workspace_dir) && root.is_dir()).then_some(root)
}

/// `path` under `root`, with every symlink resolved; refused when it resolves outside.
fn resolve(root: &Path, path: &str) -> Result<PathBuf, Refusal> {
    let names = lexical(path)?;
    let joined = names.iter().fold(root.to_path_buf(), |p, n| p.join(n));
    let real = joined.canonicalize().map_err(|_| Refusal::NotFound)?;
    if !real.starts_with(root) {
        return Err(Refusal::Unsafe("it resolves outside the workspace"));
    }
    Ok(real)
}

/// The path as the API shows it: relative to the root, `/`-separated.
fn relative(root: &Path, real: &Path) -> String {
    real.strip_prefix(root)
        .unwrap_or(Path::new(""))
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Logs a refused path (a path trick is worth an operator's attention) and makes the
/// error.
fn refused(account_id: &str, path: &str, refusal: Refusal) -> ControlError {
    if let Refusal::Unsafe(reason) = &refusal {
        tracing::warn!(account_id, path = ?path, reason, "workspace path refused");
    }
    refusal.into_error(path)
}

fn workspace_dir(state: &State) -> Result<&Path, ControlError> {
    state.config.workspace_dir.as_deref().ok_or_else(|| {
        let mut e = ControlError::not_found("workspace", "");
        e.message = "workspace files are off (set workspace_dir)".to_owned();
        e.data = json!({ "code": "workspace_files_disabled" });
        e
    })
}

/// `ListWorkspaceFiles` (`{"Path"?}`): one directory of the account's workspace,
/// directories first, then by name. An account with no workspace yet has an empty root.
pub async fn list_files(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        #[serde(default)]
        path: String,
    }
    let p: Params = call.params()?;
    let dir = workspace_dir(call.state)?.to_path_buf();
    let account_id = call.account_id.to_owned();
    // Refused before the file system is touched, the same for every account.
    lexical(&p.path).map_err(|r| refused(&account_id, &p.path, r))?;
    let listing = tokio::task::spawn_blocking(move || list_blocking(&dir, &account_id, &p.path))
        .await
        .map_err(|e| ControlError::unavailable(format!("workspace listing failed: {e}")))?;
    listing.map_err(|(path, r)| refused(call.account_id, &path, r))
}

fn list_blocking(dir: &Path, account_id: &str, path: &str) -> Result<Value, (String, Refusal)> {
    let fail = |r| (path.to_owned(), r);
    let Some(root) = account_root(dir, account_id) else {
        if lexical(path).map_err(fail)?.is_empty() {
            return Ok(json!({ "Path": "", "Files": [], "Total": 0, "Truncated": false }));
        }
        return Err(fail(Refusal::NotFound));
    };
    let real = resolve(&root, path).map_err(fail)?;
    if !real.is_dir() {
        return Err(fail(Refusal::WrongKind("not a directory")));
    }
    let entries = std::fs::read_dir(&real).map_err(|_| fail(Refusal::NotFound))?;
    let mut files: Vec<(bool, String, Value)> = Vec::new();
    let mut total = 0;
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue; // not UTF-8: it could not be named in a request either
        };
        // Followed, so a symlink shows what it points at; one pointing outside is left out.
        let Ok(target) = entry.path().canonicalize() else {
            continue;
        };
        if !target.starts_with(&root) {
            continue;
        }
        let Ok(meta) = target.metadata() else {
            continue;
        };
        total += 1;
        let is_dir = meta.is_dir();
        let modified = meta.modified().ok().map(|t| {
            chrono::DateTime::<chrono::Utc>::from(t)
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        });
        let shown = relative(&root, &real);
        let file_path = if shown.is_empty() {
            name.clone()
        } else {
            format!("{shown}/{name}")
        };
        files.push((
            !is_dir,
            name.clone(),
            json!({
                "Name": name,
                "Path": file_path,
                "IsDirectory": is_dir,
                "SizeBytes": (!is_dir).then_some(meta.len()),
                "ModifiedAt": modified,
            }),
        ));
    }
    files.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let truncated = files.len() > MAX_ENTRIES;
    files.truncate(MAX_ENTRIES);
    Ok(json!({
        "Path": relative(&root, &real),
        "Files": files.into_iter().map(|(_, _, v)| v).collect::<Vec<_>>(),
        "Total": total,
        "Truncated": truncated,
    }))
}

/// A file read for `AttachmentContent`.
struct FileContent {
    name: String,
    bytes: Vec<u8>,
}

fn read_blocking(
    dir: &Path,
    account_id: &str,
    path: &str,
    max_bytes: usize,
) -> Result<FileContent, ControlError> {
    use std::io::Read;
    let fail = |r| refused(account_id, path, r);
    lexical(path).map_err(fail)?;
    let root = account_root(dir, account_id).ok_or_else(|| fail(Refusal::NotFound))?;
    let real = resolve(&root, path).map_err(fail)?;
    if real == root || real.is_dir() {
        return Err(fail(Refusal::WrongKind("a directory")));
    }
    let file = std::fs::File::open(&real).map_err(|_| fail(Refusal::NotFound))?;
    let mut bytes = Vec::new();
    // One byte past the cap tells a file that is too large from one that fits exactly,
    // also when it grows while read.
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| fail(Refusal::NotFound))?;
    if bytes.len() > max_bytes {
        return Err(ControlError::new(
            413,
            format!("{path:?} is larger than {max_bytes} bytes"),
            json!({ "code": "file_too_large" }),
        ));
    }
    let name = real
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file")
        .to_owned();
    Ok(FileContent { name, bytes })
}

/// What the bytes are: a sniffed image or PDF, UTF-8 text, or opaque bytes.
fn content_type(bytes: &[u8]) -> &'static str {
    match policies::input::sniff(bytes) {
        Some(mime) => mime,
        None if !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok() => {
            "text/plain; charset=utf-8"
        }
        None => "application/octet-stream",
    }
}

/// `Content-Disposition`: images and plain text may show in the browser; anything else
/// is a download. The name is ASCII with quotes and controls replaced, plus the exact
/// UTF-8 name in `filename*`.
fn disposition(content_type: &str, name: &str) -> String {
    let kind = if content_type.starts_with("image/") || content_type.starts_with("text/plain") {
        "inline"
    } else {
        "attachment"
    };
    let ascii: String = name
        .chars()
        .map(|c| match c {
            ' '..='~' if c != '"' && c != '\\' => c,
            _ => '_',
        })
        .collect();
    let encoded = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// The workspace half of `AttachmentContent?FileUri=<relative path>`: the file's bytes,
/// or the envelope error.
pub async fn serve_file(
    state: &State,
    session: &mut Session,
    account_id: &str,
    request_id: &str,
    path: &str,
) -> pingora::Result<()> {
    const ACTION: &str = "AttachmentContent";
    let dir = match workspace_dir(state) {
        Ok(dir) => dir.to_path_buf(),
        Err(_) => {
            // Workspace files off: a path names nothing, as an unknown upload does.
            let e = ControlError::not_found("attachment", path);
            return respond_envelope(session, ACTION, request_id, Err(e)).await;
        }
    };
    let max_bytes = state.config.limits.attachment_max_bytes();
    let (account, wanted) = (account_id.to_owned(), path.to_owned());
    let read =
        tokio::task::spawn_blocking(move || read_blocking(&dir, &account, &wanted, max_bytes))
            .await
            .unwrap_or_else(|e| Err(ControlError::unavailable(e)));
    let file = match read {
        Ok(file) => file,
        Err(e) => return respond_envelope(session, ACTION, request_id, Err(e)).await,
    };
    let mime = content_type(&file.bytes);
    let mut h = ResponseHeader::build(200, Some(7))?;
    h.insert_header("content-type", mime)?;
    h.insert_header("content-length", file.bytes.len().to_string())?;
    h.insert_header("content-disposition", disposition(mime, &file.name))?;
    h.insert_header("cache-control", "private, no-store")?;
    h.insert_header("x-content-type-options", "nosniff")?;
    // Opened directly, the file is inert: no script, no plugin, its own origin.
    h.insert_header("content-security-policy", "default-src 'none'; sandbox")?;
    crate::client::respond::drain(session).await;
    session.write_response_header(Box::new(h), false).await?;
    session
        .write_response_body(Some(bytes::Bytes::from(file.bytes)), true)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_checks_refuse_every_way_out() {
        for (path, why) in [
            ("..", ".."),
            ("../etc/passwd", ".."),
            ("a/../../b", ".."),
            ("a/..", ".."),
            ("/etc/passwd", "absolute"),
            ("//etc/passwd", "absolute"),
            ("a\\..\\b", "backslashes"),
            ("..\\b", "backslashes"),
            ("a\0b", "NUL"),
            ("%2e%2e/secret", "percent"),
            ("a%2Fb", "percent"),
            ("%252e", "percent"),
        ] {
            match lexical(path) {
                Err(Refusal::Unsafe(reason)) => {
                    assert!(reason.contains(why), "{path:?}: {reason}")
                }
                other => panic!("{path:?} passed: {other:?}"),
            }
        }
        assert_eq!(lexical(""), Ok(vec![]));
        assert_eq!(lexical("./a//b/"), Ok(vec!["a", "b"]));
        assert_eq!(lexical("100% sure.txt"), Ok(vec!["100% sure.txt"]));
        assert_eq!(lexical("..a/b..").unwrap(), vec!["..a", "b.."]);
    }

    #[test]
    fn symlinks_are_followed_only_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("acct/sub")).unwrap();
        std::fs::write(ws.join("acct/sub/a.txt"), "a").unwrap();
        std::fs::write(base.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(base.join("secret.txt"), ws.join("acct/out")).unwrap();
        std::os::unix::fs::symlink(ws.join("acct/sub/a.txt"), ws.join("acct/in")).unwrap();
        std::fs::create_dir_all(ws.join("other")).unwrap();
        std::os::unix::fs::symlink(&base, ws.join("evil")).unwrap();

        let root = account_root(&ws, "acct").unwrap();
        assert_eq!(resolve(&root, "in").unwrap(), root.join("sub/a.txt"));
        assert_eq!(
            resolve(&root, "out"),
            Err(Refusal::Unsafe("it resolves outside the workspace"))
        );
        assert_eq!(resolve(&root, "nope"), Err(Refusal::NotFound));
        // An account root that is a symlink out of workspace_dir is no root.
        assert_eq!(account_root(&ws, "evil"), None);
        for bad in ["", ".", "..", "a/b", "a\\b"] {
            assert_eq!(account_root(&ws, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn content_is_typed_by_its_bytes_and_only_images_and_text_show_inline() {
        assert_eq!(content_type(b"\x89PNG\r\n\x1a\n...."), "image/png");
        assert_eq!(content_type(b"%PDF-1.7"), "application/pdf");
        assert_eq!(
            content_type("h\u{e9}llo".as_bytes()),
            "text/plain; charset=utf-8"
        );
        assert_eq!(
            content_type(b"<script>alert(1)</script>"),
            "text/plain; charset=utf-8"
        );
        assert_eq!(content_type(b"\xff\xfe\x00"), "application/octet-stream");
        assert_eq!(
            disposition("image/png", "a.png"),
            "inline; filename=\"a.png\"; filename*=UTF-8''a%2Epng"
        );
        assert!(disposition("application/pdf", "r\u{e9}sum\u{e9} \"x\".pdf").starts_with(
            "attachment; filename=\"r_sum_ _x_.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22x%22%2Epdf"
        ));
    }
}
