//! The SQL of the session listing (ListSessions, the console's search, `tether sessions
//! list`), written once for both stores: an account's sessions through a
//! [`SessionFilter`], a page of them most recently updated first and the count of all.
//!
//! Every filter reads a column of `sessions` (kept by triggers on `events`, migrations
//! `session_search`) or the message text index (PostgreSQL's `message_text`; SQLite reads
//! the message events), so a listing never reads a session's
//! events to decide whether it matches.

use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

use super::sql::{self, select_sessions};
use crate::event::Session;
use crate::store::{search_words, ArchivedFilter, SessionFilter, StoreError};

/// What the dialects write differently.
pub(crate) struct Dialect {
    /// The conditions of active sessions, of sessions a client has not deleted, and of
    /// archived ones among those.
    listed: &'static str,
    not_deleted: &'static str,
    archived: &'static str,
    /// Opens the condition that a metadata entry (key, then value, bound after it) is
    /// the session's: the store's JSON read of `s.metadata_json`.
    metadata_key: fn(&str) -> String,
    metadata_value: &'static str,
    /// The condition (` AND ...`) that one of the session's messages has every one of the
    /// search's words (the account is bound as `$1`), binding what it needs.
    text_condition: fn(&[String], &mut Vec<Arg>) -> String,
}

pub(crate) const SQLITE: Dialect = Dialect {
    listed: " AND s.archived_at IS NULL AND s.client_deleted = 0",
    not_deleted: " AND s.client_deleted = 0",
    archived: " AND s.archived_at IS NOT NULL AND s.client_deleted = 0",
    // A JSON path naming the key as one member (quoted); keys with `"` are refused at
    // the edge (`metadata_key_is_valid`).
    metadata_key: |key| format!("$.\"{key}\""),
    metadata_value: "json_extract(s.metadata_json, ",
    // No word index (migration `session_search` says why): the account's message events
    // are read, each kept if its text holds every word (lowercased, as `search_words`
    // makes them) as a whole word, between characters other than ASCII letters and
    // digits, and its item was not deleted.
    text_condition: |words, args| {
        let q = bind(
            args,
            Arg::Text(serde_json::to_string(words).expect("strings serialize")),
        );
        format!(
            " AND s.session_id IN (SELECT e.session_id FROM events AS e \
             WHERE e.account_id = $1 AND e.event_type = 'message' \
             AND NOT EXISTS (SELECT 1 FROM json_each({q}) AS w \
             WHERE ' ' || lower(json_extract(e.content_json, '$.text')) || ' ' \
             NOT GLOB '*[^a-z0-9]' || w.value || '[^a-z0-9]*') \
             AND NOT EXISTS (SELECT 1 FROM events AS d WHERE d.account_id = e.account_id \
             AND d.session_id = e.session_id AND d.event_type = 'item_deleted' \
             AND json_extract(d.content_json, '$.seq') = e.seq))"
        )
    },
};

pub(crate) const POSTGRES: Dialect = Dialect {
    listed: " AND s.archived_at IS NULL AND NOT s.client_deleted",
    not_deleted: " AND NOT s.client_deleted",
    archived: " AND s.archived_at IS NOT NULL AND NOT s.client_deleted",
    metadata_key: |key| key.to_owned(),
    metadata_value: "(s.metadata_json ->> ",
    // The matching sessions are collected first (an array, computed once) and then looked
    // up by key. As `IN (subquery)` the planner, which has one estimate for every word
    // its statistics do not list, walked the account's sessions newest first probing the
    // index with each: quick for a common word, every session for a rare one (306 ms
    // against 1 ms at 100,000 sessions).
    text_condition: |words, args| {
        let q = bind(args, Arg::Text(words.join(" ")));
        format!(
            " AND s.session_id = ANY (ARRAY(SELECT t.session_id FROM message_text AS t \
             WHERE t.account_id = $1 AND t.terms @@ plainto_tsquery('simple', {q})))"
        )
    },
};

/// The listing's order: most recently updated first, ties by id.
const ORDER: &str = "s.updated_at DESC, s.session_id";

/// A value a listing binds.
enum Arg {
    Text(String),
    Time(DateTime<Utc>),
    Int(i64),
}

