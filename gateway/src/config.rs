//! Configuration: a TOML file (`--conf`; several, later ones winning key by key, so that a
//! secret part can live in a file of its own), overridden by `TETHER_*` environment
//! variables, overridden by flags; validated once into `Config`, refusing bad values by key
//! name.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use policies::config::{AuthConfig, LimitsConfig, RateLimitConfig};
use runtime_adapter::{AdvertiseGrpc, AgentTransport, Protocol};
use serde::Deserialize;

/// Every key, as it may appear in the file. Flags and environment variables use the same
/// names (`max_body_bytes` is `--max-body-bytes` and `TETHER_MAX_BODY_BYTES`).
#[derive(Debug, Default, Deserialize, Parser)]
#[serde(deny_unknown_fields)]
#[command(
    name = "tether serve",
    about = "Run the gateway",
    after_help = "Every key can also be set in the --conf file and as TETHER_<KEY>; flags win \
                  over the environment, which wins over the file. A boolean flag alone means \
                  true (--tee); --tee false or --tee=false turns it off."
)]
pub struct Settings {
    /// TOML configuration file. Repeatable (TETHER_CONF: comma-separated): a later file's
    /// keys win over an earlier one's, a table as a whole (e.g. [auth] from a Secret).
    #[arg(long, env = "TETHER_CONF", value_delimiter = ',')]
    #[serde(skip)]
    pub conf: Vec<PathBuf>,
    /// Address to listen on; port 0 takes any free port (the log's "tether starting" line
    /// and `ready_file` say which). [default: 127.0.0.1:8080]
    #[arg(long, env = "TETHER_LISTEN")]
    pub listen: Option<String>,
    /// File Tether writes its listening address to (e.g. `127.0.0.1:43817`) once it
    /// accepts connections: for scripts and tests that start it on port 0.
    /// [default: none]
    #[arg(long, env = "TETHER_READY_FILE")]
    pub ready_file: Option<PathBuf>,
    /// Base URL of the agent, e.g. http://127.0.0.1:9000. Required: this flag,
    /// TETHER_UPSTREAM or `upstream` in the file.
    #[arg(long, env = "TETHER_UPSTREAM")]
    pub upstream: Option<String>,
    /// Protocol the agent speaks: openai-chat, openai-responses, a2a, adk or langgraph.
    /// [default: openai-chat]
    #[arg(long, env = "TETHER_PROTOCOL")]
    pub protocol: Option<String>,
    /// Tether's address as clients reach it (e.g. https://agents.example.com), written
    /// into the A2A agent card in place of the agent's own. [default: from each request's
    /// Host header]
    #[arg(long, env = "TETHER_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Session store: a SQLite file path (or sqlite:PATH) or a postgres:// URL.
    /// [default: .tether/sessions.sqlite]
    #[arg(long, env = "TETHER_STORE")]
    pub store: Option<String>,
    /// With a PostgreSQL store: the local SQLite file events are committed to while
    /// PostgreSQL is unreachable, and backfilled from when it is back.
    /// [default: .tether/journal.sqlite]
    #[arg(long, env = "TETHER_JOURNAL_PATH")]
    pub journal_path: Option<String>,
    /// Bytes that must stay free on the disk of the SQLite store (of the journal, with
    /// PostgreSQL): below it new runs and control writes are refused (503, Retry-After)
    /// so the runs in flight can finish before the disk is full. Read once a second;
    /// 0 turns it off. [default: 0]
    #[arg(long, env = "TETHER_STORE_MIN_FREE_BYTES")]
    pub store_min_free_bytes: Option<u64>,
    /// Model name sent to the agent when the client names none. [default: agent]
    #[arg(long, env = "TETHER_MODEL")]
    pub model: Option<String>,
    /// Header added to every request toward the agent, as "Name: value" (repeatable).
    #[arg(
        long = "upstream-header",
        env = "TETHER_UPSTREAM_HEADERS",
        value_delimiter = ';'
    )]
    #[serde(skip)]
    pub upstream_header: Vec<String>,
    /// Headers added toward the agent (file form: a table of name = value).
    #[arg(skip)]
    pub upstream_headers: Option<BTreeMap<String, String>>,
    /// Forward the caller's Authorization header to the agent. [default: false]
    #[arg(long, env = "TETHER_FORWARD_AUTHORIZATION", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub forward_authorization: Option<bool>,
    /// Listen on a non-loopback address although no authentication is configured.
    /// [default: false]
    #[arg(long, env = "TETHER_ALLOW_UNAUTHENTICATED", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub allow_unauthenticated: Option<bool>,
    /// Host names clients reach Tether by, besides `localhost`, `127.0.0.1` and `[::1]`
    /// (comma-separated; `*.example.com` for every subdomain, `name:port` for one port
    /// only, `*` for any). A request with another `Host` is refused 421 (DNS rebinding).
    /// [default: none; on a non-loopback address with [auth], any host]
    #[arg(long, env = "TETHER_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Option<Vec<String>>,
    /// Web origins besides Tether's own whose pages may call Tether's own paths
    /// (comma-separated, e.g. https://app.example.com): their CORS preflights are granted
    /// and their requests answered; any other foreign origin is refused 403. [default: none]
    #[arg(long, env = "TETHER_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Option<Vec<String>>,
    /// Largest request body accepted, in bytes. [default: 10485760]
    #[arg(long, env = "TETHER_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Record pass-through exchanges in the log. [default: true]
    #[arg(long, env = "TETHER_TEE", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub tee: Option<bool>,
    /// Bytes of each pass-through request and response body kept in the log.
    /// [default: 65536]
    #[arg(long, env = "TETHER_TEE_BODY_CAP_BYTES")]
    pub tee_body_cap_bytes: Option<usize>,
    /// Seconds to connect to the agent before a run fails. [default: 10]
    #[arg(long, env = "TETHER_UPSTREAM_CONNECT_TIMEOUT_SECONDS")]
    pub upstream_connect_timeout_seconds: Option<u64>,
    /// Seconds the agent may stay silent mid-response before a run fails.
    /// [default: 300]
    #[arg(long, env = "TETHER_UPSTREAM_IDLE_TIMEOUT_SECONDS")]
    pub upstream_idle_timeout_seconds: Option<u64>,
    /// On SIGTERM, the most seconds to let running runs finish before they are closed as
    /// interrupted (an idle gateway exits at once). [default: 10]
    #[arg(long, env = "TETHER_SHUTDOWN_GRACE_SECONDS")]
    pub shutdown_grace_seconds: Option<u64>,
    /// Seconds a SubscribeRunEvents stream stays open without its run ending.
    /// [default: 300]
    #[arg(long, env = "TETHER_SUBSCRIBE_TIMEOUT_SECONDS")]
    pub subscribe_timeout_seconds: Option<u64>,
    /// Worker threads serving connections. [default: 2]
    #[arg(long, env = "TETHER_THREADS")]
    pub threads: Option<usize>,
    /// Most events committed in one transaction. [default: 1024]
    #[arg(long, env = "TETHER_WRITER_MAX_BATCH")]
    pub writer_max_batch: Option<usize>,
    /// This replica's name as owner of the runs it drives. A replica restarted under the
    /// same name closes its own abandoned runs at once instead of waiting for their leases
    /// to run out. [default: "local" with a SQLite store (one gateway per file), a random
    /// name with PostgreSQL]
    #[arg(long, env = "TETHER_REPLICA_ID")]
    pub replica_id: Option<String>,
    /// Seconds a run's lease lasts without a heartbeat (renewed every third of it); a run
    /// whose replica stops renewing is closed as interrupted by any other replica.
    /// [default: 15]
    #[arg(long, env = "TETHER_RUN_LEASE_SECONDS")]
    pub run_lease_seconds: Option<u64>,
    /// Log format: text or json. [default: text]
    #[arg(long, env = "TETHER_LOG_FORMAT")]
    pub log_format: Option<String>,
    /// Seconds after which a recorded checkpoint expires. [default: never]
    #[arg(long, env = "TETHER_CHECKPOINT_TTL_SECONDS")]
    pub checkpoint_ttl_seconds: Option<u64>,
    /// With PostgreSQL: whether a run in an existing session may start while PostgreSQL is
    /// unreachable (claimed in the local journal). Only for a single replica; a new
    /// session's run starts either way. [default: false]
    #[arg(long, env = "TETHER_JOURNAL_LOCAL_CLAIMS", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub journal_local_claims: Option<bool>,
    /// Whether a checkpoint may be resumed more than once. [default: true]
    #[arg(long, env = "TETHER_CHECKPOINT_REPLAY_ALLOWED", num_args = 0..=1, default_missing_value = "true", action = ArgAction::Set)]
    pub checkpoint_replay_allowed: Option<bool>,
    /// Tools known to have no side effects (comma-separated); every other tool is assumed
    /// to have them when a resume's risk is assessed. [default: none]
    #[arg(long, env = "TETHER_SIDE_EFFECT_FREE_TOOLS", value_delimiter = ',')]
    pub side_effect_free_tools: Option<Vec<String>>,
    /// Directory whose `<account_id>/` subdirectories the console and
    /// `ListWorkspaceFiles`/`AttachmentContent` may read (never write). [default: off]
    #[arg(long, env = "TETHER_WORKSPACE_DIR")]
    pub workspace_dir: Option<PathBuf>,
    // --- A2A over gRPC ---
    /// With protocol a2a: how Tether calls the agent, jsonrpc (the client's own HTTP
    /// transport; JSON-RPC for gRPC clients; v0.3 JSON-RPC when the agent's card offers
    /// only v0.3), jsonrpc-0.3 (JSON-RPC v0.3 whatever the client speaks and the card
    /// says) or grpc (its lf.a2a.v1.A2AService, at the address its agent card lists, or
    /// a2a_grpc_upstream). Each call goes to the URL the card lists for its binding and
    /// version. [default: jsonrpc]
    #[arg(long, env = "TETHER_A2A_UPSTREAM_TRANSPORT")]
    pub a2a_upstream_transport: Option<String>,
    /// With a2a_upstream_transport = grpc: the agent's gRPC address (host:port), for an
    /// agent without an HTTP agent card. [default: the GRPC interface of the agent's card]
    #[arg(long, env = "TETHER_A2A_GRPC_UPSTREAM")]
    pub a2a_grpc_upstream: Option<String>,
    /// With protocol a2a: when the agent cards Tether serves list its gRPC interface:
    /// auto (when the agent's card lists a v1.0 gRPC interface), always, or never (gRPC
    /// calls are served either way). [default: auto]
    #[arg(long, env = "TETHER_A2A_ADVERTISE_GRPC")]
    pub a2a_advertise_grpc: Option<String>,
    // --- end of A2A over gRPC ---
    /// `[auth]`: API keys and JWT verification (file only: key material and long lists do
    /// not belong in flags or the process environment).
    #[arg(skip)]
    pub auth: Option<AuthConfig>,
    /// `[rate_limits]`: requests per second, bursts and concurrent runs (file only).
    #[arg(skip)]
    pub rate_limits: Option<RateLimitConfig>,
    /// `[limits]`: header deadline, body rate, JSON depth, attachments (file only; the body
    /// size limit is the top-level `max_body_bytes`).
    #[arg(skip)]
    pub limits: Option<LimitsConfig>,
    /// `[compaction]`: who summarises a compacted history, and when Tether compacts by
    /// itself.
    #[command(flatten)]
    #[serde(default)]
    pub compaction: CompactionSettings,
    /// `[telemetry]`: OpenTelemetry traces (file only; the standard OTEL_* variables apply
    /// as well).
    #[arg(skip)]
    pub telemetry: Option<TelemetryConfig>,
    /// `[retention]`: removal of idle sessions (file only). [default: off, kept forever]
    #[arg(skip)]
    pub retention: Option<RetentionSettings>,
    /// `[[webhooks]]`: endpoints told of run ends, approvals and idle sessions (file
    /// only: secrets do not belong in flags or the process environment).
    #[arg(skip)]
    pub webhooks: Option<Vec<WebhookSettings>>,
    /// `[approvals]`: what happens to a request nobody answers (file only). [default: it
    /// waits until resolved]
    #[arg(skip)]
    pub approvals: Option<ApprovalsSettings>,
    /// `[quotas]`: how much one account may store (file only). [default: no limit]
    #[arg(skip)]
    pub quotas: Option<QuotaSettings>,
}

