//! Builds the store a configuration names: the one place that knows which backends
//! exist, so the `Store` trait and its users need not.

use std::sync::Arc;

use super::journal::{self, JournalConfig};
use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use crate::store::{Store, StoreError};

/// The database a store URL names.
enum Location<'a> {
    Postgres(&'a str),
    /// A file path, or `:memory:`.
    Sqlite(&'a str),
}

impl<'a> Location<'a> {
    /// `postgres://…` or `postgresql://…` for PostgreSQL, `sqlite:…` or a plain file path
    /// for SQLite.
    fn of(url: &'a str) -> Self {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Location::Postgres(url);
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        Location::Sqlite(path)
    }
}

/// Opens (creating if needed) and migrates the store that `url` names: `postgres://…` or
/// `postgresql://…` for PostgreSQL, `sqlite:…` or a plain file path for SQLite.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    let store: Arc<dyn Store> = match Location::of(url) {
        Location::Postgres(url) => Arc::new(PgStore::connect(url).await?),
        Location::Sqlite(path) => Arc::new(SqliteStore::open(path).await?),
    };
    Ok(store)
}

/// [`open`], except that PostgreSQL comes behind a local journal at `journal_path`, which
/// takes commits while PostgreSQL is unreachable (see [`journal`]). A SQLite store needs
/// none: it is local already.
pub async fn open_journaled(
    url: &str,
    journal_path: &str,
    config: JournalConfig,
) -> Result<Arc<dyn Store>, StoreError> {
    let store: Arc<dyn Store> = match Location::of(url) {
        Location::Postgres(url) => journal::open(url, journal_path, config).await?,
        Location::Sqlite(path) => Arc::new(SqliteStore::open(path).await?),
    };
    Ok(store)
}
