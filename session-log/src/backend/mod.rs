//! The stores behind the [`Store`](crate::Store) trait (SQLite, PostgreSQL, and
//! PostgreSQL behind the outage journal), what they share, and the factory that builds
//! one from its configuration.
//!
//! `plan`, `sql`, `approvals`, `feedback`, `idempotency`, `outbox`, `removal`, `archive`, `listing` and `retention` are shared by both dialects and import no store; `sqlite` and
//! `postgres` import only those (and `claims`); `journal` builds on both stores, and
//! `factory` on all three. Nothing here imports `factory` or `journal` back.

mod approvals;
mod archive;
mod claims;
pub mod factory;
mod feedback;
mod idempotency;
pub mod journal;
pub(crate) mod listing;
mod outbox;
mod plan;
pub mod postgres;
mod removal;
mod retention;
mod sql;
pub mod sqlite;
