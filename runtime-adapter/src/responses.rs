//! OpenAI Responses (to be implemented).

use serde_json::Value;
use session_log::Event;

use crate::item::Item;
use crate::surface::{RunInfo, StreamRenderer, Surface};
use crate::turn::{InputError, TurnRequest};
use crate::upstream::{Protocol, StreamParser, Upstream};

pub struct ResponsesSurface;
pub struct ResponsesUpstream;

impl Surface for ResponsesSurface {
    fn parse_request(
        &self,
        _body: &[u8],
        _session_header: Option<&str>,
    ) -> Result<TurnRequest, InputError> {
        todo!()
    }
    fn stream_renderer(&self, _run: &RunInfo) -> Box<dyn StreamRenderer> {
        todo!()
    }
    fn final_body(&self, _run: &RunInfo, _events: &[Event]) -> Value {
        todo!()
    }
    fn response_id(&self, _run_id: &str) -> String {
        todo!()
    }
    fn run_id(&self, _response_id: &str) -> Option<String> {
        todo!()
    }
}

impl Upstream for ResponsesUpstream {
    fn protocol(&self) -> Protocol {
        todo!()
    }
    fn build_request(&self, _history: &[Item], _turn: &TurnRequest, _default_model: &str) -> Value {
        todo!()
    }
    fn parser(&self, _content_type: &str) -> Box<dyn StreamParser> {
        todo!()
    }
}
