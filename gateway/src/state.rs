//! `State`: everything the request path needs, built once at start-up and shared by
//! every connection.

use std::sync::Arc;

use policies::input::AttachmentPolicy;
use policies::{Authenticator, IdentityHeaders, RateLimits};
use runtime_adapter::Surface;
use session_log::{Hub, Store, Writer};
use tokio::runtime::Handle;

use crate::client::body::InputLimits;
use crate::client::site::{HostRule, SiteRule};
use crate::config::Config;
use crate::runs::agent::Agent;
use crate::runs::Runs;

/// Everything the request path needs, shared by all connections.
pub struct State {
    pub config: Config,
    pub core: Handle,
    /// Usable from any runtime (see `core::CoreStore`).
    pub store: Arc<dyn Store>,
    pub hub: Hub,
    pub writer: Writer,
    pub runs: Arc<Runs>,
    /// Resolves requests runs ended waiting on.
    pub approvals: crate::approvals::Approvals,
    pub agent: Arc<Agent>,
    /// Decides the account of every request but health checks.
    pub auth: Authenticator,
    /// Requests per second per account and credential, and concurrent runs (also held by
    /// `runs`, which takes a slot per run).
    pub limits: Arc<RateLimits>,
    /// Identity headers a client may never send toward the agent.
    pub identity_headers: IdentityHeaders,
    /// What `input_file`/`input_image` data URLs may contain.
    pub attachments: AttachmentPolicy,
    /// Body size, rate and JSON depth for bodies Tether reads itself.
    pub input: InputLimits,
    /// The client surface of a stateful agent protocol (A2A, ADK), which claims its own
    /// paths; `None` for the OpenAI protocols, whose paths the gateway routes itself.
    pub protocol_surface: Option<&'static dyn Surface>,
    /// Which `Host` values are answered (DNS rebinding).
    pub host_rule: HostRule,
    /// Which origins may use Tether's own paths from a browser.
    pub site_rule: SiteRule,
}
