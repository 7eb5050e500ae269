//! Tether's durable session log: the event model, the `Store` trait with its SQLite and
//! PostgreSQL implementations, the batching writer that commits events before anyone may
//! see them, and the hub that broadcasts committed events to live subscribers.

pub mod checkpoints;
mod claims;
pub mod event;
pub mod histogram;
pub mod hub;
pub mod journal;
pub mod postgres;
mod sql;
pub mod sqlite;
pub mod store;
pub mod tail;
pub mod writer;

pub use event::{Event, EventType, NewEvent, RunStatus, Seq, Session};
pub use hub::{BeforeAppend, Hub, Subscription};
pub use store::{
    open, Appended, Attachment, Claim, Claimed, EventQuery, Invocation, Lease, Renewed, Store,
    StoreError,
};
pub use writer::{WriteError, Writer, WriterConfig};
