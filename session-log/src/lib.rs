//! Tether's durable session log: the event model, the `Store` trait with its SQLite and
//! PostgreSQL implementations, the batching writer that commits events before anyone may
//! see them, and the hub that broadcasts committed events to live subscribers.

mod backend;
pub mod branch;
pub mod checkpoints;
pub mod event;
pub mod health;
pub mod histogram;
pub mod history;
pub mod hub;
pub mod import;
pub mod outbox;
pub mod removal;
pub mod retention;
pub mod store;
pub mod tail;
pub mod writer;

// The backends live in `backend/`; their modules keep the paths they had at the crate root.
pub use backend::factory::{describe, local_file, open, open_journaled};
pub use backend::{journal, postgres, sqlite};
pub use event::{Event, EventType, ForkPoint, NewEvent, RunStatus, Seq, Session};
pub use health::{Health, Unwritable};
pub use history::{History, Lineage};
pub use hub::{BeforeAppend, Hub, Subscription};
pub use removal::{Deletion, Removal, Removed, Scope};
pub use store::{
    metadata_key_is_valid, search_words, Appended, Approval, ApprovalFilter, ArchivedFilter,
    Attachment, Claim, Claimed, Decision, EventQuery, Fault, Feedback, IdempotentRun, Imported,
    Invocation, Lease, Rating, Renewed, SessionFilter, Store, StoreError, Usage,
};
pub use writer::{WriteError, Writer, WriterConfig};
