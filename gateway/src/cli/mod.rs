//! The operator CLI on the `tether` binary: sessions, events, cancels, export and import,
//! all through a running gateway's control API, so every command sees exactly what its
//! API key's account may see; and `tether health` for container health checks. Tables for
//! people by default, `--json` for scripts. Nothing here imports the gateway's own
//! modules: the CLI is a client.

mod client;
mod show;
mod transfer;

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{json, Value};

pub use client::Connection;
use client::{CliError, Client};

/// Operator commands (beside `serve`).
#[derive(Subcommand)]
pub enum Command {
    /// The account's sessions.
    #[command(subcommand)]
    Sessions(Sessions),
    /// A session's events in seq order; with --follow, new ones as they are committed.
    Events(EventsArgs),
    /// Runs.
    #[command(subcommand)]
    Runs(Runs),
    /// Requests runs ended waiting on: list them, approve or reject one.
    #[command(subcommand)]
    Approvals(Approvals),
    /// Erasure of a user's or the whole account's data (hard deletes, audited).
    #[command(subcommand)]
    Data(Data),
    /// Writes a session's log to stdout (or --output): JSON Lines, which `tether import`
    /// reads, or a Markdown transcript.
    Export(ExportArgs),
    /// Stores a session exported by `tether export --format jsonl` into the account, with
    /// its seqs (ImportSession). A session id the account already has is refused.
    Import(ImportArgs),
    /// Webhook deliveries.
    #[command(subcommand)]
    Webhooks(Webhooks),
    /// Exits 0 when the gateway answers /readyz (for container health checks).
    Health {
        #[command(flatten)]
        connection: Connection,
    },
}

/// `tether sessions list`'s filters: ListSessions' parameters of the same names.
#[derive(clap::Args)]
pub struct ListFilter {
    /// Only sessions of this user id (ADK `user_id`).
    #[arg(long)]
    user_id: Option<String>,
    /// Only sessions of this agent (ADK `app_name`).
    #[arg(long)]
    agent_id: Option<String>,
    /// Only sessions whose latest run has this status (in_progress, completed, ...).
    #[arg(long)]
    status: Option<String>,
    /// Only sessions whose metadata has KEY=VALUE (repeatable: all must hold).
    #[arg(long, value_name = "KEY=VALUE")]
    metadata: Vec<String>,
    /// Only sessions with a message that has every word of TEXT.
    #[arg(long, value_name = "TEXT")]
    search: Option<String>,
    /// Created at or after / before this time (RFC 3339).
    #[arg(long)]
    created_after: Option<String>,
    #[arg(long)]
    created_before: Option<String>,
    /// Last active at or after / before this time (RFC 3339).
    #[arg(long)]
    active_after: Option<String>,
    #[arg(long)]
    active_before: Option<String>,
    /// Only archived sessions.
    #[arg(long, conflicts_with = "include_archived")]
    archived: bool,
    /// Archived sessions as well as active ones.
    #[arg(long)]
    include_archived: bool,
}

impl ListFilter {
    /// ListSessions' parameters for these filters (with the page), or the bad `--metadata`.
    fn params(&self, page: i64, page_size: i64) -> Result<serde_json::Value, CliError> {
        let mut metadata = serde_json::Map::new();
        for entry in &self.metadata {
            let (k, v) = entry.split_once('=').ok_or_else(|| {
                CliError::Failed(format!("--metadata {entry:?} is not KEY=VALUE"))
            })?;
            metadata.insert(k.to_owned(), json!(v));
        }
        let mut params = json!({
            "Page": page,
            "PageSize": page_size,
            "UserId": self.user_id,
            "AgentId": self.agent_id,
            "LastRunStatus": self.status,
            "Query": self.search,
            "CreatedAfter": self.created_after,
            "CreatedBefore": self.created_before,
            "ActiveAfter": self.active_after,
            "ActiveBefore": self.active_before,
            "Archived": self.archived,
            "IncludeArchived": self.include_archived,
        });
        if !metadata.is_empty() {
            params["Metadata"] = metadata.into();
        }
        // Unset filters are left out rather than sent as null.
        if let Some(map) = params.as_object_mut() {
            map.retain(|_, v| !v.is_null());
        }
        Ok(params)
    }
}