/// The `[quotas]` table (file only), and each `[quotas.accounts.<id>]`: how much an
/// account may store. A key left out sets no limit (for an account's own table: the
/// `[quotas]` default applies).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSettings {
    pub sessions: Option<u64>,
    pub event_bytes: Option<u64>,
    pub upload_bytes: Option<u64>,
    #[serde(default)]
    pub accounts: std::collections::HashMap<String, QuotaLimits>,
}

/// The limits of one account (see [`QuotaSettings`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct QuotaLimits {
    /// Sessions stored.
    pub sessions: Option<u64>,
    /// Bytes of stored events (their JSON: content and metadata).
    pub event_bytes: Option<u64>,
    /// Bytes of stored uploads.
    pub upload_bytes: Option<u64>,
}

impl QuotaLimits {
    /// `self`'s limits, and `fallback`'s where `self` sets none.
    fn or(self, fallback: QuotaLimits) -> QuotaLimits {
        QuotaLimits {
            sessions: self.sessions.or(fallback.sessions),
            event_bytes: self.event_bytes.or(fallback.event_bytes),
            upload_bytes: self.upload_bytes.or(fallback.upload_bytes),
        }
    }

    /// Refuses a limit of 0 (write nothing at all: an account without access does that).
    fn check(&self, table: &str) -> Result<(), ConfigError> {
        for (key, limit) in [
            ("sessions", self.sessions),
            ("event_bytes", self.event_bytes),
            ("upload_bytes", self.upload_bytes),
        ] {
            if limit == Some(0) {
                return Err(bad(
                    &format!("{table}.{key}"),
                    "must be at least 1 (leave it out for no limit)",
                ));
            }
        }
        Ok(())
    }
}

/// Validated `[quotas]`: each account's limits, resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Quotas {
    default: QuotaLimits,
    accounts: std::collections::HashMap<String, QuotaLimits>,
}

impl Quotas {
    /// The limits of `account_id`.
    pub fn of(&self, account_id: &str) -> QuotaLimits {
        self.accounts
            .get(account_id)
            .copied()
            .unwrap_or(self.default)
    }
}

/// The `[approvals]` table (file only): when a request a run ends waiting on times out,
/// and what the timeout answers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSettings {
    /// A request pending this long is resolved by the timeout sweeper. Required in the
    /// table.
    pub timeout_seconds: Option<u64>,
    /// `reject`, `approve` or `leave` (left pending). [default: reject]
    pub on_timeout: Option<String>,
    /// How often the sweeper looks for requests whose time ran out. [default: 5]
    pub sweep_interval_seconds: Option<u64>,
}

/// What the timeout answers a request nobody resolved in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnTimeout {
    Reject,
    Approve,
    /// Nothing: the request stays pending.
    Leave,
}

/// `[approvals]`, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalsConfig {
    pub timeout: Duration,
    pub on_timeout: OnTimeout,
    pub sweep_interval: Duration,
}

/// One `[[webhooks]]` table (file only): an endpoint and the events it receives.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// The receiver: an http:// or https:// URL. Required.
    pub url: Option<String>,
    /// Which events it receives: approval.requested, approval.resolved, run.completed,
    /// run.failed, session.idle. Required, not empty.
    pub events: Option<Vec<String>>,
    /// The signing secret: `whsec_` and base64 (Standard Webhooks' form), or any other
    /// text, taken as bytes; at least 16 bytes. Required.
    pub secret: Option<String>,
    /// The endpoint's name in deliveries and metrics. [default: the URL]
    pub name: Option<String>,
    /// Only events of these accounts. [default: every account]
    pub accounts: Option<Vec<String>>,
    /// Attempts before a delivery is marked failed. [default: 8]
    pub max_attempts: Option<u64>,
    /// How long one attempt may take. [default: 10]
    pub timeout_seconds: Option<u64>,
    /// The wait after the first failed attempt, doubled after each (with jitter, at most
    /// an hour). [default: 1]
    pub retry_initial_seconds: Option<f64>,
    /// Deliveries in flight to this endpoint at once. [default: 4]
    pub concurrency: Option<u64>,
}

/// A validated `[[webhooks]]` entry (its `Debug` leaves the secret out).
#[derive(Clone)]
pub struct Webhook {
    pub name: String,
    pub url: String,
    pub kinds: Vec<session_log::outbox::Kind>,
    pub secret: Vec<u8>,
    pub accounts: Option<Vec<String>>,
    pub max_attempts: u32,
    pub timeout: Duration,
    pub retry_initial: Duration,
    pub concurrency: usize,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("kinds", &self.kinds)
            .field("accounts", &self.accounts)
            .finish_non_exhaustive()
    }
}

