//! The core runtime: the one tokio runtime that owns the database pool, the writer and
//! every run. Pingora serves each service on runtimes of its own; anything that touches
//! the store or drives a run is handed to this runtime, so connections and tasks never
//! outlive the runtime they were made on.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use session_log::{
    Appended, Event, EventQuery, Imported, Invocation, NewEvent, Session, SessionFilter, Store,
    StoreError,
};
use tokio::runtime::Handle;

/// Runs `fut` on the core runtime and waits for it from whichever runtime calls.
pub async fn on_core<F, T>(core: &Handle, fut: F) -> T
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    match core.spawn(fut).await {
        Ok(value) => value,
        // Only a panic inside `fut` gets here; keep its message.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A `Store` usable from any runtime: every call runs on the core runtime.
pub struct CoreStore {
    inner: Arc<dyn Store>,
    core: Handle,
}

impl CoreStore {
    pub fn shared(inner: Arc<dyn Store>, core: Handle) -> Arc<dyn Store> {
        Arc::new(CoreStore { inner, core })
    }
}

macro_rules! delegate {
    ($self:ident, |$s:ident| $call:expr) => {{
        let $s = $self.inner.clone();
        on_core(&$self.core, async move { $call.await }).await
    }};
}

#[async_trait]
impl Store for CoreStore {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        delegate!(self, |s| s.ping())
    }

    async fn close(&self) {
        delegate!(self, |s| s.close())
    }

    async fn append(&self, batch: &[NewEvent]) -> Result<Vec<Option<Event>>, StoreError> {
        let batch = batch.to_vec();
        delegate!(self, |s| s.append(&batch))
    }

    async fn append_seqs(&self, batch: &mut [NewEvent]) -> Result<Appended, StoreError> {
        let mut owned = batch.to_vec();
        let (appended, owned) = delegate!(self, |s| async move {
            let appended = s.append_seqs(&mut owned).await;
            (appended, owned)
        });
        // The store may have rewritten what it could not keep as given.
        for (event, stored) in batch.iter_mut().zip(owned) {
            *event = stored;
        }
        appended
    }

    async fn session(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<Session>, StoreError> {
        let (a, id) = (account_id.to_owned(), session_id.to_owned());
        delegate!(self, |s| s.session(&a, &id))
    }

    async fn list_sessions(
        &self,
        account_id: &str,
        filter: &SessionFilter,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<Session>, i64), StoreError> {
        let (a, f) = (account_id.to_owned(), filter.clone());
        delegate!(self, |s| s.list_sessions(&a, &f, offset, limit))
    }

    async fn events(&self, query: &EventQuery) -> Result<Vec<Event>, StoreError> {
        let q = query.clone();
        delegate!(self, |s| s.events(&q))
    }

    async fn migrated_at(&self, description: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        let d = description.to_owned();
        delegate!(self, |s| s.migrated_at(&d))
    }

    async fn count_events(&self, account_id: &str, session_id: &str) -> Result<i64, StoreError> {
        let (a, id) = (account_id.to_owned(), session_id.to_owned());
        delegate!(self, |s| s.count_events(&a, &id))
    }

    async fn create_session(&self, first: &NewEvent) -> Result<Option<Event>, StoreError> {
        let first = first.clone();
        delegate!(self, |s| s.create_session(&first))
    }

    async fn checkpoint_event(
        &self,
        account_id: &str,
        session_id: &str,
        checkpoint_id: Option<&str>,
        until_seq: Option<i64>,
    ) -> Result<Option<Event>, StoreError> {
        let (a, id) = (account_id.to_owned(), session_id.to_owned());
        let checkpoint = checkpoint_id.map(str::to_owned);
        delegate!(self, |s| s.checkpoint_event(
            &a,
            &id,
            checkpoint.as_deref(),
            until_seq
        ))
    }

    async fn run(&self, account_id: &str, run_id: &str) -> Result<Option<Invocation>, StoreError> {
        let (a, id) = (account_id.to_owned(), run_id.to_owned());
        delegate!(self, |s| s.run(&a, &id))
    }

    async fn invocation(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let (a, id) = (account_id.to_owned(), invocation_id.to_owned());
        delegate!(self, |s| s.invocation(&a, &id))
    }

    async fn invocation_known_elsewhere(
        &self,
        account_id: &str,
        invocation_ids: &[String],
    ) -> Result<Option<String>, StoreError> {
        let (a, ids) = (account_id.to_owned(), invocation_ids.to_vec());
        delegate!(self, |s| s.invocation_known_elsewhere(&a, &ids))
    }

    async fn set_agent_ref(
        &self,
        account_id: &str,
        invocation_id: &str,
        agent_ref: &str,
    ) -> Result<(), StoreError> {
        let (a, id, r) = (
            account_id.to_owned(),
            invocation_id.to_owned(),
            agent_ref.to_owned(),
        );
        delegate!(self, |s| s.set_agent_ref(&a, &id, &r))
    }

    async fn invocation_by_agent_ref(
        &self,
        account_id: &str,
        agent_ref: &str,
    ) -> Result<Option<Invocation>, StoreError> {
        let (a, r) = (account_id.to_owned(), agent_ref.to_owned());
        delegate!(self, |s| s.invocation_by_agent_ref(&a, &r))
    }

    async fn open_invocations(&self) -> Result<Vec<Invocation>, StoreError> {
        delegate!(self, |s| s.open_invocations())
    }

    async fn claim(
        &self,
        claim: &session_log::Claim<'_>,
    ) -> Result<session_log::Claimed, StoreError> {
        let (a, sid, r, i, o, lease, fresh) = (
            claim.account_id.to_owned(),
            claim.session_id.to_owned(),
            claim.run_id.to_owned(),
            claim.invocation_id.to_owned(),
            claim.owner.to_owned(),
            claim.lease,
            claim.fresh,
        );
        delegate!(self, |s| s.claim(&session_log::Claim {
            account_id: &a,
            session_id: &sid,
            run_id: &r,
            invocation_id: &i,
            owner: &o,
            lease,
            fresh,
        }))
    }

    async fn renew_leases(
        &self,
        owner: &str,
        invocation_ids: &[String],
        lease: std::time::Duration,
    ) -> Result<Vec<session_log::Renewed>, StoreError> {
        let (o, ids) = (owner.to_owned(), invocation_ids.to_vec());
        delegate!(self, |s| s.renew_leases(&o, &ids, lease))
    }

    async fn abandoned_invocations(
        &self,
        restarted_owner: Option<&str>,
    ) -> Result<Vec<Invocation>, StoreError> {
        let o = restarted_owner.map(str::to_owned);
        delegate!(self, |s| s.abandoned_invocations(o.as_deref()))
    }

    async fn lease(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<Option<session_log::Lease>, StoreError> {
        let (a, id) = (account_id.to_owned(), invocation_id.to_owned());
        delegate!(self, |s| s.lease(&a, &id))
    }

    async fn request_cancel(
        &self,
        account_id: &str,
        invocation_id: &str,
    ) -> Result<bool, StoreError> {
        let (a, id) = (account_id.to_owned(), invocation_id.to_owned());
        delegate!(self, |s| s.request_cancel(&a, &id))
    }

    async fn notify(&self, channel: &str, payloads: &[String]) -> Result<(), StoreError> {
        let (c, p) = (channel.to_owned(), payloads.to_vec());
        delegate!(self, |s| s.notify(&c, &p))
    }

    async fn import_session(&self, events: &[Event]) -> Result<Imported, StoreError> {
        let events = events.to_vec();
        delegate!(self, |s| s.import_session(&events))
    }

    async fn put_attachment(&self, attachment: &session_log::Attachment) -> Result<(), StoreError> {
        let a = attachment.clone();
        delegate!(self, |s| s.put_attachment(&a))
    }

    async fn attachment(
        &self,
        account_id: &str,
        file_id: &str,
    ) -> Result<Option<session_log::Attachment>, StoreError> {
        let (a, id) = (account_id.to_owned(), file_id.to_owned());
        delegate!(self, |s| s.attachment(&a, &id))
    }

    async fn claim_idempotency_key(
        &self,
        record: &session_log::IdempotentRun,
        since: chrono::DateTime<chrono::Utc>,
        replacing: Option<&str>,
    ) -> Result<Option<session_log::IdempotentRun>, StoreError> {
        let (r, rep) = (record.clone(), replacing.map(str::to_owned));
        delegate!(self, |s| s.claim_idempotency_key(&r, since, rep.as_deref()))
    }

    async fn release_idempotency_key(
        &self,
        account_id: &str,
        key: &str,
        run_id: &str,
    ) -> Result<(), StoreError> {
        let (a, k, r) = (account_id.to_owned(), key.to_owned(), run_id.to_owned());
        delegate!(self, |s| s.release_idempotency_key(&a, &k, &r))
    }

    async fn put_feedback(&self, feedback: &session_log::Feedback) -> Result<(), StoreError> {
        let f = feedback.clone();
        delegate!(self, |s| s.put_feedback(&f))
    }

    async fn list_feedback(
        &self,
        account_id: &str,
        session_id: Option<&str>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<session_log::Feedback>, i64), StoreError> {
        let (a, sid) = (account_id.to_owned(), session_id.map(str::to_owned));
        delegate!(self, |s| s.list_feedback(&a, sid.as_deref(), offset, limit))
    }

    async fn put_approval(&self, approval: &session_log::Approval) -> Result<(), StoreError> {
        let a = approval.clone();
        delegate!(self, |s| s.put_approval(&a))
    }

    async fn list_pending_approvals(
        &self,
        account_id: &str,
        filter: session_log::ApprovalFilter<'_>,
        offset: i64,
        limit: i64,
    ) -> Result<(Vec<session_log::Approval>, i64), StoreError> {
        let a = account_id.to_owned();
        let (sid, agent) = (
            filter.session_id.map(str::to_owned),
            filter.agent_id.map(str::to_owned),
        );
        delegate!(self, |s| {
            let filter = session_log::ApprovalFilter {
                session_id: sid.as_deref(),
                agent_id: agent.as_deref(),
            };
            s.list_pending_approvals(&a, filter, offset, limit)
        })
    }

    async fn approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
    ) -> Result<Option<session_log::Approval>, StoreError> {
        let (a, sid, rid) = (
            account_id.to_owned(),
            session_id.to_owned(),
            request_id.to_owned(),
        );
        delegate!(self, |s| s.approval(&a, &sid, &rid))
    }

    async fn resolve_approval(
        &self,
        account_id: &str,
        session_id: &str,
        request_id: &str,
        decision: session_log::Decision,
        resolution: &serde_json::Value,
        at: DateTime<Utc>,
    ) -> Result<Option<session_log::Approval>, StoreError> {
        let (a, sid, rid) = (
            account_id.to_owned(),
            session_id.to_owned(),
            request_id.to_owned(),
        );
        let resolution = resolution.clone();
        delegate!(self, |s| s.resolve_approval(
            &a,
            &sid,
            &rid,
            decision,
            &resolution,
            at
        ))
    }

    async fn drop_pending_approvals(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        let (a, sid) = (account_id.to_owned(), session_id.to_owned());
        delegate!(self, |s| s.drop_pending_approvals(&a, &sid))
    }

    async fn resolve_expired_approvals(
        &self,
        now: DateTime<Utc>,
        decision: session_log::Decision,
    ) -> Result<Vec<session_log::Approval>, StoreError> {
        delegate!(self, |s| s.resolve_expired_approvals(now, decision))
    }

    async fn set_archived(
        &self,
        account_id: &str,
        session_id: &str,
        at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, StoreError> {
        let (a, id) = (account_id.to_owned(), session_id.to_owned());
        delegate!(self, |s| s.set_archived(&a, &id, at))
    }

    async fn archived_at(
        &self,
        account_id: &str,
        session_id: &str,
    ) -> Result<Option<chrono::DateTime<chrono::Utc>>, StoreError> {
        let (a, id) = (account_id.to_owned(), session_id.to_owned());
        delegate!(self, |s| s.archived_at(&a, &id))
    }

    async fn usage(&self, account_id: &str) -> Result<session_log::Usage, StoreError> {
        let a = account_id.to_owned();
        delegate!(self, |s| s.usage(&a))
    }

    async fn claim_sweep(
        &self,
        owner: &str,
        lease: std::time::Duration,
    ) -> Result<bool, StoreError> {
        let owner = owner.to_owned();
        delegate!(self, |s| s.claim_sweep(&owner, lease))
    }

    async fn idle_sessions(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<(String, String, chrono::DateTime<chrono::Utc>)>, StoreError> {
        delegate!(self, |s| s.idle_sessions(before, offset, limit))
    }

    async fn prune_tombstones(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<u64, StoreError> {
        delegate!(self, |s| s.prune_tombstones(before))
    }

    fn route_webhooks(&self, routes: Vec<session_log::outbox::Route>) {
        self.inner.route_webhooks(routes)
    }

    async fn claim_webhook_deliveries(
        &self,
        endpoint: &str,
        owner: &str,
        lease: std::time::Duration,
        limit: i64,
    ) -> Result<Vec<session_log::outbox::Claimed>, StoreError> {
        let (e, o) = (endpoint.to_owned(), owner.to_owned());
        delegate!(self, |s| s.claim_webhook_deliveries(&e, &o, lease, limit))
    }

    async fn release_webhook_leases(&self, owner: &str) -> Result<(), StoreError> {
        let o = owner.to_owned();
        delegate!(self, |s| s.release_webhook_leases(&o))
    }

    async fn finish_webhook_delivery(
        &self,
        endpoint: &str,
        event_id: &str,
        owner: &str,
        attempt: &session_log::outbox::Attempt,
    ) -> Result<bool, StoreError> {
        let (e, i, o, a) = (
            endpoint.to_owned(),
            event_id.to_owned(),
            owner.to_owned(),
            attempt.clone(),
        );
        delegate!(self, |s| s.finish_webhook_delivery(&e, &i, &o, &a))
    }

    async fn list_webhook_deliveries(
        &self,
        query: &session_log::outbox::DeliveryQuery,
    ) -> Result<(Vec<session_log::outbox::Delivery>, i64), StoreError> {
        let q = query.clone();
        delegate!(self, |s| s.list_webhook_deliveries(&q))
    }

    async fn remove(
        &self,
        removal: &session_log::Removal,
    ) -> Result<session_log::Deletion, StoreError> {
        let removal = removal.clone();
        delegate!(self, |s| s.remove(&removal))
    }
}
