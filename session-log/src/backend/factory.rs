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

/// The store `url` names as errors and logs may name it: the SQLite path, or PostgreSQL's
/// host, port and database — never the password (nor the user, which an error does not
/// need).
pub fn describe(url: &str) -> String {
    let rest = match Location::of(url) {
        Location::Sqlite(path) => return super::sqlite::name(path),
        Location::Postgres(url) => url.split_once("://").map_or(url, |(_, rest)| rest),
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = match host_port {
        "" => "localhost:5432".to_owned(),
        h if h.contains(':') && !h.ends_with(']') => h.to_owned(),
        h => format!("{h}:5432"),
    };
    let database = tail
        .strip_prefix('/')
        .and_then(|t| t.split('?').next())
        .filter(|d| !d.is_empty());
    super::postgres::name(&host_port, database)
}

/// The local file a SQLite store URL names (`None` for PostgreSQL and `:memory:`): where
/// its free space is watched.
pub fn local_file(url: &str) -> Option<std::path::PathBuf> {
    match Location::of(url) {
        Location::Postgres(_) => None,
        Location::Sqlite(path) => {
            let path = path.split('?').next().unwrap_or(path);
            (!path.is_empty() && !path.starts_with(":memory:")).then(|| path.into())
        }
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

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn stores_are_named_without_their_password() {
        assert_eq!(
            describe("postgres://tether:s3cret@db.internal:6543/log?sslmode=require"),
            "PostgreSQL store at db.internal:6543 (database log)"
        );
        assert_eq!(
            describe("postgresql://u:p@db/log"),
            "PostgreSQL store at db:5432 (database log)"
        );
        assert_eq!(
            describe("postgres://[::1]/x"),
            "PostgreSQL store at [::1]:5432 (database x)"
        );
        assert_eq!(
            describe("postgres:///x"),
            "PostgreSQL store at localhost:5432 (database x)"
        );
        assert_eq!(describe("sqlite:/var/t.db"), "SQLite store /var/t.db");
        assert_eq!(
            describe(".tether/s.sqlite"),
            "SQLite store .tether/s.sqlite"
        );
    }
}