impl WebhookSettings {
    fn validate(self, i: usize) -> Result<Webhook, ConfigError> {
        use base64::Engine;
        let key = |field: &str| format!("webhooks[{i}].{field}");
        let url = self
            .url
            .ok_or_else(|| bad(&key("url"), "is required in [[webhooks]]"))?;
        if !(url.starts_with("http://") || url.starts_with("https://"))
            || url.parse::<http::Uri>().is_err()
        {
            return Err(bad(
                &key("url"),
                format!("{url:?} is not an http:// or https:// URL"),
            ));
        }
        let events = self
            .events
            .filter(|e| !e.is_empty())
            .ok_or_else(|| bad(&key("events"), "is required in [[webhooks]], not empty"))?;
        let mut kinds = Vec::with_capacity(events.len());
        for name in &events {
            let kind = session_log::outbox::Kind::parse(name).ok_or_else(|| {
                let known: Vec<&str> = session_log::outbox::Kind::ALL
                    .iter()
                    .map(|k| k.as_str())
                    .collect();
                bad(
                    &key("events"),
                    format!("unknown event {name:?}; use {}", known.join(", ")),
                )
            })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        let secret = self
            .secret
            .ok_or_else(|| bad(&key("secret"), "is required in [[webhooks]]"))?;
        let secret = match secret.strip_prefix("whsec_") {
            Some(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| bad(&key("secret"), "whsec_ must be followed by base64"))?,
            None => secret.into_bytes(),
        };
        if secret.len() < 16 {
            return Err(bad(&key("secret"), "must be at least 16 bytes"));
        }
        let positive = |field: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(bad(&key(field), "must be greater than 0")),
            v => Ok(v.unwrap_or(default)),
        };
        let retry_initial = match self.retry_initial_seconds {
            None => Duration::from_secs(1),
            Some(s) if s.is_finite() && (0.01..=3600.0).contains(&s) => Duration::from_secs_f64(s),
            Some(_) => {
                return Err(bad(
                    &key("retry_initial_seconds"),
                    "must be between 0.01 and 3600",
                ))
            }
        };
        let max_attempts = positive("max_attempts", self.max_attempts, 8)?;
        if max_attempts > 100 {
            return Err(bad(&key("max_attempts"), "must be at most 100"));
        }
        let concurrency = positive("concurrency", self.concurrency, 4)?;
        if concurrency > 64 {
            return Err(bad(&key("concurrency"), "must be at most 64"));
        }
        let name = match self.name {
            Some(n) if n.trim().is_empty() => return Err(bad(&key("name"), "is empty")),
            n => n.unwrap_or_else(|| url.clone()),
        };
        Ok(Webhook {
            name,
            url,
            kinds,
            secret,
            accounts: self.accounts,
            max_attempts: max_attempts as u32,
            timeout: Duration::from_secs(positive("timeout_seconds", self.timeout_seconds, 10)?),
            retry_initial,
            concurrency: concurrency as usize,
        })
    }
}

/// The `[retention]` table (file only): how long an idle session is kept.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Sessions with no activity for this long are removed (with an audit row by
    /// `retention`). Required in the table.
    pub max_idle_seconds: Option<u64>,
    /// How often a sweep runs. [default: 60]
    pub sweep_interval_seconds: Option<u64>,
    /// Sessions a sweep reads per page. [default: 100]
    pub sweep_batch: Option<u64>,
    /// How long the tombstone of a removed session (its ids and time, no content) is kept
    /// for the outage journal's backfill of another replica: longer than any replica can
    /// run cut off from PostgreSQL. Pruned by the sweeps. [default: 2592000 (30 days)]
    pub tombstone_keep_seconds: Option<u64>,
    /// `[retention.accounts]`: `account_id = max_idle_seconds` for accounts with a maximum
    /// of their own.
    #[serde(default)]
    pub accounts: std::collections::HashMap<String, u64>,
}

/// The `[compaction]` table; its flags and variables are prefixed with `compaction`.
#[derive(Clone, Debug, Default, Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct CompactionSettings {
    /// Base URL of the OpenAI-compatible Chat Completions endpoint that writes compaction
    /// summaries (Tether posts to <url>/v1/chat/completions). [default: the agent itself
    /// for openai-chat and openai-responses agents; none for a2a and adk]
    #[arg(
        long = "compaction-summarizer-url",
        env = "TETHER_COMPACTION_SUMMARIZER_URL"
    )]
    pub summarizer_url: Option<String>,
    /// Model named in the summarizer's requests. [default: the session's model]
    #[arg(
        long = "compaction-summarizer-model",
        env = "TETHER_COMPACTION_SUMMARIZER_MODEL"
    )]
    pub summarizer_model: Option<String>,
    /// Compact a session before a turn whose projected history would exceed this many
    /// tokens (estimated as one per four characters of text). [default: off]
    #[arg(
        long = "compaction-trigger-tokens",
        env = "TETHER_COMPACTION_TRIGGER_TOKENS"
    )]
    pub trigger_tokens: Option<u64>,
    /// Turns a compaction keeps whole after the summary: automatic compaction's, and
    /// CompactSession's when the call names no `KeepLastTurns`. [default: 2]
    #[arg(
        long = "compaction-keep-last-turns",
        env = "TETHER_COMPACTION_KEEP_LAST_TURNS"
    )]
    pub keep_last_turns: Option<u32>,
}

/// Turns a compaction keeps whole unless `[compaction] keep_last_turns` says otherwise.
pub const DEFAULT_KEEP_LAST_TURNS: usize = 2;

impl CompactionSettings {
    fn over(self, file: CompactionSettings) -> CompactionSettings {
        CompactionSettings {
            summarizer_url: self.summarizer_url.or(file.summarizer_url),
            summarizer_model: self.summarizer_model.or(file.summarizer_model),
            trigger_tokens: self.trigger_tokens.or(file.trigger_tokens),
            keep_last_turns: self.keep_last_turns.or(file.keep_last_turns),
        }
    }

    fn is_set(&self) -> bool {
        self.summarizer_url.is_some()
            || self.summarizer_model.is_some()
            || self.trigger_tokens.is_some()
            || self.keep_last_turns.is_some()
    }

    /// The table checked against the agent's protocol: automatic compaction needs someone
    /// to write its summaries, a `summarizer_url` or an agent that speaks OpenAI (an A2A,
    /// ADK or LangGraph agent cannot be asked for one), or it would fail before every turn.
    fn validate(self, protocol: Protocol) -> Result<CompactionConfig, ConfigError> {
        let summarizer = self
            .summarizer_url
            .as_deref()
            .map(|url| parse_upstream("compaction.summarizer_url", url))
            .transpose()?;
        if self
            .summarizer_model
            .as_deref()
            .is_some_and(|m| m.trim().is_empty())
        {
            return Err(bad("compaction.summarizer_model", "is empty"));
        }
        if self.trigger_tokens == Some(0) {
            return Err(bad("compaction.trigger_tokens", "must be greater than 0"));
        }
        if self.trigger_tokens.is_some() && summarizer.is_none() && !protocol.sends_history() {
            return Err(bad(
                "compaction.trigger_tokens",
                format!(
                    "automatic compaction needs a summarizer: set compaction.summarizer_url \
                     (a {} agent cannot write summaries), or remove compaction.trigger_tokens",
                    protocol.as_str()
                ),
            ));
        }
        Ok(CompactionConfig {
            summarizer,
            summarizer_model: self.summarizer_model,
            trigger_tokens: self.trigger_tokens,
            keep_last_turns: self
                .keep_last_turns
                .map_or(DEFAULT_KEEP_LAST_TURNS, |k| k as usize),
        })
    }
}

/// How compaction summaries are written, and when Tether compacts by itself.
#[derive(Clone, Debug)]
pub struct CompactionConfig {
    /// A Chat Completions endpoint of its own; `None`: the agent, if it speaks OpenAI.
    pub summarizer: Option<Upstream>,
    pub summarizer_model: Option<String>,
    /// Compact before a turn whose projection would exceed this estimate.
    pub trigger_tokens: Option<u64>,
    /// Turns a compaction keeps whole when not told otherwise.
    pub keep_last_turns: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            summarizer: None,
            summarizer_model: None,
            trigger_tokens: None,
            keep_last_turns: DEFAULT_KEEP_LAST_TURNS,
        }
    }
}

/// `[telemetry]` as the file has it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/HTTP base URL traces are exported to, e.g. `http://collector:4318`
    /// (`/v1/traces` is appended). Unset, and without OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT,
    /// traces are off.
    pub otlp_endpoint: Option<String>,
    /// The agent's name in traces: `gen_ai.agent.name`, and the run span's name
    /// `invoke_agent {agent_name}`.
    pub agent_name: Option<String>,
}

/// `[telemetry]`, validated.
#[derive(Clone, Debug)]
pub struct Telemetry {
    /// Without a trailing slash.
    pub otlp_endpoint: Option<String>,
    pub agent_name: String,
}

/// The validated configuration the gateway runs with.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    /// `allowed_hosts`, lower case, checked (see `client::site`).
    pub allowed_hosts: Vec<String>,
    /// `allowed_origins`, lower case, `scheme://host[:port]`.
    pub allowed_origins: Vec<String>,
    pub ready_file: Option<PathBuf>,
    pub upstream: Upstream,
    pub protocol: Protocol,
    /// How the agent is called (gRPC only for A2A agents).
    pub a2a_upstream_transport: AgentTransport,
    /// The agent's gRPC `host:port` when configuration names it.
    pub a2a_grpc_upstream: Option<String>,
    /// When the A2A agent cards Tether serves list its gRPC interface.
    pub a2a_advertise_grpc: AdvertiseGrpc,
    /// Without a trailing slash.
    pub public_url: Option<String>,
    pub store: String,
    pub journal_path: String,
    /// Free bytes below which the store refuses new work (0: not watched).
    pub store_min_free_bytes: u64,
    /// Runs in existing sessions may start while PostgreSQL is unreachable (one replica).
    pub journal_local_claims: bool,
    pub model: String,
    pub upstream_headers: Vec<(String, String)>,
    pub forward_authorization: bool,
    pub max_body_bytes: usize,
    pub tee: bool,
    pub tee_body_cap_bytes: usize,
    pub upstream_connect_timeout: Duration,
    pub upstream_idle_timeout: Duration,
    pub shutdown_grace: Duration,
    pub subscribe_timeout: Duration,
    pub threads: usize,
    pub writer_max_batch: usize,
    pub replica_id: String,
    pub run_lease: Duration,
    pub log_json: bool,
    pub checkpoint_policy: session_log::checkpoints::CheckpointPolicy,
    pub side_effect_free_tools: Vec<String>,
    /// Canonical (symlinks resolved), so that every path read below it can be checked
    /// against it; `None` when workspace files are off.
    pub workspace_dir: Option<PathBuf>,
    pub auth: AuthConfig,
    pub rate_limits: RateLimitConfig,
    pub limits: LimitsConfig,
    pub compaction: CompactionConfig,
    pub telemetry: Telemetry,
    /// `None`: sessions are kept until deleted.
    pub retention: Option<session_log::retention::RetentionConfig>,
    /// `[[webhooks]]`, in file order.
    pub webhooks: Vec<Webhook>,
    /// `None`: a pending request waits until a person resolves it.
    pub approvals: Option<ApprovalsConfig>,
    /// `None`: no quotas (nothing is read to check them).
    pub quotas: Option<Quotas>,
}

