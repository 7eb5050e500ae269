//! Attachment actions of the control API: `UploadAttachment` (a data URL in, a URI out)
//! and `AttachmentContent` (the bytes back, for the owning account only; anyone else gets
//! 404; a path without the upload scheme is a workspace file, see `workspace`). How a
//! run's attachments are checked and stored is in `runs::attachments`.

use pingora::proxy::Session;
use pingora::Result;
use serde_json::json;

use super::{query_value, respond_envelope, workspace, ActionResult, Call, ControlError};
use crate::ids::new_id;
use crate::runs::attachments::{refused, save, Upload, SCHEME};
use crate::state::State;

/// `POST /agentengine/api/v1/UploadAttachment` with `{"Data": "data:…", "FileName": …}`:
/// answers `{"FileUri": "tether-upload://…", "FileId", "MimeType", "SizeBytes"}`.
pub async fn upload(call: &Call<'_>) -> ActionResult {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        data: String,
        #[serde(default)]
        file_name: Option<String>,
    }
    let p: Params = call.params()?;
    let a = call
        .state
        .attachments
        .decode_data_url(&p.data)
        .map_err(|e| ControlError::from(refused(e)))?;
    let upload = Upload {
        file_id: new_id("file"),
        mime_type: a.mime_type,
        filename: p.file_name,
        bytes: a.bytes,
    };
    let answer = json!({
        "FileUri": format!("{SCHEME}{}", upload.file_id),
        "FileId": upload.file_id,
        "MimeType": upload.mime_type,
        "SizeBytes": upload.bytes.len(),
    });
    save(&*call.state.store, call.account_id, vec![upload])
        .await
        .map_err(ControlError::from)?;
    Ok(answer)
}

/// `GET /agentengine/api/v1/AttachmentContent?FileUri=tether-upload://…`: the stored bytes
/// with their type, for the owning account; any other id is 404 in the control envelope.
pub async fn content(
    state: &State,
    session: &mut Session,
    account_id: &str,
    request_id: &str,
) -> Result<()> {
    const ACTION: &str = "AttachmentContent";
    let raw = session
        .req_header()
        .uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|p| p.strip_prefix("FileUri="))
        .filter(|raw| !raw.is_empty());
    let uri = match raw.map(|raw| query_value(raw).ok_or(raw)) {
        Some(Ok(uri)) => uri,
        Some(Err(raw)) => {
            tracing::warn!(account_id, file_uri = ?raw, "AttachmentContent: FileUri is not UTF-8 percent-encoding");
            let e = ControlError::bad_request("FileUri is not valid percent-encoded UTF-8");
            return respond_envelope(session, ACTION, request_id, Err(e)).await;
        }
        None => {
            let e = ControlError::bad_request("FileUri is required");
            return respond_envelope(session, ACTION, request_id, Err(e)).await;
        }
    };
    // Without the upload scheme, the seed's rule: a path relative to the workspace.
    let Some(file_id) = uri.strip_prefix(SCHEME) else {
        return workspace::serve_file(state, session, account_id, request_id, &uri).await;
    };
    match state.store.attachment(account_id, file_id).await {
        Ok(Some(a)) => {
            let mut h = pingora::http::ResponseHeader::build(200, Some(4))?;
            h.insert_header("content-type", a.mime_type.as_str())?;
            h.insert_header("content-length", a.content.len().to_string())?;
            h.insert_header("cache-control", "private, no-store")?;
            // Served bytes are the client's own upload; never let a browser sniff them
            // into something executable.
            h.insert_header("x-content-type-options", "nosniff")?;
            session.write_response_header(Box::new(h), false).await?;
            session
                .write_response_body(Some(bytes::Bytes::from(a.content)), true)
                .await
        }
        Ok(None) => {
            let e = ControlError::not_found("attachment", &uri);
            respond_envelope(session, ACTION, request_id, Err(e)).await
        }
        Err(e) => respond_envelope(session, ACTION, request_id, Err(e.into())).await,
    }
}
