//! A run's attachments: `input_image`/`input_file` data URLs in its input are checked
//! (`[limits]` allowlist and size), stored per account, and replaced in the logged input by
//! `tether-upload://<file_id>`; the agent still receives the content, because the run
//! resolves each URI back to a data URL when it builds the agent's request. (The control
//! actions that upload and read attachments are in `api::attachments`.)
//!
//! Why URIs in the log: a data URL repeated in every later turn's history would be stored
//! once per event and streamed to every reader of the log; the URI keeps the log small and
//! puts the bytes behind the account check.

use base64::Engine;
use policies::input::AttachmentPolicy;
use runtime_adapter::{Block, Item, TurnRequest};
use session_log::{Attachment, Store};

use crate::error::ApiError;
use crate::ids::new_id;

/// Scheme of the references Tether puts in the log in place of inline data (the store's
/// deletes read it too, to find a session's uploads).
pub const SCHEME: &str = session_log::removal::UPLOAD_SCHEME;

/// An accepted attachment, checked but not yet stored.
pub struct Upload {
    pub file_id: String,
    pub mime_type: String,
    pub filename: Option<String>,
    pub bytes: Vec<u8>,
}

fn is_data_url(s: &str) -> bool {
    s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:"))
}

pub fn refused(e: policies::InputLimitError) -> ApiError {
    let code = match e.status() {
        413 => "attachment_too_large",
        415 => "unsupported_attachment_type",
        _ => "invalid_attachment",
    };
    ApiError::new(e.status(), "invalid_request_error", code, e.to_string())
}

/// Decodes and checks every inline attachment of the turn's input and replaces it by its
/// upload URI. Nothing is stored: on any refusal the caller answers and writes nothing.
pub fn extract(
    policy: &AttachmentPolicy,
    mut turn: TurnRequest,
) -> std::result::Result<(TurnRequest, Vec<Upload>), ApiError> {
    let mut uploads = Vec::new();
    let mut take = |data: &mut String, filename: Option<String>| {
        if !is_data_url(data) {
            return Ok(());
        }
        let a = policy.decode_data_url(data).map_err(refused)?;
        let file_id = new_id("file");
        *data = format!("{SCHEME}{file_id}");
        uploads.push(Upload {
            file_id,
            mime_type: a.mime_type,
            filename,
            bytes: a.bytes,
        });
        Ok::<(), ApiError>(())
    };
    for item in &mut turn.input {
        let Item::Message { content, .. } = item else {
            continue;
        };
        for block in content {
            match block {
                Block::Image { url, .. } => take(url, None)?,
                Block::File { filename, data, .. } => {
                    if let Some(d) = data {
                        take(d, filename.clone())?
                    }
                }
                Block::Text(_) => {}
            }
        }
    }
    Ok((turn, uploads))
}

/// Checks every upload reference the turn's new input names before anything is written:
/// each must be a valid id (the one id validator) naming an upload of this account. One
/// of another account, or none at all, is not found (never an agent failure later).
pub async fn check_refs(
    store: &dyn Store,
    account_id: &str,
    turn: &TurnRequest,
) -> std::result::Result<(), ApiError> {
    for item in &turn.input {
        let Item::Message { content, .. } = item else {
            continue;
        };
        for block in content {
            let refs: [Option<&String>; 2] = match block {
                Block::Image { url, .. } => [Some(url), None],
                Block::File { data, url, .. } => [data.as_ref(), url.as_ref()],
                Block::Text(_) => [None, None],
            };
            for file_id in refs
                .into_iter()
                .flatten()
                .filter_map(|r| r.strip_prefix(SCHEME))
            {
                crate::ids::client_id("upload reference", file_id).map_err(|e| e.to_api())?;
                match store.attachment(account_id, file_id).await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        return Err(ApiError::new(
                            404,
                            "invalid_request_error",
                            "upload_not_found",
                            format!("upload {SCHEME}{file_id} not found"),
                        )
                        .with_param("input"))
                    }
                    Err(e) => return Err(ApiError::store_unavailable(&e, "cannot read an upload")),
                }
            }
        }
    }
    Ok(())
}

/// Stores accepted attachments under the account.
pub async fn save(
    store: &dyn Store,
    account_id: &str,
    uploads: Vec<Upload>,
) -> std::result::Result<(), ApiError> {
    for u in uploads {
        let a = Attachment {
            account_id: account_id.to_owned(),
            file_id: u.file_id,
            mime_type: u.mime_type,
            filename: u.filename,
            content: u.bytes,
        };
        store
            .put_attachment(&a)
            .await
            .map_err(|e| ApiError::store_unavailable(&e, "cannot store an attachment"))?;
    }
    Ok(())
}

fn data_url(a: &Attachment) -> String {
    format!(
        "data:{};base64,{}",
        a.mime_type,
        base64::engine::general_purpose::STANDARD.encode(&a.content)
    )
}

/// Replaces upload URIs in `history` and `turn` with data URLs of the account's stored
/// content, so the agent (which cannot read Tether's store) gets usable input.
pub async fn resolve_for_agent(
    store: &dyn Store,
    account_id: &str,
    mut history: Vec<Item>,
    mut turn: TurnRequest,
) -> std::result::Result<(Vec<Item>, TurnRequest), String> {
    for item in history.iter_mut().chain(turn.input.iter_mut()) {
        let Item::Message { content, .. } = item else {
            continue;
        };
        for block in content {
            let slot = match block {
                Block::Image { url, .. } => Some(url),
                Block::File { data, url, .. } => match (data, url) {
                    (Some(d), _) if d.starts_with(SCHEME) => Some(d),
                    (_, Some(u)) if u.starts_with(SCHEME) => Some(u),
                    _ => None,
                },
                Block::Text(_) => None,
            };
            let Some(slot) = slot else { continue };
            let Some(file_id) = slot.strip_prefix(SCHEME) else {
                continue;
            };
            match store.attachment(account_id, file_id).await {
                Ok(Some(a)) => *slot = data_url(&a),
                Ok(None) => return Err(format!("attachment {file_id} not found")),
                Err(e) => return Err(format!("cannot read attachment {file_id}: {e}")),
            }
        }
    }
    // A File block whose reference was in `url` now holds a data URL there; the adapters
    // send `url` as file_url, so move it to `data` where it belongs.
    for item in history.iter_mut().chain(turn.input.iter_mut()) {
        if let Item::Message { content, .. } = item {
            for block in content {
                if let Block::File { data, url, .. } = block {
                    if data.is_none() && url.as_deref().is_some_and(is_data_url) {
                        *data = url.take();
                    }
                }
            }
        }
    }
    Ok((history, turn))
}