/// The agent's base URL, split for the connector.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// `host:port` to connect to (resolved per connection, so a container restarted under
    /// a new address is found).
    pub authority: String,
    /// Path prefix every upstream path is appended to ("" or "/prefix").
    pub base_path: String,
}

/// A refused configuration value, by key (dotted for tables: `limits.max_json_depth`).
#[derive(Debug)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
    /// `file:line` when the value came from the file and its line is known.
    pub location: Option<String>,
}

/// The key of an error about the file as a whole (unreadable, not TOML).
const FILE_KEY: &str = "conf";

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.location {
            Some(at) if self.key == FILE_KEY => write!(f, "{at}: {}", self.message),
            Some(at) => write!(f, "{at}: {}: {}", self.key, self.message),
            None => write!(f, "configuration key `{}`: {}", self.key, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

fn bad(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_owned(),
        message: message.into(),
        location: None,
    }
}

impl From<policies::ConfigError> for ConfigError {
    fn from(e: policies::ConfigError) -> Self {
        bad(&e.key, e.message)
    }
}

/// Parses the configuration file, naming the key and line of a value it refuses.
fn parse_file(path: &std::path::Path, text: &str) -> Result<Settings, ConfigError> {
    serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(|e| {
        let path_to_key = e.path().to_string();
        let e = e.into_inner();
        let message = e.message().trim_end().to_owned();
        // The path of an unknown key ends with that key; an empty one (".") is a file that
        // is not TOML.
        let key = match path_to_key.as_str() {
            "." => FILE_KEY.to_owned(),
            _ => path_to_key,
        };
        let location = match e.span() {
            Some(span) => format!("{}:{}", path.display(), line_at(text, span.start)),
            None => path.display().to_string(),
        };
        ConfigError {
            key,
            message,
            location: Some(location),
        }
    })
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    1 + text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// The line of `key` (`a.b`, `a[0].b`) in the file: of its value, or of the deepest table
/// on its way that the file has (a required key left out of `[auth.jwt]` is that table's).
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut item = doc.as_item();
    let mut span = None;
    'walk: for segment in key.split('.') {
        let mut parts = segment.split('[');
        let name = parts.next().unwrap_or_default();
        match item.get(name) {
            Some(next) => item = next,
            None => break,
        }
        span = item.span().or(span);
        for index in parts {
            match index
                .trim_end_matches(']')
                .parse::<usize>()
                .ok()
                .and_then(|i| item.get(i))
            {
                Some(next) => item = next,
                None => break 'walk,
            }
            span = item.span().or(span);
        }
    }
    span.map(|s| line_at(text, s.start))
}

/// A value clap refused for `serve` that came from a `TETHER_*` variable and not a flag:
/// clap's own message names the flag (`--threads <THREADS>`), which the user never typed.
/// Named here by its key and variable instead, in the one line of every other
/// configuration error. `args` are the command line's arguments; `None`: leave the error
/// to clap (a flag, or not a refused value).
pub fn refused_variable(e: &clap::Error, args: &[String]) -> Option<ConfigError> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::CommandFactory;
    use std::error::Error as _;

    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let ContextValue::String(arg) = e.get(ContextKind::InvalidArg)? else {
        return None;
    };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let flag = format!("--{long}");
    if args
        .iter()
        .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
    {
        return None;
    }
    let command = Settings::command();
    let variable = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))?
        .get_env()?
        .to_str()?
        .to_owned();
    let value = std::env::var(&variable).ok()?;
    let why = match (e.source(), e.get(ContextKind::ValidValue)) {
        (Some(source), _) => format!(": {source}"),
        (None, Some(ContextValue::Strings(valid))) => format!("; use {}", valid.join(" or ")),
        _ => String::new(),
    };
    // `compaction-summarizer-url` is the key `compaction.summarizer_url`.
    let key = match long.strip_prefix("compaction-") {
        Some(rest) => format!("compaction.{}", rest.replace('-', "_")),
        None => long.replace('-', "_"),
    };
    Some(bad(
        &key,
        format!("{variable}={value:?} is not a valid value{why}"),
    ))
}

impl Settings {
    /// Reads the files named by `--conf` (if any) under the flags/env already parsed.
    pub fn load(self) -> Result<Config, ConfigError> {
        let mut file = Settings::default();
        let mut texts = Vec::with_capacity(self.conf.len());
        for path in &self.conf {
            let text = std::fs::read_to_string(path)
                .map_err(|e| bad(FILE_KEY, format!("cannot read {}: {e}", path.display())))?;
            file = parse_file(path, &text)?.over(file).0;
            texts.push((path.clone(), text));
        }
        let (settings, from_flags) = self.over(file);
        settings.validate().map_err(|mut e| {
            let top = e.key.split(['.', '[']).next().unwrap_or_default();
            if !from_flags.contains(&top) {
                // The last file that has the key is the one whose value was used.
                e.location = texts.iter().rev().find_map(|(path, text)| {
                    line_of_key(text, &e.key).map(|line| format!("{}:{line}", path.display()))
                });
            }
            e
        })
    }

    /// `self` wins over `file`, key by key.
    /// Also returns the keys `self` set, whose errors are not the file's.
    fn over(self, file: Settings) -> (Settings, Vec<&'static str>) {
        macro_rules! pick {
            ($($k:ident),*) => {{
                let mut from_flags = Vec::new();
                $(if self.$k.is_some() { from_flags.push(stringify!($k)); })*
                if !self.upstream_header.is_empty() { from_flags.push("upstream_headers"); }
                if self.compaction.is_set() { from_flags.push("compaction"); }
                (Settings { $($k: self.$k.or(file.$k),)* conf: self.conf,
                    upstream_header: if self.upstream_header.is_empty() { file.upstream_header } else { self.upstream_header },
                    compaction: self.compaction.over(file.compaction) },
                 from_flags)
            }};
        }
        pick!(
            listen,
            ready_file,
            upstream,
            protocol,
            public_url,
            store,
            journal_path,
            store_min_free_bytes,
            model,
            upstream_headers,
            forward_authorization,
            allow_unauthenticated,
            allowed_hosts,
            allowed_origins,
            max_body_bytes,
            tee,
            tee_body_cap_bytes,
            upstream_connect_timeout_seconds,
            upstream_idle_timeout_seconds,
            shutdown_grace_seconds,
            subscribe_timeout_seconds,
            threads,
            writer_max_batch,
            replica_id,
            run_lease_seconds,
            log_format,
            checkpoint_ttl_seconds,
            checkpoint_replay_allowed,
            journal_local_claims,
            side_effect_free_tools,
            workspace_dir,
            a2a_upstream_transport,
            a2a_grpc_upstream,
            a2a_advertise_grpc,
            auth,
            rate_limits,
            limits,
            telemetry,
            retention,
            webhooks,
            approvals,
            quotas
        )
    }

