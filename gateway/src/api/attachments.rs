//! Attachment actions of the control API: `UploadAttachment` (a data URL in, a URI out)
//! and `AttachmentContent` (the bytes back, for the owning account only; anyone else gets
//! 404; a path without the upload scheme is a workspace file, see `workspace`), both served
//! inert (`send_inert`). How a run's attachments are checked and stored is in
//! `runs::attachments`.

use pingora::proxy::Session;
use pingora::Result;
use serde_json::json;

use super::{query_value, respond_envelope, workspace, ActionResult, Call, ControlError};
use crate::ids::new_id;
use crate::quota;
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
    let adding = quota::Adding {
        upload_bytes: upload.bytes.len() as u64,
        ..quota::Adding::default()
    };
    quota::refuse_over_quota(call.state, call.account_id, adding)
        .await
        .map_err(ControlError::from)?;
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
        Ok(Some(a)) => send_inert(session, &a.mime_type, a.filename.as_deref(), a.content).await,
        Ok(None) => {
            let e = ControlError::not_found("attachment", &uri);
            respond_envelope(session, ACTION, request_id, Err(e)).await
        }
        Err(e) => respond_envelope(session, ACTION, request_id, Err(e.into())).await,
    }
}

/// Sends a file (an upload or a workspace file) so that nothing in it can run or be used
/// by another site: never sniffed into another type, readable by Tether's own origin only
/// (`Cross-Origin-Resource-Policy`), sandboxed with no sources when opened as a page, and
/// a download unless it is an image a browser only draws or plain text.
pub async fn send_inert(
    session: &mut Session,
    mime: &str,
    filename: Option<&str>,
    content: Vec<u8>,
) -> Result<()> {
    let mut h = pingora::http::ResponseHeader::build(200, Some(8))?;
    h.insert_header("content-type", mime)?;
    h.insert_header("content-length", content.len().to_string())?;
    h.insert_header("cache-control", "private, no-store")?;
    for (name, value) in inert_headers(mime, filename) {
        h.insert_header(name, value)?;
    }
    crate::client::respond::drain(session).await;
    session.write_response_header(Box::new(h), false).await?;
    session
        .write_response_body(Some(bytes::Bytes::from(content)), true)
        .await
}

/// The headers that keep a served file inert (see `send_inert`).
fn inert_headers(mime: &str, filename: Option<&str>) -> [(&'static str, String); 4] {
    [
        ("x-content-type-options", "nosniff".to_owned()),
        ("cross-origin-resource-policy", "same-origin".to_owned()),
        (
            "content-security-policy",
            "default-src 'none'; sandbox".to_owned(),
        ),
        ("content-disposition", disposition(mime, filename)),
    ]
}

/// `Content-Disposition`: raster images and plain text may show in the browser; anything
/// else (HTML, SVG, XML, JavaScript, PDF, unknown types) is a download. The name is ASCII
/// with quotes and controls replaced, plus the exact UTF-8 name in `filename*`.
fn disposition(mime: &str, name: Option<&str>) -> String {
    let essence = mime
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let shown = matches!(
        essence.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" | "image/avif" | "image/bmp"
    ) || essence == "text/plain";
    let kind = if shown { "inline" } else { "attachment" };
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return kind.to_owned();
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

#[cfg(test)]
mod tests {
    use super::disposition;

    #[test]
    fn only_raster_images_and_plain_text_show_inline() {
        for inline in [
            "image/png",
            "image/jpeg",
            "text/plain; charset=utf-8",
            "IMAGE/GIF",
        ] {
            assert!(disposition(inline, None).starts_with("inline"), "{inline}");
        }
        for download in [
            "image/svg+xml",
            "text/html",
            "application/xhtml+xml",
            "text/xml",
            "application/xml",
            "text/javascript",
            "application/javascript",
            "application/pdf",
            "application/octet-stream",
            "image/x-unknown",
            "",
        ] {
            assert!(
                disposition(download, None).starts_with("attachment"),
                "{download}"
            );
        }
        assert_eq!(
            disposition("image/png", Some("a.png")),
            "inline; filename=\"a.png\"; filename*=UTF-8''a%2Epng"
        );
        assert!(disposition("application/pdf", Some("r\u{e9}sum\u{e9} \"x\".pdf")).starts_with(
            "attachment; filename=\"r_sum_ _x_.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22x%22%2Epdf"
        ));
    }
}