/// The listing's `WHERE` clause for `account_id` and `filter`, with `$n` placeholders,
/// and what they bind, in order.
fn conditions(dialect: &Dialect, account_id: &str, filter: &SessionFilter) -> (String, Vec<Arg>) {
    let mut args = vec![Arg::Text(account_id.to_owned())];
    let mut sql = String::from("WHERE s.account_id = $1");
    // Written as `sessions_listed` (migrations `session_search`) writes its condition, so
    // that the default listing reads that index alone.
    sql.push_str(match filter.archived {
        ArchivedFilter::Exclude => dialect.listed,
        ArchivedFilter::Include => dialect.not_deleted,
        ArchivedFilter::Only => dialect.archived,
    });
    let texts = [
        (" AND s.user_id = ", filter.user_id.clone()),
        (" AND s.agent_id = ", filter.agent_id.clone()),
        (
            " AND s.last_run_status = ",
            filter.last_run_status.map(|s| s.as_str().to_owned()),
        ),
    ];
    for (condition, value) in texts {
        if let Some(value) = value {
            let n = bind(&mut args, Arg::Text(value));
            sql.push_str(condition);
            sql.push_str(&n);
        }
    }
    let times = [
        (" AND s.created_at >= ", filter.created_after),
        (" AND s.created_at < ", filter.created_before),
        (" AND s.updated_at >= ", filter.active_after),
        (" AND s.updated_at < ", filter.active_before),
    ];
    for (condition, at) in times {
        if let Some(at) = at {
            let n = bind(&mut args, Arg::Time(at));
            sql.push_str(condition);
            sql.push_str(&n);
        }
    }
    for (key, value) in &filter.metadata {
        let k = bind(&mut args, Arg::Text((dialect.metadata_key)(key)));
        let v = bind(&mut args, Arg::Text(value.clone()));
        sql.push_str(&format!(" AND {}{k}) = {v}", dialect.metadata_value));
    }
    if let Some(text) = &filter.text {
        let words = search_words(text);
        if !words.is_empty() {
            sql.push_str(&(dialect.text_condition)(&words, &mut args));
        }
    }
    (sql, args)
}

/// Adds `arg` to `args`: its placeholder.
fn bind(args: &mut Vec<Arg>, arg: Arg) -> String {
    args.push(arg);
    format!("${}", args.len())
}

/// `text` with `args` bound.
fn bound<'q, DB>(text: &'q str, args: &'q [Arg]) -> sql::Statement<'q, DB>
where
    DB: Database,
    &'q str: Encode<'q, DB> + Type<DB>,
    i64: Encode<'q, DB> + Type<DB>,
    DateTime<Utc>: Encode<'q, DB> + Type<DB>,
{
    args.iter().fold(sqlx::query(text), |q, arg| match arg {
        Arg::Text(s) => q.bind(s.as_str()),
        Arg::Time(t) => q.bind(*t),
        Arg::Int(n) => q.bind(*n),
    })
}

/// A page of the account's sessions that `filter` lets through, most recently updated
/// first (ties by id), and the count of all of them.
pub(crate) async fn list<DB>(
    pool: &sqlx::Pool<DB>,
    dialect: &Dialect,
    account_id: &str,
    filter: &SessionFilter,
    offset: i64,
    limit: i64,
) -> Result<(Vec<Session>, i64), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    for<'q> String: Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    for<'q> DateTime<Utc>: Encode<'q, DB> + Type<DB> + Decode<'q, DB>,
    &'static str: ColumnIndex<DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    let (filter_sql, mut args) = conditions(dialect, account_id, filter);
    let count_sql = format!("SELECT COUNT(*) FROM sessions AS s {filter_sql}");
    let total: i64 = bound::<DB>(&count_sql, &args)
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    args.push(Arg::Int(limit.max(0)));
    args.push(Arg::Int(offset.max(0)));
    let page_sql = format!(
        "{}{filter_sql} ORDER BY {ORDER} LIMIT ${} OFFSET ${}",
        select_sessions!(),
        args.len() - 1,
        args.len()
    );
    let rows = bound::<DB>(&page_sql, &args).fetch_all(pool).await?;
    let sessions = rows
        .iter()
        .map(sql::session_from_row)
        .collect::<Result<_, _>>()?;
    Ok((sessions, total))
}