    fn validate(self) -> Result<Config, ConfigError> {
        let listen: SocketAddr = self
            .listen
            .as_deref()
            .unwrap_or("127.0.0.1:8080")
            .parse()
            .map_err(|e| {
                bad(
                    "listen",
                    format!("not a socket address ({e}); e.g. 127.0.0.1:8080"),
                )
            })?;
        let auth = self.auth.unwrap_or_default();
        auth.validate()?;
        let rate_limits = self.rate_limits.unwrap_or_default();
        rate_limits.validate()?;
        let limits = self.limits.unwrap_or_default();
        limits.validate()?;
        // One body limit: the top-level key, which flags and the environment can set too.
        if limits.max_body_bytes.is_some() {
            return Err(bad(
                "limits.max_body_bytes",
                "is not used; set the top-level max_body_bytes instead",
            ));
        }
        let allowed_hosts = host_patterns(self.allowed_hosts.unwrap_or_default())?;
        let allowed_origins = origins(self.allowed_origins.unwrap_or_default())?;
        // A public address answers anyone who can reach it: either credentials guard it, or
        // it names the hosts it is reached by (so a rebinding name cannot reach it) and
        // says it means to serve without credentials.
        if !listen.ip().is_loopback() && !auth.is_enabled() && allowed_hosts.is_empty() {
            return Err(bad(
                "listen",
                format!(
                    "{listen} is not a loopback address and neither [auth] nor allowed_hosts \
                     is configured; configure [auth], or list the host names clients reach \
                     Tether by in allowed_hosts (with allow_unauthenticated = true)"
                ),
            ));
        }
        if !listen.ip().is_loopback()
            && !auth.is_enabled()
            && !self.allow_unauthenticated.unwrap_or(false)
        {
            return Err(bad(
                "listen",
                format!(
                    "{listen} is not a loopback address and no authentication is configured; \
                     set allow_unauthenticated = true to serve it anyway"
                ),
            ));
        }
        let upstream = parse_upstream(
            "upstream",
            self.upstream
                .as_deref()
                .ok_or_else(|| bad("upstream", "is required (the agent's base URL)"))?,
        )?;
        let protocol = match self.protocol.as_deref() {
            None => Protocol::OpenAiChat,
            Some(p) => Protocol::parse(p).ok_or_else(|| {
                bad(
                    "protocol",
                    format!(
                        "unknown protocol {p:?}; use openai-chat, openai-responses, a2a, adk or langgraph"
                    ),
                )
            })?,
        };
        let (a2a_upstream_transport, a2a_grpc_upstream) = a2a_transport(
            protocol,
            self.a2a_upstream_transport.as_deref(),
            self.a2a_grpc_upstream,
        )?;
        let a2a_advertise_grpc = match self.a2a_advertise_grpc.as_deref() {
            None => AdvertiseGrpc::default(),
            Some(value) => AdvertiseGrpc::parse(value).ok_or_else(|| {
                bad(
                    "a2a_advertise_grpc",
                    format!("{value:?}: use auto, always or never"),
                )
            })?,
        };
        let store = self
            .store
            .unwrap_or_else(|| ".tether/sessions.sqlite".to_owned());
        if store.trim().is_empty() {
            return Err(bad("store", "is empty"));
        }
        let journal_path = self
            .journal_path
            .unwrap_or_else(|| ".tether/journal.sqlite".to_owned());
        if journal_path.trim().is_empty() {
            return Err(bad("journal_path", "is empty"));
        }
        let mut upstream_headers: Vec<(String, String)> = self
            .upstream_headers
            .unwrap_or_default()
            .into_iter()
            .collect();
        for h in self.upstream_header {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| bad("upstream_headers", format!("{h:?} is not \"Name: value\"")))?;
            upstream_headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
        for (name, value) in &upstream_headers {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                || http::HeaderValue::from_str(value).is_err()
            {
                return Err(bad(
                    "upstream_headers",
                    format!("{name:?} is not a valid header"),
                ));
            }
        }
        let positive = |key: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(bad(key, "must be greater than 0")),
            v => Ok(v.unwrap_or(default)),
        };
        let log_json = match self.log_format.as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(other) => return Err(bad("log_format", format!("{other:?}: use text or json"))),
        };
        let is_postgres = store.starts_with("postgres://") || store.starts_with("postgresql://");
        let replica_id = match self.replica_id {
            Some(id) if id.trim().is_empty() || id.len() > 200 => {
                return Err(bad("replica_id", "must be 1-200 characters"))
            }
            Some(id) => id,
            None if is_postgres => format!("replica_{}", uuid::Uuid::new_v4().simple()),
            None => "local".to_owned(),
        };
        let run_lease =
            Duration::from_secs(positive("run_lease_seconds", self.run_lease_seconds, 15)?);
        if run_lease < Duration::from_secs(3) {
            // Heartbeats every third of the lease: below 1 s a slow commit loses it.
            return Err(bad("run_lease_seconds", "must be at least 3"));
        }
        let retention = match self.retention {
            None => None,
            Some(r) => {
                let max_idle = r.max_idle_seconds.ok_or_else(|| {
                    bad("retention.max_idle_seconds", "is required in [retention]")
                })?;
                let batch = positive("retention.sweep_batch", r.sweep_batch, 100)?;
                if batch > 10_000 {
                    return Err(bad("retention.sweep_batch", "must be at most 10000"));
                }
                Some(session_log::retention::RetentionConfig {
                    max_idle: Duration::from_secs(positive(
                        "retention.max_idle_seconds",
                        Some(max_idle),
                        0,
                    )?),
                    interval: Duration::from_secs(positive(
                        "retention.sweep_interval_seconds",
                        r.sweep_interval_seconds,
                        60,
                    )?),
                    batch: batch as i64,
                    tombstones: Duration::from_secs(positive(
                        "retention.tombstone_keep_seconds",
                        r.tombstone_keep_seconds,
                        session_log::retention::TOMBSTONES.as_secs(),
                    )?),
                    accounts: r
                        .accounts
                        .into_iter()
                        .map(|(account, secs)| {
                            let key = format!("retention.accounts.{account}");
                            Ok((account, Duration::from_secs(positive(&key, Some(secs), 0)?)))
                        })
                        .collect::<Result<_, ConfigError>>()?,
                })
            }
        };
        let mut webhooks: Vec<Webhook> = Vec::new();
        for (i, w) in self.webhooks.unwrap_or_default().into_iter().enumerate() {
            let w = w.validate(i)?;
            if webhooks.iter().any(|o| o.name == w.name) {
                return Err(bad(
                    &format!("webhooks[{i}].name"),
                    format!(
                        "{:?} names another webhook too; give each its own name",
                        w.name
                    ),
                ));
            }
            webhooks.push(w);
        }
        let approvals = match self.approvals {
            None => None,
            Some(a) => {
                let timeout = a.timeout_seconds.ok_or_else(|| {
                    bad("approvals.timeout_seconds", "is required in [approvals]")
                })?;
                let on_timeout = match a.on_timeout.as_deref().unwrap_or("reject") {
                    "reject" => OnTimeout::Reject,
                    "approve" => OnTimeout::Approve,
                    "leave" => OnTimeout::Leave,
                    other => {
                        return Err(bad(
                            "approvals.on_timeout",
                            format!("must be \"reject\", \"approve\" or \"leave\", not {other:?}"),
                        ))
                    }
                };
                Some(ApprovalsConfig {
                    timeout: Duration::from_secs(positive(
                        "approvals.timeout_seconds",
                        Some(timeout),
                        0,
                    )?),
                    on_timeout,
                    sweep_interval: Duration::from_secs(positive(
                        "approvals.sweep_interval_seconds",
                        a.sweep_interval_seconds,
                        5,
                    )?),
                })
            }
        };
        let quotas = match self.quotas {
            None => None,
            Some(q) => {
                let default = QuotaLimits {
                    sessions: q.sessions,
                    event_bytes: q.event_bytes,
                    upload_bytes: q.upload_bytes,
                };
                default.check("quotas")?;
                let mut accounts = std::collections::HashMap::new();
                for (account, limits) in q.accounts {
                    limits.check(&format!("quotas.accounts.{account}"))?;
                    accounts.insert(account, limits.or(default));
                }
                Some(Quotas { default, accounts })
            }
        };
        let telemetry = self.telemetry.unwrap_or_default();
        let telemetry = Telemetry {
            otlp_endpoint: match telemetry.otlp_endpoint {
                Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                    return Err(bad(
                        "telemetry.otlp_endpoint",
                        "must be an http:// or https:// URL (OTLP over HTTP)",
                    ))
                }
                Some(url) if url.parse::<http::Uri>().is_err() => {
                    return Err(bad(
                        "telemetry.otlp_endpoint",
                        format!("{url:?} is not a URL"),
                    ))
                }
                url => url.map(|u| u.trim_end_matches('/').to_owned()),
            },
            agent_name: match telemetry.agent_name {
                Some(name) if name.trim().is_empty() => {
                    return Err(bad("telemetry.agent_name", "is empty"))
                }
                name => name.unwrap_or_else(|| "agent".to_owned()),
            },
        };
        let public_url = match self.public_url {
            Some(url) if !(url.starts_with("http://") || url.starts_with("https://")) => {
                return Err(bad("public_url", "must start with http:// or https://"))
            }
            url => url.map(|u| u.trim_end_matches('/').to_owned()),
        };
        Ok(Config {
            allowed_hosts,
            allowed_origins,
            a2a_upstream_transport,
            a2a_grpc_upstream,
            a2a_advertise_grpc,
            public_url,
            replica_id,
            run_lease,
            listen,
            ready_file: self.ready_file,
            upstream,
            protocol,
            store,
            journal_path,
            store_min_free_bytes: self.store_min_free_bytes.unwrap_or(0),
            journal_local_claims: self.journal_local_claims.unwrap_or(false),
            model: self.model.unwrap_or_else(|| "agent".to_owned()),
            upstream_headers,
            forward_authorization: self.forward_authorization.unwrap_or(false),
            max_body_bytes: positive(
                "max_body_bytes",
                self.max_body_bytes.map(|v| v as u64),
                10 << 20,
            )? as usize,
            tee: self.tee.unwrap_or(true),
            tee_body_cap_bytes: self.tee_body_cap_bytes.unwrap_or(64 << 10),
            upstream_connect_timeout: Duration::from_secs(positive(
                "upstream_connect_timeout_seconds",
                self.upstream_connect_timeout_seconds,
                10,
            )?),
            upstream_idle_timeout: Duration::from_secs(positive(
                "upstream_idle_timeout_seconds",
                self.upstream_idle_timeout_seconds,
                300,
            )?),
            shutdown_grace: Duration::from_secs(self.shutdown_grace_seconds.unwrap_or(10)),
            subscribe_timeout: Duration::from_secs(positive(
                "subscribe_timeout_seconds",
                self.subscribe_timeout_seconds,
                300,
            )?),
            threads: positive("threads", self.threads.map(|v| v as u64), 2)? as usize,
            writer_max_batch: positive(
                "writer_max_batch",
                self.writer_max_batch.map(|v| v as u64),
                1024,
            )? as usize,
            log_json,
            checkpoint_policy: session_log::checkpoints::CheckpointPolicy {
                ttl: match self.checkpoint_ttl_seconds {
                    Some(0) => return Err(bad("checkpoint_ttl_seconds", "must be greater than 0")),
                    Some(s) => Some(
                        i64::try_from(s)
                            .ok()
                            .and_then(chrono::Duration::try_seconds)
                            .ok_or_else(|| bad("checkpoint_ttl_seconds", "is too large"))?,
                    ),
                    None => None,
                },
                replay_allowed: self.checkpoint_replay_allowed.unwrap_or(true),
            },
            side_effect_free_tools: self.side_effect_free_tools.unwrap_or_default(),
            workspace_dir: self
                .workspace_dir
                .map(|dir| {
                    dir.canonicalize()
                        .ok()
                        .filter(|d| d.is_dir())
                        .ok_or_else(|| {
                            bad(
                                "workspace_dir",
                                format!("{} is not a directory", dir.display()),
                            )
                        })
                })
                .transpose()?,
            auth,
            rate_limits,
            limits,
            compaction: self.compaction.validate(protocol)?,
            telemetry,
            retention,
            webhooks,
            approvals,
            quotas,
        })
    }
}

