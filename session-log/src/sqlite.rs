//! sqlite backend of the session log (to be implemented).

use async_trait::async_trait;

use crate::event::{Event, NewEvent, Session};
use crate::store::{EventQuery, Invocation, Store, StoreError};

pub struct SqliteStore;

impl SqliteStore {
    pub async fn open(_path: &str) -> Result<Self, StoreError> {
        todo!()
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        todo!()
    }
    async fn append(&self, _batch: &[NewEvent]) -> Result<Vec<Option<Event>>, StoreError> {
        todo!()
    }
    async fn session(&self, _a: &str, _s: &str) -> Result<Option<Session>, StoreError> {
        todo!()
    }
    async fn list_sessions(
        &self,
        _a: &str,
        _o: i64,
        _l: i64,
    ) -> Result<(Vec<Session>, i64), StoreError> {
        todo!()
    }
    async fn events(&self, _q: &EventQuery) -> Result<Vec<Event>, StoreError> {
        todo!()
    }
    async fn count_events(&self, _a: &str, _s: &str) -> Result<i64, StoreError> {
        todo!()
    }
    async fn run(&self, _a: &str, _r: &str) -> Result<Option<Invocation>, StoreError> {
        todo!()
    }
    async fn invocation(&self, _a: &str, _i: &str) -> Result<Option<Invocation>, StoreError> {
        todo!()
    }
    async fn open_invocations(&self) -> Result<Vec<Invocation>, StoreError> {
        todo!()
    }
}
