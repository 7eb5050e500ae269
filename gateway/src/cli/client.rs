//! The control API as the CLI calls it: one blocking HTTP client for a running gateway,
//! the `{Code, Message, RequestId, Action, Data}` envelope unwrapped, and every way a call
//! can fail turned into an error an operator can act on.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use clap::Args;
use runtime_adapter::sse::SseParser;
use serde_json::Value;

const PREFIX: &str = "/agentengine/api/v1/";

/// Where the gateway is and who is asking.
#[derive(Args, Clone, Debug)]
pub struct Connection {
    /// The gateway's address. [default: from TETHER_LISTEN (0.0.0.0 asks 127.0.0.1), else
    /// http://127.0.0.1:8080]
    #[arg(long, env = "TETHER_URL")]
    pub url: Option<String>,
    /// An API key (or a JWT) of the account to act for; sent as a bearer token.
    #[arg(long, env = "TETHER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Print JSON for scripts instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot reach the gateway at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the gateway refused the credential (HTTP {status}): {message}; pass an API key of the account with --api-key or TETHER_API_KEY")]
    Unauthorized { status: u16, message: String },
    #[error("{action}: {message} (HTTP {status})")]
    Refused {
        action: String,
        status: u16,
        message: String,
    },
    #[error("{url} did not answer as a Tether gateway (HTTP {status}: {detail})")]
    NotTether {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("{0}")]
    Failed(String),
}

pub struct Client {
    base: String,
    key: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(connection: &Connection) -> Client {
        let base = connection
            .url
            .clone()
            .unwrap_or_else(default_url)
            .trim_end_matches('/')
            .to_owned();
        Client {
            base,
            key: connection.api_key.clone().filter(|k| !k.is_empty()),
            // No read timeout: `events --follow` waits on a quiet stream for minutes.
            agent: ureq::AgentBuilder::new()
                .timeout_connect(Duration::from_secs(5))
                .build(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn unreachable(&self, e: ureq::Transport) -> CliError {
        // ureq's own text repeats the URL; the cause (connection refused, no such host) is
        // what an operator needs.
        let reason = match std::error::Error::source(&e) {
            Some(cause) => cause.to_string(),
            None => e.kind().to_string(),
        };
        CliError::Unreachable {
            url: self.base.clone(),
            reason,
        }
    }

    fn authorized(&self, request: ureq::Request) -> ureq::Request {
        match &self.key {
            Some(key) => request.set("authorization", &format!("Bearer {key}")),
            None => request,
        }
    }

    /// Calls a control action and returns its `Data`.
    pub fn call(&self, action: &str, body: &Value) -> Result<Value, CliError> {
        let url = format!("{}{PREFIX}{action}", self.base);
        let request = self
            .authorized(self.agent.post(&url))
            .timeout(Duration::from_secs(120))
            .set("content-type", "application/json");
        let response = match request.send_string(&body.to_string()) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => return Err(self.unreachable(t)),
        };
        let status = response.status();
        let text = response
            .into_string()
            .map_err(|e| CliError::Failed(format!("reading the answer to {action}: {e}")))?;
        let envelope: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let (Some(code), Some(message)) = (envelope["Code"].as_i64(), envelope["Message"].as_str())
        else {
            return Err(CliError::NotTether {
                url: self.base.clone(),
                status,
                detail: text.chars().take(120).collect(),
            });
        };
        match (code, status) {
            (0, _) => Ok(envelope["Data"].clone()),
            (_, 401 | 403) => Err(CliError::Unauthorized {
                status,
                message: message.to_owned(),
            }),
            _ => Err(CliError::Refused {
                action: action.to_owned(),
                status,
                message: message.to_owned(),
            }),
        }
    }

    /// Follows `SubscribeRunEvents` for a session from after `after_seq`, handing each
    /// event to `each`; returns the last seq seen when the gateway ends the stream (its
    /// `subscribe_timeout_seconds`), for the caller to subscribe again from there.
    pub fn follow(
        &self,
        session_id: &str,
        after_seq: i64,
        mut each: impl FnMut(&Value) -> Result<(), CliError>,
    ) -> Result<i64, CliError> {
        let url = format!("{}{PREFIX}SubscribeRunEvents", self.base);
        let request = self
            .authorized(self.agent.get(&url))
            .query("SessionId", session_id)
            .query("AfterSeqId", &after_seq.to_string());
        let response = match request.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(status, r)) => {
                let text = r.into_string().unwrap_or_default();
                let envelope: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let message = envelope["Message"].as_str().unwrap_or(&text).to_owned();
                return Err(match status {
                    401 | 403 => CliError::Unauthorized { status, message },
                    _ => CliError::Refused {
                        action: "SubscribeRunEvents".into(),
                        status,
                        message,
                    },
                });
            }
            Err(ureq::Error::Transport(t)) => return Err(self.unreachable(t)),
        };
        let mut reader = BufReader::new(response.into_reader());
        let mut parser = SseParser::new();
        let mut last = after_seq;
        loop {
            let buffer = reader
                .fill_buf()
                .map_err(|e| CliError::Failed(format!("the event stream broke: {e}")))?;
            if buffer.is_empty() {
                return Ok(last);
            }
            let frames = parser.feed(buffer);
            let n = buffer.len();
            reader.consume(n);
            for frame in frames {
                let Ok(event) = serde_json::from_str::<Value>(&frame.data) else {
                    continue; // `[DONE]` and comments
                };
                last = event["SeqId"].as_i64().unwrap_or(last);
                each(&event)?;
            }
        }
    }

    /// `GET /readyz`: the gateway's answer when it is ready.
    pub fn ready(&self) -> Result<Value, CliError> {
        let url = format!("{}/readyz", self.base);
        let response = match self.agent.get(&url).timeout(Duration::from_secs(3)).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(status, r)) => {
                let body = r.into_string().unwrap_or_default();
                return Err(CliError::Failed(format!(
                    "not ready (HTTP {status}): {}",
                    body.trim()
                )));
            }
            Err(ureq::Error::Transport(t)) => return Err(self.unreachable(t)),
        };
        let text = response.into_string().unwrap_or_default();
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }
}

/// The gateway's address when none is given: where `TETHER_LISTEN` says it listens (as
/// in its own container or pod), asked on loopback when it listens on every interface.
fn default_url() -> String {
    let listen = std::env::var("TETHER_LISTEN").unwrap_or_default();
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => format!("http://127.0.0.1:{}", addr.port()),
        Ok(addr) => format!("http://{addr}"),
        Err(_) => "http://127.0.0.1:8080".to_owned(),
    }
}
