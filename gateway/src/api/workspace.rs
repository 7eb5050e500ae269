//! Workspace files: `ListWorkspaceFiles` and the workspace half of `AttachmentContent`,
//! read-only, under `workspace_dir/<account_id>/`. A path is refused (400, logged) when it
//! could name anything outside that root: `..`, absolute paths, backslashes, NUL,
//! percent-escapes left after the query was decoded once. Files and directories are
//! opened beneath the root without following any symbolic link (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or `O_NOFOLLOW` per component where the kernel
//! has no `openat2`), so a link swapped in after a check cannot lead outside, and only a
//! regular file is read (a FIFO would hold the request forever): what was opened is what
//! is checked and served. Links are not listed. Served files are capped in size, typed by
//! their content, never by their name, and sent inert (see `runs::attachments::inert`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

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

/// Opens `names` beneath the directory `dir` without following a symbolic link anywhere
/// on the way; `flags` say how (a directory, or a file to read).
fn open_beneath(dir: &OwnedFd, names: &[&str], flags: OFlags) -> Result<OwnedFd, Refusal> {
    let flags = flags | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY;
    let link = |e: Errno| match e {
        // A link on the way (ELOOP), or a way out of the root (EXDEV: impossible with the
        // names `lexical` lets through, refused the same all the same).
        Errno::LOOP | Errno::XDEV => Refusal::Unsafe("it goes through a symbolic link"),
        _ => Refusal::NotFound,
    };
    if names.is_empty() {
        return rustix::fs::openat(dir, ".", flags, Mode::empty()).map_err(link);
    }
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, names.join("/"), flags, Mode::empty(), resolve) {
        Err(Errno::NOSYS) => {}
        opened => return opened.map_err(link),
    }
    // No openat2 (Linux before 5.6, some sandboxes): one name at a time, none a link.
    let mut at: Option<OwnedFd> = None;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let how = if last {
            flags | OFlags::NOFOLLOW
        } else {
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
        };
        let from = at.as_ref().unwrap_or(dir);
        at = Some(rustix::fs::openat(from, *name, how, Mode::empty()).map_err(link)?);
    }
    at.ok_or(Refusal::NotFound)
}