#[derive(Subcommand)]
pub enum Sessions {
    /// Sessions, most recently updated first.
    List {
        /// Page to show (1 is the most recent).
        #[arg(long, default_value_t = 1)]
        page: i64,
        /// Sessions per page (1-100).
        #[arg(long, default_value_t = 20)]
        page_size: i64,
        #[command(flatten)]
        filter: Box<ListFilter>,
        #[command(flatten)]
        connection: Connection,
    },
    /// One session: its runs and its conversation.
    Show {
        /// The session id.
        id: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Removes a session and everything of it for good (DeleteSession): refused while a
    /// run is in progress or forks of it exist.
    Delete {
        /// The session id.
        id: String,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Subcommand)]
pub enum Data {
    /// Removes every session whose events name this user id, with their forks
    /// (DeleteUserData).
    DeleteUser {
        /// The user id (as the ADK surface's `user_id`).
        user: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Removes everything of the account: sessions, uploads, workspace files
    /// (DeleteAccountData).
    DeleteAccount {
        /// The account id, repeated as a confirmation (it must be the API key's).
        account: String,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Subcommand)]
pub enum Runs {
    /// Cancels a running invocation (CancelRun); idempotent.
    Cancel {
        /// The invocation id (`x-invocation-id` of the run's response).
        invocation: String,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Subcommand)]
pub enum Approvals {
    /// Pending requests, oldest first (ListPendingApprovals).
    List {
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
        /// Only this agent's.
        #[arg(long)]
        agent: Option<String>,
        /// Requests to skip.
        #[arg(long, default_value_t = 0)]
        offset: i64,
        /// Requests to show (1-200).
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        connection: Connection,
    },
    /// Approves a request (ResolveApproval); the agent gets the answer as a new run.
    Approve(ResolveArgs),
    /// Rejects a request (ResolveApproval).
    Reject(ResolveArgs),
}

#[derive(Args)]
pub struct ResolveArgs {
    /// The session id.
    session: String,
    /// The request id (the agent's own, as `approvals list` shows it).
    request: String,
    /// Edited tool arguments, a JSON object.
    #[arg(long)]
    arguments: Option<String>,
    /// Why, for the log (and for the agent, when its protocol carries it).
    #[arg(long)]
    comment: Option<String>,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Subcommand)]
pub enum Webhooks {
    /// The account's webhook deliveries, newest first, with where each stands
    /// (ListWebhookDeliveries).
    Deliveries {
        /// Only events of this type (approval.requested, approval.resolved,
        /// run.completed, run.failed, session.idle).
        #[arg(long)]
        event: Option<String>,
        /// Only deliveries with this status (pending, delivered, failed).
        #[arg(long)]
        status: Option<String>,
        /// Only deliveries of this session.
        #[arg(long)]
        session: Option<String>,
        /// Deliveries to skip.
        #[arg(long, default_value_t = 0)]
        offset: i64,
        /// Deliveries to show (1-200).
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Args)]
pub struct EventsArgs {
    /// The session id.
    id: String,
    /// Only events after this seq.
    #[arg(long, default_value_t = 0)]
    after: i64,
    /// Keep printing events as they are committed (until interrupted).
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    /// One event per line, as the control API shows it: what `tether import` reads.
    Jsonl,
    /// The conversation, for people.
    Markdown,
}

#[derive(Args)]
pub struct ExportArgs {
    /// The session id.
    id: String,
    #[arg(long, value_enum, default_value = "jsonl")]
    format: Format,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    output: Option<std::path::PathBuf>,
    #[command(flatten)]
    connection: Connection,
}

#[derive(Args)]
pub struct ImportArgs {
    /// A file written by `tether export --format jsonl` (`-` reads stdin).
    file: std::path::PathBuf,
    #[command(flatten)]
    connection: Connection,
}

/// Runs an operator command; errors are one line on stderr and exit code 1.
pub fn run(command: Command) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match execute(command, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = out.flush();
            eprintln!("tether: {e}");
            ExitCode::FAILURE
        }
    }
}

