//! Checkpoints, tool receipts, resume preview and resume (being built).

use super::{ActionResult, Call, ControlError};

pub async fn list_session_checkpoints(_call: &Call<'_>) -> ActionResult {
    Err(ControlError {
        status: 501,
        message: "not implemented yet".into(),
        data: serde_json::Value::Null,
    })
}

pub async fn list_tool_receipts(_call: &Call<'_>) -> ActionResult {
    Err(ControlError {
        status: 501,
        message: "not implemented yet".into(),
        data: serde_json::Value::Null,
    })
}

pub async fn get_checkpoint_resume_preview(_call: &Call<'_>) -> ActionResult {
    Err(ControlError {
        status: 501,
        message: "not implemented yet".into(),
        data: serde_json::Value::Null,
    })
}

pub async fn resume_run(_call: &Call<'_>) -> ActionResult {
    Err(ControlError {
        status: 501,
        message: "not implemented yet".into(),
        data: serde_json::Value::Null,
    })
}