/// The account's root directory, opened beneath `workspace_dir` (itself the operator's
/// path, followed as configured) without following links, if the account id can name a
/// directory.
fn account_root(workspace_dir: &Path, account_id: &str) -> Option<OwnedFd> {
    let plain = !account_id.is_empty()
        && account_id != "."
        && account_id != ".."
        && !account_id.contains(['/', '\\', '\0']);
    if !plain {
        tracing::warn!(account_id, "account id cannot name a workspace directory");
        return None;
    }
    let dir = rustix::fs::open(
        workspace_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    open_beneath(&dir, &[account_id], OFlags::DIRECTORY).ok()
}

/// The account's workspace directory by name, for removing it whole (an account's data
/// deletion), when it is one `account_root` opens: a plain name and no link.
pub(super) fn account_dir(workspace_dir: &Path, account_id: &str) -> Option<PathBuf> {
    account_root(workspace_dir, account_id).map(|_| workspace_dir.join(account_id))
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
    let names = lexical(path).map_err(fail)?;
    let Some(root) = account_root(dir, account_id) else {
        if names.is_empty() {
            return Ok(json!({ "Path": "", "Files": [], "Total": 0, "Truncated": false }));
        }
        return Err(fail(Refusal::NotFound));
    };
    let listed = open_beneath(&root, &names, OFlags::DIRECTORY).map_err(|r| match r {
        Refusal::NotFound if open_beneath(&root, &names, OFlags::NONBLOCK).is_ok() => {
            Refusal::WrongKind("not a directory")
        }
        r => r,
    });
    let listed = listed.map_err(fail)?;
    let shown = names.join("/");
    let entries = rustix::fs::Dir::read_from(&listed).map_err(|_| fail(Refusal::NotFound))?;
    let mut files: Vec<(bool, String, Value)> = Vec::new();
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue; // not UTF-8: it could not be named in a request either
        };
        if name == "." || name == ".." {
            continue;
        }
        // Not followed: a link is left out, as is anything that is neither a file nor a
        // directory (it could not be opened).
        let Ok(meta) = rustix::fs::statat(&listed, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = FileType::from_raw_mode(meta.st_mode);
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::RegularFile => false,
            _ => continue,
        };
        total += 1;
        let modified = chrono::DateTime::<chrono::Utc>::from_timestamp(
            meta.st_mtime,
            u32::try_from(meta.st_mtime_nsec).unwrap_or(0),
        )
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
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
                "SizeBytes": (!is_dir).then_some(meta.st_size),
                "ModifiedAt": modified,
            }),
        ));
    }
    files.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let truncated = files.len() > MAX_ENTRIES;
    files.truncate(MAX_ENTRIES);
    Ok(json!({
        "Path": shown,
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
    let names = lexical(path).map_err(fail)?;
    let root = account_root(dir, account_id).ok_or_else(|| fail(Refusal::NotFound))?;
    if names.is_empty() {
        return Err(fail(Refusal::WrongKind("a directory")));
    }
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
    let fd = open_beneath(&root, &names, OFlags::NONBLOCK).map_err(fail)?;
    // The kind of what was opened, not of what the name pointed at a moment before.
    let stat = rustix::fs::fstat(&fd).map_err(|_| fail(Refusal::NotFound))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => {}
        FileType::Directory => return Err(fail(Refusal::WrongKind("a directory"))),
        _ => return Err(fail(Refusal::WrongKind("not a regular file"))),
    }
    let file = std::fs::File::from(fd);
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
    let name = names.last().copied().unwrap_or("file").to_owned();
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
    super::attachments::send_inert(session, mime, Some(&file.name), file.bytes).await
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
    fn links_are_never_followed_and_only_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(ws.join("acct/sub")).unwrap();
        std::fs::write(ws.join("acct/sub/a.txt"), "a").unwrap();
        std::fs::write(base.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(base.join("secret.txt"), ws.join("acct/out")).unwrap();
        std::os::unix::fs::symlink(ws.join("acct/sub/a.txt"), ws.join("acct/in")).unwrap();
        std::os::unix::fs::symlink(&base, ws.join("acct/up")).unwrap();
        std::fs::create_dir_all(ws.join("other")).unwrap();
        std::os::unix::fs::symlink(&base, ws.join("evil")).unwrap();
        std::os::unix::fs::symlink(ws.join("other"), ws.join("alias")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            ws.join("acct/pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();

        let read = |path: &str| read_blocking(&ws, "acct", path, 1024).map(|f| f.bytes);
        assert_eq!(read("sub/a.txt").ok().unwrap(), b"a");
        for link in ["in", "out", "up/secret.txt", "up/ws/acct/sub/a.txt"] {
            let e = read(link).err().unwrap();
            assert_eq!(e.status, 400, "{link}");
            assert!(e.message.contains("symbolic link"), "{link}: {}", e.message);
        }
        let started = std::time::Instant::now();
        let fifo = read("pipe").err().unwrap();
        assert_eq!(
            (
                fifo.status,
                started.elapsed() < std::time::Duration::from_secs(1)
            ),
            (400, true)
        );
        assert!(
            fifo.message.contains("not a regular file"),
            "{}",
            fifo.message
        );
        assert_eq!(read("nope").err().unwrap().status, 404);
        assert_eq!(read("sub").err().unwrap().status, 400);

        let listed = list_blocking(&ws, "acct", "").unwrap();
        let names: Vec<&str> = listed["Files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["Name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["sub"], "links and the FIFO are not listed");
        assert!(list_blocking(&ws, "acct", "up").is_err());
        // An account root that is a link (out of workspace_dir or not) is no root.
        assert!(account_root(&ws, "evil").is_none());
        assert!(account_root(&ws, "alias").is_none());
        assert!(account_root(&ws, "other").is_some());
        for bad in ["", ".", "..", "a/b", "a\\b"] {
            assert!(account_root(&ws, bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn content_is_typed_by_its_bytes() {
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
    }
}
