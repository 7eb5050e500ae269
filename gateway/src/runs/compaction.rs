//! Compaction: a session's history before its last turns condensed into a summary, and
//! recorded as a `compaction_boundary` and a `context_checkpoint` (nothing is deleted;
//! the projection then holds the summary and the turns kept). The summary is the
//! caller's (CompactSession's `Summary`) or a model's: the summarizer, an OpenAI Chat
//! Completions endpoint (`[compaction] summarizer_url`), or the agent itself when it
//! speaks OpenAI. CompactSession asks for a compaction; a turn whose history would exceed
//! `trigger_tokens` (or its own `compact_threshold`) gets one first.

use std::sync::Arc;

use runtime_adapter::compaction::{summary_of, summary_turn};
use runtime_adapter::{project, AgentTransport, Protocol, StreamParser, TurnCall, Upstream};
use serde_json::{json, Value};
use session_log::history::{ContextCheckpoint, History};
use session_log::{Lineage, NewEvent, StoreError};

use super::agent::Agent;
use super::drive::AGENT_ANSWER_CAP;
use crate::config::Config;

/// Why a compaction did not happen. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error("nothing to compact: the history holds no more than the {0} turn(s) to keep")]
    NothingToCompact(usize),
    #[error(
        "no summarizer: pass Summary, or set [compaction] summarizer_url (an agent that does \
         not speak OpenAI cannot summarize)"
    )]
    NoSummarizer,
    #[error("the summarizer failed: {0}")]
    Summarizer(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Who writes summaries, and when turns are compacted first.
pub struct Compactor {
    summarizer: Option<Summarizer>,
    /// Compact before a turn whose history would exceed this many estimated tokens.
    pub trigger_tokens: Option<u64>,
    /// Turns a compaction keeps whole when not told otherwise (`[compaction]
    /// keep_last_turns`).
    pub keep_last_turns: usize,
}

/// A Chat Completions (or Responses) endpoint that writes summaries.
struct Summarizer {
    agent: Arc<Agent>,
    upstream: &'static dyn Upstream,
    /// Named in its requests; otherwise the session's model.
    model: Option<String>,
    /// Where it is, for the record.
    url: String,
}

/// A compaction, ready to commit: its two events, and the history it leaves.
pub struct Compaction {
    pub checkpoint: ContextCheckpoint,
    pub events: [NewEvent; 2],
    pub history: History,
}

impl Compactor {
    /// From `[compaction]`; `agent` is the agent's own connection, the summarizer when no
    /// `summarizer_url` is set and the agent speaks OpenAI.
    pub fn new(config: &Config, agent: Arc<Agent>) -> Compactor {
        let c = &config.compaction;
        let summarizer = match &c.summarizer {
            Some(url) => Some(Summarizer {
                agent: Arc::new(Agent::at(url.clone(), Vec::new(), config)),
                upstream: runtime_adapter::upstream(Protocol::OpenAiChat, AgentTransport::Http),
                model: c.summarizer_model.clone(),
                url: format!("http://{}{}", url.authority, url.base_path),
            }),
            None if config.protocol.sends_history() => Some(Summarizer {
                agent,
                upstream: runtime_adapter::upstream(config.protocol, AgentTransport::Http),
                model: c.summarizer_model.clone(),
                url: "agent".into(),
            }),
            None => None,
        };
        Compactor {
            summarizer,
            trigger_tokens: c.trigger_tokens,
            keep_last_turns: c.keep_last_turns,
        }
    }

    /// Whether a compaction can be made without a summary given (a summarizer is set, or
    /// the agent speaks OpenAI).
    pub fn summarizes(&self) -> bool {
        self.summarizer.is_some()
    }

    /// A compaction of `history` (of `lineage`'s session) that keeps its last `keep`
    /// turns, summarised as `summary` or by the summarizer (told `model` when it has none
    /// of its own). `boundary` says why (`reason`, and what else the boundary records).
    pub async fn compact(
        &self,
        lineage: &Lineage,
        history: &History,
        keep: usize,
        summary: Option<String>,
        model: &str,
        mut boundary: serde_json::Map<String, Value>,
    ) -> Result<Compaction, CompactError> {
        let covered = history
            .before_last_turns(lineage, keep)
            .ok_or(CompactError::NothingToCompact(keep))?;
        boundary.insert("keep_last_turns".into(), json!(keep));
        let summary = match summary {
            Some(summary) => summary,
            None => {
                let summarizer = self.summarizer.as_ref().ok_or(CompactError::NoSummarizer)?;
                let items = project(&History {
                    events: covered.events,
                    ..history.clone()
                });
                let (summary, request) = summarizer
                    .summarize(&lineage.account_id, lineage.session_id(), &items, model)
                    .await?;
                boundary.insert("summarizer".into(), request);
                summary
            }
        };
        let checkpoint = ContextCheckpoint {
            summary,
            seq_start: covered.seq_start,
            seq_end: covered.seq_end,
        };
        let events = checkpoint.events(
            &lineage.account_id,
            lineage.session_id(),
            Value::Object(boundary),
        );
        let history = history.clone().compacted(lineage, &checkpoint);
        Ok(Compaction {
            checkpoint,
            events,
            history,
        })
    }
}

impl Summarizer {
    /// Asks for a summary of `items`; returns it with the request made, as the
    /// compaction's boundary records it.
    async fn summarize(
        &self,
        account_id: &str,
        session_id: &str,
        items: &[runtime_adapter::Item],
        model: &str,
    ) -> Result<(String, Value), CompactError> {
        let (history, turn) = summary_turn(items, self.model.clone());
        let call = TurnCall {
            account_id,
            session_id,
            run_id: "compaction",
            history: &history,
            events: &[],
            turn: &turn,
            default_model: model,
        };
        let request = self.upstream.request(&call);
        let recorded = json!({
            "url": self.url,
            "path": request.path,
            "request": request.body,
        });
        let failed = |e: String| CompactError::Summarizer(e);
        let mut response = self
            .agent
            .send(&request, account_id)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status;
        let mut parser: Box<dyn StreamParser> = self.upstream.parser(&call, &response.content_type);
        let body = response
            .read_to_end(AGENT_ANSWER_CAP)
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.agent.release(response).await;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body);
            return Err(failed(format!("HTTP {status}: {}", text.trim())));
        }
        let mut outputs = parser.feed(&body);
        outputs.extend(parser.finish());
        let summary = summary_of(&outputs).map_err(failed)?;
        Ok((summary, recorded))
    }
}
