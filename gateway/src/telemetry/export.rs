//! The HTTP client the OTLP exporter sends through: ureq, already in the tree for the CLI
//! and JWKS, instead of a second HTTP stack (reqwest or hyper) for one POST now and then.

use std::io::Read;
use std::time::Duration;

use async_trait::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// How much of the collector's answer is read (it is a small protobuf message).
const ANSWER_CAP: u64 = 1 << 20;

#[derive(Debug)]
pub(super) struct Ureq(ureq::Agent);

impl Ureq {
    /// The timeout is the OTLP one (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, then
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, in milliseconds; 10 s): a custom client enforces it.
    pub(super) fn new() -> Ureq {
        let millis = [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ]
        .into_iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse::<u64>().ok())
        .unwrap_or(10_000);
        Ureq(
            ureq::AgentBuilder::new()
                .timeout(Duration::from_millis(millis))
                .redirects(0)
                .build(),
        )
    }
}

#[async_trait]
impl HttpClient for Ureq {
    /// Blocks: the batch span processor calls its exporter from a thread of its own
    /// (`futures_executor::block_on`), never from a runtime's worker.
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let mut call = self
            .0
            .request(parts.method.as_str(), &parts.uri.to_string());
        for (name, value) in &parts.headers {
            call = call.set(name.as_str(), value.to_str()?);
        }
        let answer = match call.send_bytes(&body) {
            Ok(answer) | Err(ureq::Error::Status(_, answer)) => answer,
            Err(e) => return Err(Box::new(e)),
        };
        let status = answer.status();
        let mut bytes = Vec::new();
        answer
            .into_reader()
            .take(ANSWER_CAP)
            .read_to_end(&mut bytes)?;
        Ok(Response::builder()
            .status(status)
            .body(Bytes::from(bytes))?)
    }
}
