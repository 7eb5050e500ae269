//! `tether`: a Pingora gateway sidecar that authenticates callers, records every request
//! and streamed chunk in a durable session log, and forwards to an unmodified agent —
//! so conversations survive the agent forgetting them.

mod api;
mod approvals;
mod cli;
mod client;
mod config;
mod core;
mod digest;
mod error;
mod ids;
mod metrics;
mod openai;
mod passthrough;
mod protocol;
mod quota;
mod runs;
mod serve;
mod state;
mod telemetry;
mod turn;
mod ui;
mod webhooks;

use std::process::ExitCode;
use std::sync::Arc;

use async_trait::async_trait;
use clap::{Parser, Subcommand};
use pingora::apps::HttpServerOptions;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::ServerConf;
use pingora::server::{
    RunArgs, Server, ShutdownSignal, ShutdownSignalWatch, ShutdownWatch, UnixShutdownSignalWatch,
};
use pingora::services::background::{background_service, BackgroundService};
use runtime_adapter::Protocol;
use session_log::{Hub, Writer, WriterConfig};

use crate::client::body::InputLimits;
use crate::config::{Config, Settings};
use crate::runs::{agent, Runs};
use crate::serve::{deadline, listener, Gateway};
use crate::state::State;

/// jemalloc rather than glibc's malloc: buffers and events are allocated on Pingora's
/// threads and freed on the core runtime's, which glibc serialises on its arena locks.
/// Pass-through saturation rose by about a third, memory per idle stream by 2 %
/// (bench/findings.md).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes of the read buffer under each client connection's HTTP layer (see `serve`).
const CLIENT_READ_BUFFER: usize = 0;

#[derive(Parser)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(Box<Settings>),
    #[command(flatten)]
    Operate(cli::Command),
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let parsed = Cli::try_parse().map_err(|e| match config::refused_variable(&e, &args) {
        // Only `serve` reads TETHER_* configuration variables.
        Some(refused) if args.get(1).map(String::as_str) == Some("serve") => {
            eprintln!("tether: {refused}");
            ExitCode::from(2)
        }
        _ => e.exit(),
    });
    let settings = match parsed {
        Ok(cli) => match cli.command {
            Command::Serve(settings) => *settings,
            Command::Operate(command) => return cli::run(command),
        },
        Err(code) => return code,
    };
    let config = match settings.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tether: {e}");
            return ExitCode::from(2);
        }
    };
    // Reads key files, the JWKS file and the HMAC secret's variable: a bad one is a
    // configuration error naming its key, like any other.
    let auth = match policies::Authenticator::new(&config.auth) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tether: {e}");
            return ExitCode::from(2);
        }
    };
    let traces = match telemetry::start(&config) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tether: {e}");
            return ExitCode::from(2);
        }
    };
    init_tracing(&config, traces.as_ref());
    let log_json = config.log_json;
    let served = serve(config, auth);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        // One line, in the log's format: a JSON log stays parseable, a terminal reads it.
        Err(e) if log_json => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("tether: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The log (stderr, text or JSON, filtered by `TETHER_LOG`) and, when traces are on, the
/// OpenTelemetry layer; the log never shows the trace spans.
fn init_tracing(config: &Config, traces: Option<&telemetry::Traces>) {
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;

    let filter =
        tracing_subscriber::EnvFilter::try_from_env("TETHER_LOG").unwrap_or_else(|_| "info".into());
    let most = filter.max_level_hint();
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(log_colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ));
    let log = match config.log_json {
        true => log.json().boxed(),
        false => log.boxed(),
    };
    tracing_subscriber::registry()
        .with(log.with_filter(filter.and(telemetry::not_spans())))
        .with(traces.map(|t| t.layer()))
        .init();
    // `init` lets every `log` record through to `tracing` (the filters above see spans
    // too, so no level hint reaches it), and Pingora calls `debug!` several times per
    // request: about 7k instructions each time to be filtered out. The `log` macros check
    // this level first, for nothing.
    log::set_max_level(match most {
        Some(l) if l == tracing::level_filters::LevelFilter::OFF => log::LevelFilter::Off,
        Some(l) if l == tracing::level_filters::LevelFilter::ERROR => log::LevelFilter::Error,
        Some(l) if l == tracing::level_filters::LevelFilter::WARN => log::LevelFilter::Warn,
        Some(l) if l == tracing::level_filters::LevelFilter::INFO => log::LevelFilter::Info,
        Some(l) if l == tracing::level_filters::LevelFilter::DEBUG => log::LevelFilter::Debug,
        _ => log::LevelFilter::Trace,
    });
}

