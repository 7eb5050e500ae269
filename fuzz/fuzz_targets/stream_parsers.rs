//! The agents' stream parsers (OpenAI chat and responses, A2A, ADK, LangGraph) on any
//! bytes, as SSE and as JSON, cut at a point the input chooses: never panic, and give the
//! same outputs as when the bytes come whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime_adapter::a2a::A2aUpstream;
use runtime_adapter::adk::AdkUpstream;
use runtime_adapter::chat::ChatUpstream;
use runtime_adapter::langgraph::LangGraphUpstream;
use runtime_adapter::responses::ResponsesUpstream;
use runtime_adapter::{Output, Protocol, TurnCall, TurnRequest, Upstream};

static A2A: A2aUpstream = A2aUpstream::JSONRPC;

fn outputs(upstream: &dyn Upstream, protocol: Protocol, content_type: &str, chunks: &[&[u8]]) -> Vec<Output> {
    let turn = TurnRequest::new(protocol);
    let call = TurnCall {
        account_id: "acct",
        session_id: "s",
        run_id: "run_1",
        history: &[],
        events: &[],
        turn: &turn,
        default_model: "m",
    };
    let mut p = upstream.parser(&call, content_type);
    let mut out: Vec<Output> = chunks.iter().flat_map(|c| p.feed(c)).collect();
    out.extend(p.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, body)) = data.split_first() else {
        return;
    };
    let at = usize::from(cut).min(body.len());
    let upstreams: [(&dyn Upstream, Protocol); 5] = [
        (&ChatUpstream, Protocol::OpenAiChat),
        (&ResponsesUpstream, Protocol::OpenAiResponses),
        (&A2A, Protocol::A2a),
        (&AdkUpstream, Protocol::Adk),
        (&LangGraphUpstream, Protocol::LangGraph),
    ];
    for (upstream, protocol) in upstreams {
        for content_type in ["text/event-stream", "application/json"] {
            let whole = outputs(upstream, protocol, content_type, &[body]);
            let split = outputs(upstream, protocol, content_type, &[&body[..at], &body[at..]]);
            assert_eq!(split, whole, "{protocol:?} {content_type}");
        }
    }
});