/// `a2a_upstream_transport` and `a2a_grpc_upstream`, checked against the protocol.
fn a2a_transport(
    protocol: Protocol,
    transport: Option<&str>,
    grpc_upstream: Option<String>,
) -> Result<(AgentTransport, Option<String>), ConfigError> {
    const KEY: &str = "a2a_upstream_transport";
    let transport = match transport {
        None | Some("jsonrpc") => AgentTransport::Http,
        Some("grpc") if protocol == Protocol::A2a => AgentTransport::Grpc,
        Some("jsonrpc-0.3") if protocol == Protocol::A2a => AgentTransport::JsonRpc03,
        Some(t @ ("grpc" | "jsonrpc-0.3")) => {
            return Err(bad(KEY, format!("{t} needs protocol = \"a2a\"")))
        }
        Some(other) => {
            return Err(bad(
                KEY,
                format!("{other:?}: use jsonrpc, jsonrpc-0.3 or grpc"),
            ))
        }
    };
    let Some(address) = grpc_upstream else {
        return Ok((transport, None));
    };
    if transport != AgentTransport::Grpc {
        return Err(bad(
            "a2a_grpc_upstream",
            "is used only with a2a_upstream_transport = \"grpc\"",
        ));
    }
    let port = address.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
    if address.contains('/') || !matches!(port, Some(Ok(p)) if p > 0) {
        return Err(bad(
            "a2a_grpc_upstream",
            format!("{address:?} is not host:port, e.g. 127.0.0.1:50051"),
        ));
    }
    Ok((transport, Some(address)))
}

/// `allowed_hosts`: each a host name (optionally `*.` before it), an IP address (IPv6 in
/// brackets) or `*`, optionally with `:port`; lower-cased.
fn host_patterns(values: Vec<String>) -> Result<Vec<String>, ConfigError> {
    values
        .into_iter()
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .map(|v| {
            if crate::client::site::valid_host_pattern(&v) {
                Ok(v)
            } else {
                Err(bad(
                    "allowed_hosts",
                    format!(
                        "{v:?} is not a host name, `*.name`, an IP address ([v6] in brackets) \
                         or `*`, with an optional :port"
                    ),
                ))
            }
        })
        .collect()
}

/// `allowed_origins`: each `http(s)://host[:port]`, no path; lower-cased.
fn origins(values: Vec<String>) -> Result<Vec<String>, ConfigError> {
    values
        .into_iter()
        .map(|v| v.trim().trim_end_matches('/').to_ascii_lowercase())
        .filter(|v| !v.is_empty())
        .map(|v| {
            let authority = v
                .strip_prefix("http://")
                .or_else(|| v.strip_prefix("https://"));
            match authority {
                Some(a)
                    if !a.is_empty()
                        && crate::client::site::valid_host_pattern(a)
                        && !a.contains('*') =>
                {
                    Ok(v)
                }
                _ => Err(bad(
                    "allowed_origins",
                    format!("{v:?} is not an origin: http(s)://host[:port], no path"),
                )),
            }
        })
        .collect()
}

