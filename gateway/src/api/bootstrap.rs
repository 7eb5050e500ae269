//! `GetAgentUiBootstrap`: what a console needs to know before it shows anything — the
//! agent, Tether's version, the caller's account, and which run-lifecycle actions and
//! features it may offer. Every flag is derived from the configuration, the agent
//! protocol and the actions this API answers, so a console never offers what the
//! gateway cannot do.

use runtime_adapter::Protocol;
use serde::Deserialize;
use serde_json::json;
use session_log::checkpoints::checkpoints;

use super::checkpoints::session_history;
use super::{answers, ActionResult, Call};

/// How `ResumeRun` continues a run from a checkpoint in front of this protocol. A
/// stateless agent (OpenAI) is sent the log's history up to the checkpoint, so any
/// checkpoint Tether recorded can be resumed; a stateful one (A2A, ADK, LangGraph) keeps its own
/// state, which a replayed history would contradict, so resume is not offered.
fn resume_mode(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenAiChat | Protocol::OpenAiResponses => "history_replay",
        Protocol::A2a | Protocol::Adk | Protocol::LangGraph => "unsupported",
    }
}

pub async fn get_agent_ui_bootstrap(call: &Call<'_>) -> ActionResult {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Params {
        #[serde(default)]
        session_id: Option<String>,
    }
    let p: Params = call.params()?;
    let config = &call.state.config;
    let protocol = config.protocol;
    // Runs are started through `/v1/responses` only in front of the OpenAI protocols;
    // an A2A or ADK agent's clients speak its own protocol.
    let run_path = matches!(protocol, Protocol::OpenAiChat | Protocol::OpenAiResponses)
        .then_some("/v1/responses");
    let resume = resume_mode(protocol);
    // Without a session: Tether records checkpoints for every run. With one: whether it
    // has a checkpoint that can be resumed now.
    let checkpoints_usable = match &p.session_id {
        None => true,
        Some(session_id) => {
            let (_, events) = session_history(call, session_id).await?;
            // A checkpoint a fork inherited is resumed in the session that holds it.
            checkpoints(&events, chrono::Utc::now())
                .iter()
                .any(|c| c.checkpoint_status.can_resume() && &c.session_id == session_id)
        }
    };
    let uploads = answers("UploadAttachment")
        && run_path.is_some()
        && !config.limits.attachment_types().is_empty();
    Ok(json!({
        "SessionId": p.session_id,
        "AccountId": call.account_id,
        "TetherVersion": env!("CARGO_PKG_VERSION"),
        "Agent": {
            "Name": config.model,
            "Protocol": protocol.as_str(),
            "RunPath": run_path,
        },
        "RuntimeCapabilities": { "ResumeRun": { "ResumeMode": resume } },
        "RunLifecycle": {
            "Checkpoints": checkpoints_usable,
            "CheckpointResume": resume != "unsupported" && answers("ResumeRun"),
            "CheckpointResumePreview": answers("GetCheckpointResumePreview"),
            "Cancel": answers("CancelRun"),
            "Subscribe": answers("SubscribeRunEvents"),
        },
        "Features": {
            "Uploads": uploads,
            "Feedback": answers("CreateFeedback") && answers("ListFeedback"),
            "Fork": answers("ForkSession"),
            // The console compacts without a summary of its own: someone must write it.
            "Compaction": answers("CompactSession") && call.state.runs.compactor().summarizes(),
            "WorkspaceFiles": config.workspace_dir.is_some() && answers("ListWorkspaceFiles"),
        },
    }))
}