/// Whether the text log is coloured: only on a terminal, never when `NO_COLOR` is set to
/// anything but the empty string (no-color.org); a file or a pipe gets plain text, which
/// log collectors and `grep` read as written.
fn log_colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

fn serve(
    mut config: Config,
    auth: policies::Authenticator,
) -> Result<(), Box<dyn std::error::Error>> {
    // Bound first (see serve::listener): a port in use is an error before anything else
    // happens — in particular before a second gateway on the same store closes the first
    // one's runs as abandoned.
    let bound = listener::bind(config.listen)?;
    config.listen = bound.addr;
    let core = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tether-core")
        .enable_all()
        .build()?;
    let handle = core.handle().clone();

    // Store errors say which store (never its password): sqlx's alone name nothing.
    let store_name = session_log::describe(&config.store);
    let in_store = |e: session_log::StoreError| format!("{store_name}: {e}");
    let (raw_store, writer, hub) = core.block_on(async {
        let store: Arc<dyn session_log::Store> = if config.store.starts_with("postgres://")
            || config.store.starts_with("postgresql://")
        {
            let pg = session_log::postgres::PgStore::connect(&config.store)
                .await
                .map_err(in_store)?;
            // Commits go to a local journal while PostgreSQL is unreachable, and are
            // backfilled when it is back (a journal left by a previous life, here).
            session_log::journal::JournaledStore::new(
                pg,
                &config.journal_path,
                session_log::journal::JournalConfig {
                    local_claims: config.journal_local_claims,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| format!("journal {}: {e}", config.journal_path))?
        } else {
            session_log::open(&config.store).await.map_err(in_store)?
        };
        webhooks::route(&*store, &config.webhooks);
        let hub = Hub::new();
        let writer = Writer::spawn(
            store.clone(),
            hub.clone(),
            WriterConfig {
                max_batch: config.writer_max_batch,
                ..Default::default()
            },
        );
        // A run left `in_progress` by a gateway that died cannot be finished by anyone.
        // Only runs nobody drives any more are closed: this replica's previous life's
        // (same `replica_id`), unowned ones, and expired leases — never the live runs of
        // other replicas sharing the store.
        let abandoned = store
            .abandoned_invocations(Some(&config.replica_id))
            .await
            .map_err(in_store)?;
        runs::close_as_interrupted(&writer, &abandoned, "gateway_restarted")
            .await
            .map_err(|e| format!("{store_name}: {e}"))?;
        Ok::<_, Box<dyn std::error::Error>>((store, writer, hub))
    })?;
    let store = core::CoreStore::shared(raw_store.clone(), handle.clone());
    let upstream = runtime_adapter::upstream(config.protocol, config.a2a_upstream_transport);
    let agent = Arc::new(agent::Agent::new(&config, upstream.card_reader()));
    let limits = Arc::new(policies::RateLimits::new(&config.rate_limits));
    let runs = Runs::new(
        raw_store.clone(),
        writer.clone(),
        agent.clone(),
        upstream,
        config.model.clone(),
        limits.clone(),
        runs::Ownership {
            owner: config.replica_id.clone(),
            lease: config.run_lease,
        },
        runs::compaction::Compactor::new(&config, agent.clone()),
    );
    handle.spawn(runs.clone().keep_leases());
    if let Some(retention) = config.retention.clone() {
        handle.spawn(session_log::retention::keep(
            raw_store.clone(),
            config.replica_id.clone(),
            retention,
            || ids::new_id("del"),
            |removed| metrics::METRICS.deleted(session_log::retention::BY, removed, 0),
        ));
    }
    // Webhook events, written with the events causing them, are delivered by workers of
    // their own.
    webhooks::start(
        &handle,
        raw_store.clone(),
        &config.webhooks,
        &config.replica_id,
    );
    if config.store_min_free_bytes > 0 {
        // The disk the log is written to: the SQLite file's, or the journal's.
        let watched = session_log::local_file(&config.store)
            .unwrap_or_else(|| config.journal_path.clone().into());
        let health = writer.health().clone();
        let min_free = config.store_min_free_bytes;
        handle.spawn(async move { health.watch_free_space(watched, min_free).await });
    }
    if raw_store.backend() == "postgres" {
        // Live tail and cancels across replicas (see session_log::tail).
        let runs = runs.clone();
        handle.spawn(session_log::tail::follow(
            config.store.clone(),
            raw_store.clone(),
            hub.clone(),
            move |account, invocation| {
                runs.stop(account, invocation, runs::Stop::Cancel);
            },
        ));
    }
    let header_deadline = std::time::Duration::from_secs(config.limits.header_timeout_seconds());
    let input = InputLimits {
        max_body_bytes: config.max_body_bytes,
        max_json_depth: config.limits.max_json_depth(),
        min_body_bytes_per_second: config.limits.min_body_bytes_per_second(),
        body_grace: header_deadline,
    };
    if !auth.is_enabled() {
        tracing::warn!("no authentication configured: every request is the `local` account");
    }
    runs.set_checkpoint_policy(config.checkpoint_policy.clone());
    let approvals = approvals::Approvals {
        store: raw_store.clone(),
        hub: hub.clone(),
        runs: runs.clone(),
        writer: writer.clone(),
        protocol: config.protocol,
    };
    if let Some(a) = config.approvals.clone() {
        let expiring = a.on_timeout != config::OnTimeout::Leave;
        runs.set_approval_timeout(expiring.then_some(a.timeout));
        handle.spawn(approvals.clone().keep(a));
    }
    tracing::info!(
        listen = %config.listen, upstream = %config.upstream.authority, protocol = config.protocol.as_str(),
        store = raw_store.backend(), replica_id = %config.replica_id,
        run_lease_seconds = config.run_lease.as_secs(), "tether starting"
    );

    let grace = config.shutdown_grace;
    let server_conf = ServerConf {
        threads: config.threads,
        // Pingora sleeps this long after SIGTERM whatever is running; the waiting is done
        // before it is told to stop instead (`DrainOnTerm`), for as long as runs need.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..Default::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, server_conf);
    server.bootstrap();
    let listen = config.listen.to_string();
    let ready_file = config.ready_file.clone();
    let protocol_surface = (!config.protocol.sends_history()).then(|| match config.protocol {
        Protocol::A2a => runtime_adapter::a2a_surface(config.a2a_advertise_grpc),
        protocol => runtime_adapter::surface(protocol),
    });
    let drain_on_term = DrainOnTerm {
        runs: runs.clone(),
        hub: hub.clone(),
        writer: writer.clone(),
        store: raw_store.clone(),
        core: handle.clone(),
        grace,
    };
    let state = Arc::new(State {
        host_rule: crate::client::site::HostRule::new(config.listen, &config.allowed_hosts),
        site_rule: crate::client::site::SiteRule::new(
            &config.allowed_origins,
            config.public_url.as_deref(),
        ),
        protocol_surface,
        identity_headers: policies::IdentityHeaders::new(&config.auth.identity_headers),
        attachments: policies::input::AttachmentPolicy::new(&config.limits),
        input,
        config,
        core: handle.clone(),
        store,
        hub,
        writer: writer.clone(),
        runs: runs.clone(),
        approvals,
        agent,
        auth,
        limits: limits.clone(),
    });
    let grpc = state.protocol_surface.and_then(|s| s.grpc()).is_some();
    let mut app = pingora::proxy::http_proxy(
        &server.configuration,
        Gateway {
            state: state.clone(),
        },
    );
    if grpc {
        // gRPC clients speak HTTP/2 without TLS, with prior knowledge: Pingora reads the
        // first bytes of each connection and serves HTTP/2 when they are its preface,
        // HTTP/1.1 otherwise, on the same port. An idle HTTP/2 connection is closed like
        // an idle keep-alive one (an open call keeps it busy).
        let mut options = HttpServerOptions::default();
        options.h2c = true;
        options.h2_idle_timeout = Some(std::time::Duration::from_secs(60));
        app.server_options = Some(options);
    }
    // Pingora keeps an idle keep-alive connection 60 s; the header deadline starts at a
    // request's first byte.
    let app =
        deadline::HeaderDeadline::new(app, header_deadline, std::time::Duration::from_secs(60));
    let mut proxy = pingora::services::listening::Service::new("tether".to_owned(), app);
    // Pingora's default gives every client connection a zero-filled 64 KiB read buffer,
    // all of it resident: most of what an idle stream cost. Its HTTP layer buffers
    // headers and bodies itself, so on plain TCP this one only saved read calls.
    proxy.add_listener(
        ListenerConfig::tcp(listen.as_str())
            .l4_buffer(L4BufferSettings::default().read(CLIENT_READ_BUFFER)),
    );
    server.add_service(listener::Prebound::new(proxy, bound, ready_file));
    server.add_service(background_service(
        "policies",
        PolicyUpkeep {
            state: state.clone(),
        },
    ));
    server.run(RunArgs {
        shutdown_signal: Box::new(drain_on_term),
    });

    // Pingora has stopped serving; whatever is still queued gets committed.
    core.block_on(async {
        runs.drain(std::time::Duration::ZERO).await;
        let _ = writer.flush().await;
    });
    tracing::info!("tether stopped");
    Ok(())
}

/// Forgets idle rate-limit keys every minute and refreshes a JWKS URL on its interval
/// (requests refresh a stale set themselves; this keeps them from having to wait).
struct PolicyUpkeep {
    state: Arc<State>,
}

#[async_trait]
impl BackgroundService for PolicyUpkeep {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let retain_every = std::time::Duration::from_secs(60);
        let jwks_every = self.state.auth.jwks_refresh_interval();
        if jwks_every.is_some() {
            if let Err(e) = self.state.auth.refresh_jwks().await {
                tracing::warn!(error = %e, "JWKS not loaded at start; requests will retry");
            }
        }
        let mut retain = tokio::time::interval(retain_every);
        let mut jwks = tokio::time::interval(jwks_every.unwrap_or(retain_every));
        retain.tick().await;
        jwks.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = retain.tick() => self.state.limits.retain_recent(),
                _ = jwks.tick(), if jwks_every.is_some() => {
                    if let Err(e) = self.state.auth.refresh_jwks().await {
                        tracing::warn!(error = %e, "JWKS refresh failed; keeping the last good keys");
                    }
                }
            }
        }
    }
}

