//! The stores behind the [`Store`](crate::Store) trait (SQLite, PostgreSQL, and
//! PostgreSQL behind the outage journal), what they share, and the factory that builds
//! one from its configuration.

mod claims;
pub mod factory;
pub mod journal;
mod plan;
pub mod postgres;
mod sql;
pub mod sqlite;