/// An agent-like base URL (`upstream`, `compaction.summarizer_url`): http only.
fn parse_upstream(key: &str, url: &str) -> Result<Upstream, ConfigError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| bad(key, format!("{url:?} is not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(bad(
                key,
                format!(
                    "scheme {other:?} is not supported; use http:// (Tether runs beside the agent)"
                ),
            ))
        }
        None => {
            return Err(bad(
                key,
                format!("{url:?} has no scheme; e.g. http://127.0.0.1:9000"),
            ))
        }
    }
    let host = uri
        .host()
        .ok_or_else(|| bad(key, format!("{url:?} has no host")))?;
    let port = uri.port_u16().unwrap_or(80);
    let base_path = uri.path().trim_end_matches('/').to_owned();
    Ok(Upstream {
        authority: format!("{host}:{port}"),
        base_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(args: &[&str]) -> Settings {
        Settings::try_parse_from(std::iter::once("serve").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_are_local_and_safe() {
        let c = settings(&["--upstream", "http://127.0.0.1:9000/"])
            .load()
            .unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.store, ".tether/sessions.sqlite");
        assert_eq!(c.journal_path, ".tether/journal.sqlite");
        assert_eq!(c.protocol, Protocol::OpenAiChat);
        assert_eq!(c.upstream.authority, "127.0.0.1:9000");
        assert_eq!(c.upstream.base_path, "");
    }

    #[test]
    fn flags_win_over_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "upstream = \"http://agent:8000/api\"\nprotocol = \"openai-chat\"\nmodel = \"m\"\n[upstream_headers]\nAuthorization = \"Bearer k\"\n").unwrap();
        let c = settings(&[
            "--conf",
            path.to_str().unwrap(),
            "--protocol",
            "openai-responses",
        ])
        .load()
        .unwrap();
        assert_eq!(c.protocol, Protocol::OpenAiResponses);
        assert_eq!(c.model, "m");
        assert_eq!(c.upstream.authority, "agent:8000");
        assert_eq!(c.upstream.base_path, "/api");
        assert_eq!(
            c.upstream_headers,
            vec![("Authorization".to_owned(), "Bearer k".to_owned())]
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = |args: &[&str]| settings(args).load().unwrap_err().key;
        assert_eq!(err(&[]), "upstream");
        assert_eq!(err(&["--upstream", "https://x"]), "upstream");
        assert_eq!(
            err(&["--upstream", "http://x", "--protocol", "grpc"]),
            "protocol"
        );
        assert_eq!(
            err(&["--upstream", "http://x", "--listen", "nonsense"]),
            "listen"
        );
        assert_eq!(
            err(&["--upstream", "http://x", "--listen", "0.0.0.0:8080"]),
            "listen"
        );
        assert_eq!(
            err(&["--upstream", "http://x", "--threads", "0"]),
            "threads"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "upstream = \"http://x\"\nlisten_adress = \"1\"\n").unwrap();
        let e = settings(&["--conf", path.to_str().unwrap()])
            .load()
            .unwrap_err();
        assert!(e.to_string().contains("listen_adress"), "{e}");
    }

    #[test]
    fn keep_last_turns_defaults_to_two_and_comes_from_the_file_and_flags() {
        let c = settings(&["--upstream", "http://x"]).load().unwrap();
        assert_eq!(c.compaction.keep_last_turns, 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "upstream = \"http://x\"\n[compaction]\nkeep_last_turns = 1\n",
        )
        .unwrap();
        let conf = path.to_str().unwrap();
        let c = settings(&["--conf", conf]).load().unwrap();
        assert_eq!(c.compaction.keep_last_turns, 1);
        let c = settings(&["--conf", conf, "--compaction-keep-last-turns", "3"])
            .load()
            .unwrap();
        assert_eq!(c.compaction.keep_last_turns, 3);
    }

    #[test]
    fn automatic_compaction_without_a_summarizer_is_refused_at_load() {
        for protocol in ["a2a", "adk", "langgraph"] {
            let e = settings(&[
                "--upstream",
                "http://x",
                "--protocol",
                protocol,
                "--compaction-trigger-tokens",
                "1000",
            ])
            .load()
            .unwrap_err();
            assert_eq!(e.key, "compaction.trigger_tokens", "{protocol}");
            let text = e.to_string();
            assert!(
                text.contains("compaction.summarizer_url") && text.contains(protocol),
                "{text}"
            );
            // With a summarizer of its own, or without trigger_tokens, it loads.
            let with = settings(&[
                "--upstream",
                "http://x",
                "--protocol",
                protocol,
                "--compaction-trigger-tokens",
                "1000",
                "--compaction-summarizer-url",
                "http://sum:9",
            ]);
            assert_eq!(with.load().unwrap().compaction.trigger_tokens, Some(1000));
            let without = settings(&["--upstream", "http://x", "--protocol", protocol]);
            assert!(without.load().is_ok());
        }
        // An OpenAI agent summarises itself.
        let c = settings(&["--upstream", "http://x", "--compaction-trigger-tokens", "9"]);
        assert_eq!(c.load().unwrap().compaction.trigger_tokens, Some(9));
    }

    #[test]
    fn compaction_keys_come_from_the_file_the_environment_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "upstream = \"http://x\"\n[compaction]\nsummarizer_url = \"http://sum:9/v1\"\n\
             summarizer_model = \"small\"\ntrigger_tokens = 100\n",
        )
        .unwrap();
        let conf = path.to_str().unwrap();
        let c = settings(&["--conf", conf]).load().unwrap();
        let summarizer = c.compaction.summarizer.unwrap();
        assert_eq!(
            (summarizer.authority.as_str(), summarizer.base_path.as_str()),
            ("sum:9", "/v1")
        );
        assert_eq!(c.compaction.summarizer_model.as_deref(), Some("small"));
        assert_eq!(c.compaction.trigger_tokens, Some(100));
        let c = settings(&["--conf", conf, "--compaction-trigger-tokens", "50"])
            .load()
            .unwrap();
        assert_eq!(c.compaction.trigger_tokens, Some(50));
        assert_eq!(c.compaction.summarizer_model.as_deref(), Some("small"));
        let off = settings(&["--upstream", "http://x"]).load().unwrap();
        assert!(off.compaction.trigger_tokens.is_none() && off.compaction.summarizer.is_none());

        let err = |args: &[&str]| settings(args).load().unwrap_err();
        let e = err(&["--upstream", "http://x", "--compaction-trigger-tokens", "0"]);
        assert_eq!(e.key, "compaction.trigger_tokens");
        let e = err(&[
            "--upstream",
            "http://x",
            "--compaction-summarizer-url",
            "https://s",
        ]);
        assert_eq!(e.key, "compaction.summarizer_url");
        let e = err(&[
            "--upstream",
            "http://x",
            "--compaction-summarizer-model",
            " ",
        ]);
        assert_eq!(e.key, "compaction.summarizer_model");
        std::fs::write(
            &path,
            "upstream = \"http://x\"\n[compaction]\ntrigger_tokens = 0\n",
        )
        .unwrap();
        let e = err(&["--conf", conf]);
        assert!(
            e.to_string()
                .contains("t.toml:3: compaction.trigger_tokens"),
            "{e}"
        );
        std::fs::write(
            &path,
            "upstream = \"http://x\"\n[compaction]\ntrigger = 5\n",
        )
        .unwrap();
        assert!(err(&["--conf", conf]).to_string().contains("trigger"));
    }

    #[test]
    fn approvals_time_out_only_when_the_table_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        let conf = path.to_str().unwrap();
        let load = |table: &str| {
            std::fs::write(&path, format!("upstream = \"http://x\"\n{table}")).unwrap();
            settings(&["--conf", conf]).load()
        };
        assert!(load("").unwrap().approvals.is_none());
        let a = load("[approvals]\ntimeout_seconds = 30\non_timeout = \"approve\"\n")
            .unwrap()
            .approvals
            .unwrap();
        assert_eq!(a.timeout, Duration::from_secs(30));
        assert_eq!(a.on_timeout, OnTimeout::Approve);
        assert_eq!(a.sweep_interval, Duration::from_secs(5));
        for (text, key) in [
            (
                "[approvals]\non_timeout = \"reject\"\n",
                "approvals.timeout_seconds",
            ),
            (
                "[approvals]\ntimeout_seconds = 0\n",
                "approvals.timeout_seconds",
            ),
            (
                "[approvals]\ntimeout_seconds = 5\non_timeout = \"maybe\"\n",
                "approvals.on_timeout",
            ),
        ] {
            let e = load(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn retention_is_off_unless_its_table_names_a_maximum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        let conf = path.to_str().unwrap();
        let load = |table: &str| {
            std::fs::write(&path, format!("upstream = \"http://x\"\n{table}")).unwrap();
            settings(&["--conf", conf]).load()
        };
        assert!(load("").unwrap().retention.is_none());
        let r = load("[retention]\nmax_idle_seconds = 90\n")
            .unwrap()
            .retention
            .unwrap();
        assert_eq!(
            (r.max_idle, r.interval, r.batch),
            (Duration::from_secs(90), Duration::from_secs(60), 100)
        );
        for (table, key) in [
            (
                "[retention]\nsweep_batch = 5\n",
                "retention.max_idle_seconds",
            ),
            (
                "[retention]\nmax_idle_seconds = 0\n",
                "retention.max_idle_seconds",
            ),
            (
                "[retention]\nmax_idle_seconds = 9\nsweep_interval_seconds = 0\n",
                "retention.sweep_interval_seconds",
            ),
            (
                "[retention]\nmax_idle_seconds = 9\nsweep_batch = 20000\n",
                "retention.sweep_batch",
            ),
        ] {
            assert_eq!(load(table).unwrap_err().key, key, "{table}");
        }
        assert!(
            load("[retention]\nmax_age = 5\n").is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn a2a_transport_keys_are_checked_against_the_protocol() {
        let load = |args: &[&str]| {
            let mut all = vec!["--upstream", "http://x"];
            all.extend_from_slice(args);
            settings(&all).load()
        };
        let c = load(&[]).unwrap();
        assert_eq!(c.a2a_upstream_transport, AgentTransport::Http);
        assert_eq!(c.a2a_advertise_grpc, AdvertiseGrpc::Auto);
        let c = load(&["--a2a-advertise-grpc", "always"]).unwrap();
        assert_eq!(c.a2a_advertise_grpc, AdvertiseGrpc::Always);
        assert!(load(&["--a2a-advertise-grpc", "sometimes"]).is_err());
        let c = load(&[
            "--protocol",
            "a2a",
            "--a2a-upstream-transport",
            "grpc",
            "--a2a-grpc-upstream",
            "agent:50051",
        ])
        .unwrap();
        assert_eq!(c.a2a_upstream_transport, AgentTransport::Grpc);
        assert_eq!(c.a2a_grpc_upstream.as_deref(), Some("agent:50051"));
        let c = load(&[
            "--protocol",
            "a2a",
            "--a2a-upstream-transport",
            "jsonrpc-0.3",
        ])
        .unwrap();
        assert_eq!(c.a2a_upstream_transport, AgentTransport::JsonRpc03);
        let err = |args: &[&str]| load(args).unwrap_err().key;
        assert_eq!(
            err(&["--a2a-upstream-transport", "grpc"]),
            "a2a_upstream_transport"
        );
        assert_eq!(
            err(&["--protocol", "a2a", "--a2a-upstream-transport", "rest"]),
            "a2a_upstream_transport"
        );
        assert_eq!(
            err(&["--protocol", "a2a", "--a2a-grpc-upstream", "agent:1"]),
            "a2a_grpc_upstream"
        );
        for bad in ["agent", "http://agent:1", "agent:0", "agent:x"] {
            let args = [
                "--protocol",
                "a2a",
                "--a2a-upstream-transport",
                "grpc",
                "--a2a-grpc-upstream",
                bad,
            ];
            assert_eq!(err(&args), "a2a_grpc_upstream", "{bad}");
        }
    }

    #[test]
    fn non_loopback_needs_explicit_consent() {
        let c = settings(&[
            "--upstream",
            "http://x",
            "--listen",
            "0.0.0.0:8080",
            "--allow-unauthenticated",
            "true",
            "--allowed-hosts",
            "Gateway.example,*.internal:8080",
        ])
        .load()
        .unwrap();
        let err = |args: &[&str]| settings(args).load().unwrap_err().key;
        assert!(!c.listen.ip().is_loopback());
        assert_eq!(c.allowed_hosts, ["gateway.example", "*.internal:8080"]);
        // Without the names, consent alone is not enough; the message names both keys.
        let e = settings(&[
            "--upstream",
            "http://x",
            "--listen",
            "0.0.0.0:8080",
            "--allow-unauthenticated",
        ])
        .load()
        .unwrap_err();
        assert_eq!(e.key, "listen");
        assert!(
            e.message.contains("[auth]") && e.message.contains("allowed_hosts"),
            "{}",
            e.message
        );
        for bad in ["a/b", "*x.example", "a:b", "http://a", "[::1"] {
            let args = ["--upstream", "http://x", "--allowed-hosts", bad];
            assert_eq!(err(&args), "allowed_hosts", "{bad}");
        }
        for bad in ["app.example", "https://a/b", "https://*.a", "null"] {
            let args = ["--upstream", "http://x", "--allowed-origins", bad];
            assert_eq!(err(&args), "allowed_origins", "{bad}");
        }
    }
}

#[cfg(test)]
mod errors_say_where {
    use super::*;

    fn load_file(toml: &str, args: &[&str]) -> (String, ConfigError) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, toml).unwrap();
        let path = path.to_str().unwrap().to_owned();
        let mut all = vec!["serve", "--conf", &path];
        all.extend_from_slice(args);
        let e = Settings::try_parse_from(all).unwrap().load().unwrap_err();
        (path, e)
    }

    #[test]
    fn a_wrongly_typed_value_names_file_line_and_key() {
        let (path, e) = load_file("upstream = \"http://x\"\n\nthreads = \"two\"\n", &[]);
        assert_eq!(e.key, "threads");
        assert_eq!(
            e.to_string(),
            format!("{path}:3: threads: invalid type: string \"two\", expected usize")
        );
    }

    #[test]
    fn keys_in_tables_are_dotted() {
        let (path, e) = load_file("upstream = \"http://x\"\n[[auth.api_keys]]\nid = 3\n", &[]);
        assert_eq!(e.key, "auth.api_keys[0].id");
        assert!(
            e.to_string()
                .starts_with(&format!("{path}:3: auth.api_keys[0].id: ")),
            "{e}"
        );
        let (_, e) = load_file(
            "upstream = \"http://x\"\n[limits]\nmax_bodybytes = 5\n",
            &[],
        );
        assert_eq!(e.key, "limits.max_bodybytes");
        assert_eq!(e.location.unwrap().rsplit(':').next(), Some("3"));
    }

    #[test]
    fn a_refused_value_from_the_file_names_its_line() {
        let (path, e) = load_file(
            "upstream = \"http://x\"\n[limits]\nmax_json_depth = 0\n",
            &[],
        );
        assert_eq!(e.key, "limits.max_json_depth");
        assert_eq!(e.location.as_deref(), Some(format!("{path}:3").as_str()));
        let (path, e) = load_file("upstream = \"http://x\"\nthreads = 0\n", &[]);
        assert_eq!(
            e.to_string(),
            format!("{path}:2: threads: must be greater than 0")
        );
        // The same key given as a flag is the flag's error, not the file's.
        let (_, e) = load_file(
            "upstream = \"http://x\"\nthreads = 3\n",
            &["--threads", "0"],
        );
        assert_eq!(e.key, "threads");
        assert_eq!(e.location, None);
        assert_eq!(
            e.to_string(),
            "configuration key `threads`: must be greater than 0"
        );
    }

    #[test]
    fn a_later_file_wins_and_errors_name_the_file_that_set_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
        std::fs::write(
            &first,
            "upstream = \"http://x\"\nmodel = \"a\"\nthreads = 3\n",
        )
        .unwrap();
        std::fs::write(&second, "\nmodel = \"b\"\n").unwrap();
        let (a, b) = (first.to_str().unwrap(), second.to_str().unwrap());
        let c = Settings::try_parse_from(["serve", "--conf", a, "--conf", b])
            .unwrap()
            .load()
            .unwrap();
        assert_eq!((c.model.as_str(), c.threads), ("b", 3));
        std::fs::write(&second, "\nthreads = 0\n").unwrap();
        let e = Settings::try_parse_from(["serve", "--conf", &format!("{a},{b}")])
            .unwrap()
            .load()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{b}:2: threads: must be greater than 0")
        );
    }

    #[test]
    fn a_file_that_is_not_toml_names_its_line() {
        let (path, e) = load_file("upstream = \"http://x\nthreads = 2\n", &[]);
        assert_eq!(e.key, FILE_KEY);
        assert!(e.to_string().starts_with(&format!("{path}:1: ")), "{e}");
    }

    #[test]
    fn boolean_flags_work_bare_and_with_a_value() {
        let parse = |args: &[&str]| {
            Settings::try_parse_from(std::iter::once("serve").chain(args.iter().copied())).unwrap()
        };
        assert_eq!(parse(&["--tee"]).tee, Some(true));
        assert_eq!(parse(&["--tee", "false"]).tee, Some(false));
        assert_eq!(parse(&["--tee=false"]).tee, Some(false));
        assert_eq!(parse(&["--tee", "true"]).tee, Some(true));
        assert_eq!(parse(&[]).tee, None);
        let s = parse(&[
            "--allow-unauthenticated",
            "--threads",
            "3",
            "--forward-authorization",
        ]);
        assert_eq!(s.allow_unauthenticated, Some(true));
        assert_eq!(s.forward_authorization, Some(true));
        assert_eq!(s.threads, Some(3));
        assert_eq!(
            parse(&["--checkpoint-replay-allowed"]).checkpoint_replay_allowed,
            Some(true)
        );
    }

    #[test]
    fn help_shows_the_defaults_the_gateway_uses() {
        use clap::CommandFactory;
        let help = Settings::command().render_help().to_string();
        let c = Settings {
            upstream: Some("http://x".into()),
            ..Default::default()
        }
        .load()
        .unwrap();
        for default in [
            format!("[default: {}]", c.listen),
            format!("[default: {}]", c.store),
            format!("[default: {}]", c.journal_path),
            format!("[default: {}]", c.model),
            format!("[default: {}]", c.max_body_bytes),
            format!("[default: {}]", c.tee),
            format!("[default: {}]", c.tee_body_cap_bytes),
            format!("[default: {}]", c.shutdown_grace.as_secs()),
            format!("[default: {}]", c.threads),
            format!("[default: {}]", c.writer_max_batch),
            format!("[default: {}]", c.run_lease.as_secs()),
            format!("[default: {}]", c.forward_authorization),
        ] {
            assert!(help.contains(&default), "--help lacks {default}:\n{help}");
        }
        assert!(help.contains("Required"), "{help}");
    }
}