fn execute(command: Command, out: &mut impl Write) -> Result<(), CliError> {
    match command {
        Command::Sessions(Sessions::List {
            page,
            page_size,
            filter,
            connection,
        }) => {
            let client = Client::new(&connection);
            let data = client.call("ListSessions", &filter.params(page, page_size)?)?;
            emit(out, &connection, &data, show::sessions_table)
        }
        Command::Sessions(Sessions::Show { id, connection }) => {
            let client = Client::new(&connection);
            let events = all_events(&client, &id, 0)?;
            let summary = show::session_summary(&id, &events);
            emit(out, &connection, &summary, show::session_text)
        }
        Command::Sessions(Sessions::Delete { id, connection }) => removal(
            out,
            &connection,
            "DeleteSession",
            json!({ "SessionId": id }),
        ),
        Command::Data(Data::DeleteUser { user, connection }) => removal(
            out,
            &connection,
            "DeleteUserData",
            json!({ "UserId": user }),
        ),
        Command::Data(Data::DeleteAccount {
            account,
            connection,
        }) => removal(
            out,
            &connection,
            "DeleteAccountData",
            json!({ "AccountId": account }),
        ),
        Command::Events(args) => events(args, out),
        Command::Runs(Runs::Cancel {
            invocation,
            connection,
        }) => {
            let client = Client::new(&connection);
            let data = client.call("CancelRun", &json!({ "InvocationId": invocation }))?;
            if data["Found"] == json!(false) {
                return Err(CliError::Failed(format!(
                    "no invocation {invocation:?} in this account"
                )));
            }
            emit(out, &connection, &data, |data| {
                format!(
                    "{invocation}: {} ({})\n",
                    data["Status"].as_str().unwrap_or("?"),
                    data["RunnerCancelStatus"].as_str().unwrap_or("?")
                )
            })
        }
        Command::Approvals(Approvals::List {
            session,
            agent,
            offset,
            limit,
            connection,
        }) => {
            let client = Client::new(&connection);
            let data = client.call(
                "ListPendingApprovals",
                &json!({ "SessionId": session, "AgentId": agent, "Offset": offset, "Limit": limit }),
            )?;
            emit(out, &connection, &data, show::approvals_table)
        }
        Command::Approvals(Approvals::Approve(args)) => resolve(out, args, "approve"),
        Command::Approvals(Approvals::Reject(args)) => resolve(out, args, "reject"),
        Command::Export(args) => {
            let client = Client::new(&args.connection);
            let events = all_events(&client, &args.id, 0)?;
            let text = match args.format {
                Format::Jsonl => transfer::jsonl(&events),
                Format::Markdown => show::markdown(&args.id, client.base(), &events),
            };
            match &args.output {
                Some(path) => std::fs::write(path, text)
                    .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display()))),
                None => write(out, &text),
            }
        }
        Command::Import(args) => {
            let client = Client::new(&args.connection);
            let (session_id, events) = transfer::read_export(&args.file)?;
            let data = client.call(
                "ImportSession",
                &json!({ "SessionId": session_id, "Events": events }),
            )?;
            emit(out, &args.connection, &data, |data| {
                format!(
                    "imported session {} into {}: {} events, last seq {}\n",
                    data["SessionId"].as_str().unwrap_or("?"),
                    client.base(),
                    data["ImportedEvents"],
                    data["LastSeqId"]
                )
            })
        }
        Command::Webhooks(Webhooks::Deliveries {
            event,
            status,
            session,
            offset,
            limit,
            connection,
        }) => {
            let data = Client::new(&connection).call(
                "ListWebhookDeliveries",
                &json!({ "EventType": event, "Status": status, "SessionId": session,
                         "Offset": offset, "Limit": limit }),
            )?;
            emit(out, &connection, &data, show::deliveries_table)
        }
        Command::Health { connection } => {
            let data = Client::new(&connection).ready()?;
            emit(out, &connection, &data, |_| "ready\n".to_owned())
        }
    }
}

