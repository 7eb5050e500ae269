//! OpenAI Responses: the client surface at `POST /v1/responses` and the adapter for agents
//! that speak Responses.
//!
//! - `parse`: the client's request read into a turn;
//! - `render`: committed events back as Responses stream events and the `response` object;
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

use crate::item::Item;
use crate::surface::{Numbered, RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, TurnRequest};
use render::{run_hex, Renderer};

/// The run whose response holds the output item `item_id` (an id from a Responses stream
/// or response object), if the id is one Tether gave; see [`output_items`].
pub fn item_run_id(item_id: &str) -> Option<String> {
    render::item_run_id(item_id)
}

/// A run's response output items, by the ids its Responses rendering gives them (the
/// ids an `item_reference` names), each as the history item it stands for.
pub fn output_items(run: &RunInfo, events: &[Event]) -> Vec<(String, Item)> {
    let mut renderer = Renderer::new(run);
    for event in events {
        renderer.render(event);
    }
    renderer.output_items()
}

/// One Responses input item as a client sends it (a Conversations API item too), read
/// into an `Item`; `param` names it in errors.
pub fn parse_item(v: &Value, param: &str) -> Result<crate::Item, InputError> {
    parse::parse_input_item(v, param)
}

/// A history item as the Conversations API lists it: its Responses shape, with `id` and
/// `status`.
pub fn listed_item(item: &crate::Item, id: &str) -> Value {
    let mut v = match item {
        crate::Item::Reasoning { text } => serde_json::json!({
            "type": "reasoning",
            "summary": [],
            "content": [{ "type": "reasoning_text", "text": text }],
        }),
        item => request::item_json(item).unwrap_or(Value::Null),
    };
    if let Some(parts) = v.get_mut("content").and_then(Value::as_array_mut) {
        for part in parts {
            if part["type"] == "output_text" {
                part["annotations"] = serde_json::json!([]);
            }
        }
    }
    if let Value::Object(fields) = &mut v {
        fields.insert("id".into(), Value::String(id.to_owned()));
        fields
            .entry("status")
            .or_insert_with(|| Value::String("completed".into()));
    }
    v
}

pub struct ResponsesSurface;
pub struct ResponsesUpstream;

impl Surface for ResponsesSurface {
    fn parse_request(
        &self,
        body: &[u8],
        session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        parse::parse_request(body, session_header)
    }

    fn stream_renderer(&self, run: &RunInfo) -> Box<dyn StreamRenderer> {
        Numbered::with_frame_ids(Renderer::new(run))
    }

    fn final_body(&self, run: &RunInfo, events: &[Event]) -> Value {
        let mut renderer = Renderer::new(run);
        for event in events {
            renderer.render(event);
        }
        renderer.response()
    }

    fn response_id(&self, run_id: &str) -> String {
        format!("resp_{}", run_hex(run_id))
    }

    fn run_id(&self, response_id: &str) -> Option<String> {
        let hex = response_id.strip_prefix("resp_")?;
        let ours = hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ours.then(|| format!("run_{hex}"))
    }
}
