//! OpenAI Chat Completions: the client surface at `POST /v1/chat/completions` and the
//! adapter for agents that speak Chat Completions.
//!
//! - `parse`: the client's request read into a turn;
//! - `render`: committed events back as `chat.completion.chunk` frames or a `chat.completion`;
//! - `request`: the agent's request built from the projection and the turn (what makes
//!   the upstream a `Stateless` agent);
//! - `stream`: the agent's answer read into outputs;
//! - `wire`: what those share about the wire format.

mod parse;
mod render;
mod request;
mod stream;
mod wire;

#[cfg(test)]
mod tests;

use serde_json::Value;
use session_log::Event;

use crate::surface::{Numbered, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, TurnRequest};
use render::ChatRenderer;

pub struct ChatSurface;
pub struct ChatUpstream;

const RUN_PREFIX: &str = "run_";
const CHAT_PREFIX: &str = "chatcmpl-";

impl Surface for ChatSurface {
    fn parse_request(
        &self,
        body: &[u8],
        session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        parse::parse_request(body, session_header)
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Numbered::with_frame_ids(ChatRenderer::new(run, self.response_id(&run.run_id)))
    }

    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        render::final_body(run, self.response_id(&run.run_id), events)
    }

    fn response_id(&self, run_id: &str) -> String {
        format!(
            "{CHAT_PREFIX}{}",
            run_id.strip_prefix(RUN_PREFIX).unwrap_or(run_id)
        )
    }

    fn run_id(&self, response_id: &str) -> Option<String> {
        let hex = response_id.strip_prefix(CHAT_PREFIX)?;
        (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| format!("{RUN_PREFIX}{hex}"))
    }
}