#[cfg(test)]
mod policy_tables {
    use super::*;

    fn load(toml: &str, args: &[&str]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, format!("upstream = \"http://x\"\n{toml}")).unwrap();
        let mut all = vec!["serve", "--conf", path.to_str().unwrap()];
        all.extend_from_slice(args);
        Settings::try_parse_from(all).unwrap().load()
    }

    const KEY: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn authentication_allows_a_public_address() {
        let keys =
            format!("[[auth.api_keys]]\nid = \"k\"\naccount_id = \"acme\"\nsha256 = \"{KEY}\"\n");
        let c = load(&keys, &["--listen", "0.0.0.0:8080"]).unwrap();
        assert!(c.auth.is_enabled());
        assert_eq!(
            load("", &["--listen", "0.0.0.0:8080"]).unwrap_err().key,
            "listen"
        );
    }

    /// The default build fetches a JWKS over https (the `jwks-https` feature); the fetch
    /// itself, through a configured CA, is tested in `policies`.
    #[test]
    fn the_default_build_takes_an_https_jwks_url() {
        let jwt =
            "[auth.jwt]\nalgorithms = [\"RS256\"]\njwks_url = \"https://idp.example/jwks.json\"\n";
        let c = load(jwt, &[]).expect("an https JWKS URL is accepted");
        assert!(c.auth.is_enabled());
    }

    #[test]
    fn policy_errors_name_their_key() {
        let err = |toml: &str| load(toml, &[]).unwrap_err().key;
        assert_eq!(err("[limits]\nmax_body_bytes = 5"), "limits.max_body_bytes");
        assert_eq!(err("[limits]\nmax_json_depth = 0"), "limits.max_json_depth");
        assert_eq!(
            err("[rate_limits]\nrequests_per_second = -1.0"),
            "rate_limits.requests_per_second"
        );
        assert_eq!(
            err("[auth.jwt]\nalgorithms = [\"none\"]"),
            "auth.jwt.algorithms"
        );
        assert_eq!(
            err("[[auth.api_keys]]\nid = \"k\"\naccount_id = \"a\"\nsha256 = \"x\""),
            "auth.api_keys[0].sha256"
        );
        assert!(load("[limits]\nmax_bodybytes = 5", &[])
            .unwrap_err()
            .message
            .contains("max_bodybytes"));
    }

    #[test]
    fn webhooks_are_validated_naming_the_key() {
        let hook = |body: &str| load(&format!("[[webhooks]]\n{body}"), &[]);
        let good = "url = \"https://h.example/x\"\nevents = [\"run.failed\"]\n\
                    secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n";
        let config = hook(good).unwrap();
        assert_eq!(config.webhooks[0].name, "https://h.example/x");
        assert_eq!(config.webhooks[0].secret.len(), 24);
        assert_eq!(config.webhooks[0].max_attempts, 8);
        let key = |body: &str| hook(body).unwrap_err().key;
        assert_eq!(key(&good.replace("https://", "ftp://")), "webhooks[0].url");
        assert_eq!(
            key(&good.replace("run.failed", "run.ended")),
            "webhooks[0].events"
        );
        assert_eq!(
            key(&good.replace("[\"run.failed\"]", "[]")),
            "webhooks[0].events"
        );
        assert_eq!(
            key(&good.replace("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "short")),
            "webhooks[0].secret"
        );
        assert_eq!(
            key(&format!("{good}max_attempts = 0\n")),
            "webhooks[0].max_attempts"
        );
        let twice = format!("{good}name = \"a\"\n[[webhooks]]\n{good}name = \"a\"\n");
        assert_eq!(key(&twice), "webhooks[1].name");
        // The secret is never printed.
        assert!(!format!("{config:?}").contains("MfKQ"));
    }
}

#[cfg(test)]
mod example {
    /// The documented example configuration must load as it is.
    #[test]
    fn example_configuration_is_valid() {
        // At run time, not build time: a shared target directory may hold a binary built
        // in another checkout.
        let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
        let path = format!("{crate_dir}/../conf/tether.example.toml");
        let settings = super::Settings {
            conf: vec![path.into()],
            ..Default::default()
        };
        settings.load().expect("conf/tether.example.toml loads");
    }
}