/// Pingora's shutdown signals, with SIGTERM's grace spent before Pingora hears of it:
/// runs still going get up to the grace period to finish (the rest are closed as
/// interrupted), client streams of them a moment more to write their ends, and then
/// Pingora stops at once. An idle gateway exits immediately.
struct DrainOnTerm {
    runs: Arc<Runs>,
    hub: Hub,
    /// Flushed and closed once the runs are drained (see `recv`).
    writer: Writer,
    store: Arc<dyn session_log::Store>,
    core: tokio::runtime::Handle,
    grace: std::time::Duration,
}

/// After the runs, how much longer client streams get to write what they ended with (a
/// stream that follows a session and not a run does not end: this bounds it).
const STREAMS_TAIL: std::time::Duration = std::time::Duration::from_secs(1);

#[async_trait]
impl ShutdownSignalWatch for DrainOnTerm {
    async fn recv(&self) -> ShutdownSignal {
        let signal = UnixShutdownSignalWatch.recv().await;
        if !matches!(signal, ShutdownSignal::GracefulTerminate) {
            return signal;
        }
        tracing::info!(
            runs = self.runs.active_count(),
            streams = self.hub.subscribers(),
            grace_seconds = self.grace.as_secs(),
            "SIGTERM: draining runs"
        );
        // With no run going, no stream has an end still to come: a session followed
        // without a run (a console left open) never ends by itself, and must not hold the
        // exit for the whole grace period.
        let busy = self.runs.active_count() > 0;
        let (runs, hub, grace) = (self.runs.clone(), self.hub.clone(), self.grace);
        let (writer, store) = (self.writer.clone(), self.store.clone());
        let drained = core::on_core(&self.core, async move {
            // Refuses new runs from here on, and closes as interrupted what outlives grace.
            runs.drain(grace).await;
            let streams_until = tokio::time::Instant::now() + STREAMS_TAIL;
            while busy && hub.subscribers() > 0 && tokio::time::Instant::now() < streams_until {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            // Everything queued is committed, then the pool is closed: SQLite's last
            // connection checkpoints the WAL into the main file, so a clean stop leaves
            // the file whole (a kill -9 leaves the WAL, which the next start replays).
            // Bounded: a store that cannot write (a full disk) must not hold the exit.
            match tokio::time::timeout(session_log::health::OUTAGE_GRACE, writer.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(%error, "could not flush the session log at shutdown")
                }
                Err(_) => tracing::warn!(
                    "the session log did not flush at shutdown; what was queued is lost"
                ),
            }
            store.close().await;
            tracing::info!("session store closed");
        });
        // A SIGINT while draining still means "now".
        let interrupt = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
                Ok(mut s) => s.recv().await,
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = drained => {
                tracing::info!("drained");
                signal
            }
            _ = interrupt => ShutdownSignal::FastShutdown,
        }
    }
}