/// `tether approvals approve|reject`: the resolution and the answer's run.
fn resolve(out: &mut impl Write, args: ResolveArgs, decision: &str) -> Result<(), CliError> {
    let arguments = match &args.arguments {
        None => Value::Null,
        Some(text) => serde_json::from_str(text)
            .map_err(|e| CliError::Failed(format!("--arguments is not JSON: {e}")))?,
    };
    let data = Client::new(&args.connection).call(
        "ResolveApproval",
        &json!({
            "SessionId": args.session,
            "RequestId": args.request,
            "Decision": decision,
            "Arguments": arguments,
            "Comment": args.comment,
        }),
    )?;
    emit(out, &args.connection, &data, |d| {
        format!(
            "{} {}: {}; the answer runs as {} (invocation {})\n",
            d["SessionId"].as_str().unwrap_or("?"),
            d["RequestId"].as_str().unwrap_or("?"),
            d["Decision"].as_str().unwrap_or("?"),
            d["AnswerRunId"].as_str().unwrap_or("?"),
            d["AnswerInvocationId"].as_str().unwrap_or("?"),
        )
    })
}

/// A hard delete: the audit row's summary (or all of it with `--json`).
fn removal(
    out: &mut impl Write,
    connection: &Connection,
    action: &str,
    params: Value,
) -> Result<(), CliError> {
    let data = Client::new(connection).call(action, &params)?;
    emit(out, connection, &data, |d| {
        format!(
            "deleted {} session(s) ({} events, {} bytes; {} attachment(s), {} bytes); audit {}\n",
            d["Sessions"],
            d["Events"],
            d["EventBytes"],
            d["Attachments"],
            d["AttachmentBytes"],
            d["DeletionId"].as_str().unwrap_or("?")
        )
    })
}

/// `tether events`: the log after `--after`, then (with `--follow`) new events as they
/// are committed, resubscribing whenever the gateway closes a quiet stream.
fn events(args: EventsArgs, out: &mut impl Write) -> Result<(), CliError> {
    let client = Client::new(&args.connection);
    let json = args.connection.json;
    let mut print = |event: &Value| {
        let line = match json {
            true => format!("{event}\n"),
            false => show::event_line(event),
        };
        write(out, &line)
    };
    let mut last = args.after;
    for event in all_events(&client, &args.id, args.after)? {
        last = event["SeqId"].as_i64().unwrap_or(last);
        print(&event)?;
    }
    if args.follow {
        loop {
            last = client.follow(&args.id, last, &mut print)?;
        }
    }
    Ok(())
}

/// Every event of a session after `after_seq`, page by page (ListSessionEvents).
fn all_events(client: &Client, session_id: &str, after_seq: i64) -> Result<Vec<Value>, CliError> {
    const PAGE: i64 = 500;
    let mut events = Vec::new();
    let mut offset = after_seq;
    loop {
        let data = client.call(
            "ListSessionEvents",
            &json!({ "SessionId": session_id, "Offset": offset, "Limit": PAGE }),
        )?;
        let page = data["Events"].as_array().cloned().unwrap_or_default();
        // The cursor is a position: the seq, except in a fork, whose inherited events
        // (the parent's seqs) come first.
        let last = page
            .last()
            .and_then(|e| e["Position"].as_i64().or_else(|| e["SeqId"].as_i64()));
        events.extend(page);
        match last {
            Some(position) if position < data["Total"].as_i64().unwrap_or(0) => offset = position,
            _ => return Ok(events),
        }
    }
}

/// `data` as JSON with `--json`, else as `human` renders it.
fn emit(
    out: &mut impl Write,
    connection: &Connection,
    data: &Value,
    human: impl FnOnce(&Value) -> String,
) -> Result<(), CliError> {
    let text = match connection.json {
        true => format!("{data:#}\n"),
        false => human(data),
    };
    write(out, &text)
}

fn write(out: &mut impl Write, text: &str) -> Result<(), CliError> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Failed(format!("writing the output: {e}")))
}
