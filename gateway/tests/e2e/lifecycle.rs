//! Hard deletes end to end (`DeleteSession`, `DeleteUserData`, `DeleteAccountData`), on
//! both stores: a crafted session with a fork, uploads (one shared with another session),
//! an idempotency key, feedback, a compaction and a live run. Refusals change nothing;
//! after the delete no read path returns any of it, the raw tables and (SQLite) the
//! database file hold none of it, another replica sees it gone at once, and the audit row
//! says what went, without content.

use serde_json::{json, Value};

use crate::harness::*;

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A base64 data URL of `text` as a text file.
fn text_file(text: &str) -> String {
    use std::fmt::Write;
    // Hand-rolled base64: the test crate has no base64 dependency of its own.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::from("data:text/plain;base64,");
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = write!(
                    out,
                    "{}",
                    ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
                );
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One Chat Completions turn in `session`, with extra headers; the reply.
fn chat(tether: &Tether, session: &str, text: &str, headers: &[(&str, &str)]) -> Reply {
    let body = Surface::Chat.body(text, Some(session), false);
    let reply = post(
        &format!("{}/v1/chat/completions", tether.url()),
        &body.to_string(),
        headers,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
}

/// One Responses turn in `session` with `content` as the user's message parts.
fn respond(tether: &Tether, session: &str, content: Value) -> Value {
    let body = json!({ "model": "fake", "conversation": session,
        "input": [{ "role": "user", "content": content }] });
    let reply = post_json(&format!("{}/v1/responses", tether.url()), &body);
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()
}

/// A query on the store's raw tables, answering one integer.
fn raw_count(url: &str, kind: StoreKind, sql: &str, bind: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match kind {
            StoreKind::Sqlite => {
                let pool = sqlx::SqlitePool::connect(&format!("sqlite://{url}"))
                    .await
                    .unwrap();
                let n = sqlx::query_scalar::<_, i64>(sql)
                    .bind(bind)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                pool.close().await;
                n
            }
            StoreKind::Postgres => {
                let pool = sqlx::PgPool::connect(url).await.unwrap();
                let n = sqlx::query_scalar::<_, i64>(sql)
                    .bind(bind)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                pool.close().await;
                n
            }
        }
    })
}

/// Every event of a session in the store at `url`.
fn events_at(url: &str, session: &str) -> Vec<session_log::Event> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = session_log::open(url).await.unwrap();
        store
            .events(&session_log::EventQuery::session("local", session))
            .await
            .unwrap()
    })
}

/// The audit row of a deletion, as text columns and counts.
fn audit_row(store: &TestStore, kind: StoreKind, deletion_id: &str) -> Value {
    const SQL: &str = "SELECT scope, deleted_by, session_ids, events, feedback, \
        idempotency_keys, attachments, CAST(subject AS TEXT) FROM deletions WHERE deletion_id = $1";
    type Row = (String, String, String, i64, i64, i64, i64, Option<String>);
    let row: Row = store.with_store(async |_| match kind {
        StoreKind::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", store.url))
                .await
                .unwrap();
            sqlx::query_as(SQL)
                .bind(deletion_id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
        StoreKind::Postgres => {
            let pool = sqlx::PgPool::connect(&store.url).await.unwrap();
            sqlx::query_as(SQL)
                .bind(deletion_id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    });
    json!({ "Scope": row.0, "DeletedBy": row.1, "SessionIds": serde_json::from_str::<Value>(&row.2).unwrap(),
        "Events": row.3, "Feedback": row.4, "IdempotencyKeys": row.5, "Attachments": row.6, "Subject": row.7 })
}

/// Every table's rows that hold `marker` anywhere in their text.
fn rows_holding(store: &TestStore, kind: StoreKind, marker: &str) -> i64 {
    let like = format!("%{marker}%");
    [
        "SELECT COUNT(*) FROM events WHERE CAST(content_json AS TEXT) LIKE $1 \
         OR CAST(metadata_json AS TEXT) LIKE $1",
        "SELECT COUNT(*) FROM session_events_readable WHERE message_text LIKE $1",
        "SELECT COUNT(*) FROM feedback WHERE comment LIKE $1",
        "SELECT COUNT(*) FROM deletions WHERE session_ids LIKE $1 OR subject LIKE $1",
    ]
    .iter()
    .map(|sql| raw_count(&store.url, kind, sql, &like))
    .sum()
}

fn hard_delete_of_a_crafted_session(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let api = Api::of(&tether);
    let s = unique("del-s");
    let other = unique("del-other");
    // Text only this session holds, looked for in every table and the file afterwards.
    let marker = format!("zebra{}", uuid::Uuid::new_v4().simple());
    let file_marker = format!("filebytes{}", uuid::Uuid::new_v4().simple());

    // Turn 1, with an idempotency key.
    let key = unique("idem");
    let first = chat(
        &tether,
        &s,
        &format!("My secret is {marker}."),
        &[("idempotency-key", &key)],
    );
    let invocation_1 = first.header("x-invocation-id").unwrap().to_owned();
    // An upload of its own (an inline data URL) and one shared with another session.
    let own = respond(
        &tether,
        &s,
        json!([{ "type": "input_text", "text": format!("read this {marker}") },
               { "type": "input_file", "filename": "own.txt", "file_data": text_file(&file_marker) }]),
    );
    let response_id = own["id"].as_str().unwrap().to_owned();
    let shared = api.ok(
        "UploadAttachment",
        json!({ "Data": text_file("shared bytes"), "FileName": "shared.txt" }),
    )["FileUri"]
        .as_str()
        .unwrap()
        .to_owned();
    for session in [&s, &other] {
        respond(
            &tether,
            session,
            json!([{ "type": "input_text", "text": "and this" },
                   { "type": "input_file", "filename": "shared.txt", "file_url": shared }]),
        );
    }
    let own_uri = store
        .events("local", &s)
        .iter()
        .find_map(|e| {
            let text = e.content.to_string();
            let at = text.find("tether-upload://")?;
            let uri: String = text[at..].chars().take_while(|c| *c != '"').collect();
            (uri != shared).then_some(uri)
        })
        .expect("the inline file is stored as an upload");
    // Feedback, with the marker in its comment.
    api.ok(
        "CreateFeedback",
        json!({ "SessionId": s, "InvocationId": invocation_1, "Rating": "up", "Comment": format!("liked {marker}") }),
    );
    chat(&tether, &s, "The colour is teal.", &[]);
    // A compaction (its summary repeats the marker), then a fork.
    store.wait_for_terminal("local", &s, 4);
    api.ok(
        "CompactSession",
        json!({ "SessionId": s, "KeepLastTurns": 1 }),
    );
    let fork = api.ok("ForkSession", json!({ "SessionId": s }))["SessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let events_before = store.events("local", &s).len() as i64;
    assert!(rows_holding(&store, kind, &marker) > 0);

    // Refused while a fork reads it, naming the fork; nothing changes.
    let (status, refused) = api.call("DeleteSession", json!({ "SessionId": s }));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["Data"]["code"], "session_has_forks");
    assert_eq!(refused["Data"]["Forks"], json!([fork]));
    assert!(refused["Message"].as_str().unwrap().contains(&fork));
    assert_eq!(store.events("local", &s).len() as i64, events_before);

    // The fork goes first (its audit row names it alone).
    let deleted_fork = api.ok("DeleteSession", json!({ "SessionId": fork }));
    assert_eq!(deleted_fork["SessionIds"], json!([fork]));
    assert_eq!(
        deleted_fork["Attachments"], 0,
        "the fork's files are its parent's"
    );

    // Refused while a run is live in it, naming the run; nothing changes.
    let mut live = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:200:50", Some(&s), true),
    );
    let live_invocation = live.invocation_id.clone().unwrap();
    live.next_event().unwrap();
    let (status, refused) = api.call("DeleteSession", json!({ "SessionId": s }));
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["Data"]["code"], "run_in_progress");
    assert_eq!(refused["Data"]["InvocationId"], live_invocation);
    assert!(refused["Message"]
        .as_str()
        .unwrap()
        .contains(&live_invocation));
    api.ok("CancelRun", json!({ "InvocationId": live_invocation }));
    let events_before = store.wait_for_terminal("local", &s, 5).len() as i64;
    drop(live);

    // The delete.
    let deleted = api.ok("DeleteSession", json!({ "SessionId": s }));
    assert_eq!(deleted["SessionIds"], json!([s]));
    assert_eq!(deleted["Events"], events_before);
    assert_eq!(deleted["Feedback"], 1);
    assert_eq!(deleted["IdempotencyKeys"], 1);
    assert!(deleted["Invocations"].as_i64().unwrap() >= 5, "{deleted}");
    assert_eq!(
        deleted["Attachments"], 1,
        "its own upload, not the shared one"
    );
    assert_eq!(deleted["DeletedBy"], "local");
    assert!(deleted["EventBytes"].as_i64().unwrap() > 0);
    let deletion_id = deleted["DeletionId"].as_str().unwrap();

    // No read path returns any of it.
    let (status, _) = api.call("ListSessionEvents", json!({ "SessionId": s }));
    assert_eq!(status, 404);
    let (status, _) = api.call("ListSessionCheckpoints", json!({ "SessionId": s }));
    assert_eq!(status, 404);
    let (status, _) = api.call("ListToolReceipts", json!({ "SessionId": s }));
    assert_eq!(status, 404);
    let listed = api.ok("ListSessions", json!({ "PageSize": 100 }));
    let ids: Vec<&str> = listed["Sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["SessionId"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&s.as_str()) && !ids.contains(&fork.as_str()));
    assert!(ids.contains(&other.as_str()));
    let (status, _) = api.call("ListFeedback", json!({ "SessionId": s }));
    assert_eq!(status, 404);
    // The account's feedback may hold other tests' sessions (a shared database): none of
    // it is the deleted sessions'.
    let feedback = api.ok("ListFeedback", json!({}));
    let left: Vec<&Value> = feedback["Feedback"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["SessionId"] == s.as_str() || f["SessionId"] == fork.as_str())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let (status, _) = get_json(&format!("{}/v1/responses/{response_id}", tether.url()));
    assert_eq!(status, 404);
    let after = post_json(
        &format!("{}/v1/responses", tether.url()),
        &json!({ "model": "fake", "input": "What is my secret?", "previous_response_id": response_id }),
    );
    assert_eq!(after.status, 404, "{}", after.body);
    let sub = get(
        &format!(
            "{}/agentengine/api/v1/SubscribeRunEvents?SessionId={s}&InvocationId={invocation_1}",
            tether.url()
        ),
        &[],
    );
    assert_eq!(sub.status, 404, "{}", sub.body);
    assert!(!sub.body.contains(&marker));
    let own_file = get(
        &format!(
            "{}/agentengine/api/v1/AttachmentContent?FileUri={own_uri}",
            tether.url()
        ),
        &[],
    );
    assert_eq!(own_file.status, 404, "{}", own_file.body);
    let shared_file = get(
        &format!(
            "{}/agentengine/api/v1/AttachmentContent?FileUri={shared}",
            tether.url()
        ),
        &[],
    );
    assert_eq!(shared_file.status, 200, "the other session still uses it");
    // The session id starts afresh: the agent is told nothing of the old history.
    let requests_before = agent.requests().len();
    chat(&tether, &s, "What is my secret?", &[]);
    let sent = history_sent(&agent.requests()[requests_before]);
    assert_eq!(sent.len(), 1, "{sent:?}");

    // The raw tables hold none of it (the readable view neither), the audit row no content.
    assert_eq!(rows_holding(&store, kind, &marker), 0);
    let file_id = own_uri.trim_start_matches("tether-upload://");
    assert_eq!(
        raw_count(
            &store.url,
            kind,
            "SELECT COUNT(*) FROM attachments WHERE file_id = $1",
            file_id
        ),
        0
    );
    let audit = audit_row(&store, kind, deletion_id);
    assert_eq!(
        audit,
        json!({ "Scope": "session", "DeletedBy": "local", "SessionIds": [s], "Events": events_before,
            "Feedback": 1, "IdempotencyKeys": 1, "Attachments": 1, "Subject": s })
    );
    // SQLite: the file and its WAL hold no byte of it (secure_delete zeroes what the
    // delete freed; the WAL is checkpointed and emptied: at once when no append waits for
    // the writer, else within 2 s, so this looks for up to 10 s).
    if kind == StoreKind::Sqlite {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let mut held = None;
            for path in [store.url.clone(), format!("{}-wal", store.url)] {
                let bytes = std::fs::read(&path).unwrap_or_default();
                for needle in [&marker, &file_marker] {
                    if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                        held = Some(format!("{path} still holds {needle}"));
                    }
                }
            }
            match held {
                None => break,
                Some(held) => assert!(std::time::Instant::now() < deadline, "{held}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    let metrics = get(&format!("{}/metrics", tether.url()), &[]).body;
    assert!(
        metrics.contains("tether_deleted_sessions_total 2"),
        "{metrics}"
    );
    assert!(metrics.contains("tether_deleted_total{scope=\"session\"} 2"));
}

#[test]
fn hard_delete_of_a_crafted_session_sqlite() {
    hard_delete_of_a_crafted_session(StoreKind::Sqlite);
}

#[test]
fn hard_delete_of_a_crafted_session_postgres() {
    hard_delete_of_a_crafted_session(StoreKind::Postgres);
}

/// A user's erasure takes the sessions whose events name the user, and their forks; an
/// account's takes everything, workspace files included, and needs the account repeated.
fn user_and_account_erasure(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let workspace = tempfile::tempdir().unwrap();
    let account = unique("acct");
    let key = unique("key");
    let conf = Conf::write(&format!(
        "[[auth.api_keys]]\nid = \"ops\"\naccount_id = \"{account}\"\nsha256 = \"{}\"\n",
        sha256_hex(&key)
    ));
    std::fs::create_dir_all(workspace.path().join(&account).join("out")).unwrap();
    std::fs::write(workspace.path().join(&account).join("out/a.txt"), "abc").unwrap();
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &[
            "--conf",
            &conf.arg(),
            "--workspace-dir",
            &workspace.path().display().to_string(),
        ],
    );
    let api = Api {
        base: tether.url(),
        key: Some(key.clone()),
    };
    let auth = format!("Bearer {key}");
    let headers = [("authorization", auth.as_str())];
    let (a, b) = (unique("u-a"), unique("u-b"));
    for s in [&a, &b] {
        let body = Surface::Chat.body("hello", Some(s), false);
        let reply = post(
            &format!("{}/v1/chat/completions", tether.url()),
            &body.to_string(),
            &headers,
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    // No session names this user: nothing goes, and the audit still records the ask.
    let none = api.ok("DeleteUserData", json!({ "UserId": "nobody" }));
    assert_eq!(none["Sessions"], 0);
    assert_eq!(store.session_count(&account), 2);

    // Sessions whose events name an ADK user (imported as an ADK session records them).
    let adk_session = |session: &str, user: &str| {
        let meta = json!({ "adk": { "author": "assistant", "app_name": "app", "user_id": user } });
        api.ok(
            "ImportSession",
            json!({ "SessionId": session, "Events": [
                { "SeqId": 1, "EventType": "message", "Role": "user", "Content": { "text": "hi" },
                  "Timestamp": "2026-01-05T10:00:00Z" },
                { "SeqId": 2, "EventType": "message", "Role": "assistant", "Content": { "text": "hello" },
                  "Metadata": meta, "Timestamp": "2026-01-05T10:00:01Z" }] }),
        );
    };
    let (u1a, u1b, u2) = (unique("u1a"), unique("u1b"), unique("u2"));
    adk_session(&u1a, "u1");
    adk_session(&u1b, "u1");
    adk_session(&u2, "u2");
    let user = api.ok("DeleteUserData", json!({ "UserId": "u1" }));
    let mut expected = vec![u1a.clone(), u1b.clone()];
    expected.sort();
    assert_eq!(user["SessionIds"], json!(expected));
    assert_eq!(user["Events"], 4);
    assert_eq!(
        store.session_count(&account),
        3,
        "u2's and the two others stay"
    );
    assert_eq!(store.events(&account, &u1a).len(), 0);
    assert_eq!(store.events(&account, &u2).len(), 2);
    let audit = audit_row(&store, kind, user["DeletionId"].as_str().unwrap());
    assert_eq!(audit["Scope"], "user");
    assert_eq!(audit["Subject"], "u1");

    let (status, refused) = api.call("DeleteAccountData", json!({ "AccountId": "someone-else" }));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(store.session_count(&account), 3);

    let all = api.ok("DeleteAccountData", json!({ "AccountId": account }));
    assert_eq!(all["Sessions"], 3);
    assert_eq!(all["DeletedBy"], "key:ops");
    assert_eq!(all["WorkspaceFiles"], 1);
    assert_eq!(store.session_count(&account), 0);
    assert!(!workspace.path().join(&account).join("out/a.txt").exists());
    let audit = audit_row(&store, kind, all["DeletionId"].as_str().unwrap());
    assert_eq!(audit["Scope"], "account");
    assert_eq!(audit["DeletedBy"], "key:ops");
}

#[test]
fn user_and_account_erasure_sqlite() {
    user_and_account_erasure(StoreKind::Sqlite);
}

#[test]
fn user_and_account_erasure_postgres() {
    user_and_account_erasure(StoreKind::Postgres);
}

/// Two replicas on one PostgreSQL: a session deleted through one is gone from the other
/// at the next read.
#[test]
fn a_delete_on_one_replica_is_seen_by_the_other_at_once() {
    let Some(url) = postgres_url() else { return };
    let agent = FakeAgent::start();
    let a = Tether::start(&agent.url(), "openai-chat", &url, &[]);
    let b = Tether::start(&agent.url(), "openai-chat", &url, &[]);
    let s = unique("del-replica");
    chat(&a, &s, "hello", &[]);
    let (api_a, api_b) = (Api::of(&a), Api::of(&b));
    let seen = api_b.ok("ListSessionEvents", json!({ "SessionId": s }));
    assert!(!seen["Events"].as_array().unwrap().is_empty());
    api_a.ok("DeleteSession", json!({ "SessionId": s }));
    let (status, _) = api_b.call("ListSessionEvents", json!({ "SessionId": s }));
    assert_eq!(status, 404);
}

/// A delete while the PostgreSQL outage journal holds the session is refused with a 503
/// and `Retry-After` (the backfill would write the journalled events back); once the
/// journal is backfilled the delete goes through, and nothing brings the session back.
#[test]
fn a_delete_during_a_postgres_outage_is_refused_until_the_journal_is_backfilled() {
    use crate::outage::pg_cluster;
    let Some(cluster) = pg_cluster::Cluster::start() else {
        return;
    };
    let agent = FakeAgent::start();
    let journal = cluster.path().join("tether-journal.sqlite");
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &cluster.url(),
        &["--journal-path", &journal.display().to_string()],
    );
    let api = Api::of(&tether);
    let s = unique("del-outage");
    // A run that PostgreSQL goes down under: the rest of it is journalled.
    let mut sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:20:100", Some(&s), true),
    );
    assert_eq!(sse.status, 200);
    for _ in 0..3 {
        sse.next_event().unwrap();
    }
    cluster.down();
    while let Some(event) = sse.next_event() {
        if event.data == "[DONE]" {
            break;
        }
    }
    let delete = || {
        post(
            &format!("{}/agentengine/api/v1/DeleteSession", tether.url()),
            &json!({ "SessionId": s }).to_string(),
            &[],
        )
    };
    let refused = delete();
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["Data"]["code"], "journal_pending");
    assert!(refused.header("retry-after").is_some());

    cluster.up();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let deleted = loop {
        let reply = delete();
        if reply.status == 200 {
            break reply.json();
        }
        assert_eq!(reply.status, 503, "{}", reply.body);
        assert!(std::time::Instant::now() < deadline, "{}", reply.body);
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    // The run went whole, its journalled part too.
    assert_eq!(deleted["Data"]["Invocations"], 1, "{deleted}");
    assert!(
        deleted["Data"]["Events"].as_i64().unwrap() > 20,
        "{deleted}"
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (status, _) = api.call("ListSessionEvents", json!({ "SessionId": s }));
    assert_eq!(status, 404, "nothing brought the session back");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let left = rt.block_on(async {
        use session_log::Store;
        let pg = session_log::postgres::PgStore::connect(&cluster.url())
            .await
            .unwrap();
        pg.events(&session_log::EventQuery::session("local", &s))
            .await
            .unwrap()
    });
    assert!(left.is_empty(), "{left:?}");
}

/// An archived session is read-only (a run is refused in the surface's format, before
/// anything reaches the agent or the log), hidden from the default listing, still
/// readable, and restored as it was by `UnarchiveSession`.
fn archive_is_read_only_hidden_and_restorable(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let api = Api::of(&tether);
    let s = unique("arch");
    chat(
        &tether,
        &s,
        "My project is named zebra42. Reply with OK.",
        &[],
    );
    store.wait_for_terminal("local", &s, 1);
    let listed = |archived: bool| -> Vec<String> {
        api.ok(
            "ListSessions",
            json!({ "PageSize": 100, "Archived": archived }),
        )["Sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["SessionId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(listed(false).contains(&s));

    let archived = api.ok("ArchiveSession", json!({ "SessionId": s }));
    assert_eq!(archived["Archived"], true);
    let at = archived["ArchivedAt"].clone();
    assert!(at.is_string());
    let again = api.ok("ArchiveSession", json!({ "SessionId": s }));
    assert_eq!(
        again["ArchivedAt"], at,
        "archiving again keeps the first time"
    );
    assert!(
        !listed(false).contains(&s),
        "hidden from the default listing"
    );
    assert!(listed(true).contains(&s));

    let (events, requests) = (store.events("local", &s).len(), agent.requests().len());
    let refused = post_json(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("What is my project named?", Some(&s), false),
    );
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "session_archived");
    let (status, envelope) = api.call("CompactSession", json!({ "SessionId": s, "Summary": "x" }));
    assert_eq!(status, 409);
    assert_eq!(envelope["Data"]["code"], "session_archived");
    assert_eq!(store.events("local", &s).len(), events, "nothing logged");
    assert_eq!(
        agent.requests().len(),
        requests,
        "nothing reached the agent"
    );
    // Still readable.
    let page = api.ok("ListSessionEvents", json!({ "SessionId": s }));
    assert_eq!(page["Events"].as_array().unwrap().len(), events);

    let (status, _) = api.call("ArchiveSession", json!({ "SessionId": "no-such-session" }));
    assert_eq!(status, 404);

    let restored = api.ok("UnarchiveSession", json!({ "SessionId": s }));
    assert_eq!(restored["Archived"], false);
    assert!(listed(false).contains(&s));
    assert!(!listed(true).contains(&s));
    let reply = chat(&tether, &s, "What is my project named?", &[]);
    assert_eq!(
        Surface::Chat.text(&reply.json()),
        "zebra42",
        "its history is intact"
    );
}

#[test]
fn archive_is_read_only_hidden_and_restorable_sqlite() {
    archive_is_read_only_hidden_and_restorable(StoreKind::Sqlite);
}

#[test]
fn archive_is_read_only_hidden_and_restorable_postgres() {
    archive_is_read_only_hidden_and_restorable(StoreKind::Postgres);
}

/// `tether sessions delete` and `tether data delete-user|delete-account` as an operator
/// runs them: a summary line (or the audit row with `--json`), one line on stderr and exit
/// code 1 when refused.
#[test]
fn the_cli_deletes_and_says_what_it_removed() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    let url = tether.url();
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(args)
            .args(["--url", &url])
            .env_remove("TETHER_URL")
            .env_remove("TETHER_API_KEY")
            .env_remove("TETHER_LISTEN")
            .output()
            .expect("run tether")
    };
    let s = unique("cli-del");
    chat(&tether, &s, "hello", &[]);
    store.wait_for_terminal("local", &s, 1);
    let out = cli(&["sessions", "delete", &s]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("deleted 1 session(s) (") && text.contains("; audit del_"),
        "{text}"
    );
    assert_eq!(store.events("local", &s).len(), 0);
    let out = cli(&["sessions", "delete", &s]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not found") && err.lines().count() == 1,
        "{err}"
    );
    let out = cli(&["data", "delete-user", "nobody", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let audit: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(audit["Scope"], "user");
    let out = cli(&["data", "delete-account", "not-local"]);
    assert_eq!(out.status.code(), Some(1), "a wrong account is refused");
    let out = cli(&["data", "delete-account", "local", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let audit: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(audit["Scope"], "account");
}

/// `[retention]` with a 2 s maximum idle time, swept every second.
fn retention_conf() -> Conf {
    Conf::write("[retention]\nmax_idle_seconds = 2\nsweep_interval_seconds = 1\nsweep_batch = 1\n")
}

/// An idle session is swept (audit row by `retention`), a session whose live run is idle
/// longer than the maximum is not, until the run has ended and the session idled again.
fn retention_sweeps_idle_sessions_but_never_a_live_run(kind: StoreKind) {
    // A store of its own: the sweep removes every idle session in it, other tests' too.
    let (_sqlite, _cluster, url) = match kind {
        StoreKind::Sqlite => {
            let store = TestStore::new(kind).unwrap();
            let url = store.url.clone();
            (Some(store), None, url)
        }
        StoreKind::Postgres => {
            let Some(cluster) = crate::outage::pg_cluster::Cluster::start() else {
                return;
            };
            let url = cluster.url();
            (None, Some(cluster), url)
        }
    };
    let agent = FakeAgent::start();
    let conf = retention_conf();
    let tether = Tether::start(&agent.url(), "openai-chat", &url, &["--conf", &conf.arg()]);
    let idle = unique("ret-idle");
    chat(&tether, &idle, "hello", &[]);
    // A live run that is silent for 3 s at a time: idle by its timestamps, but live.
    let live = unique("ret-live");
    let mut sse = SseStream::post(
        &format!("{}/v1/chat/completions", tether.url()),
        &Surface::Chat.body("slow:3:3000", Some(&live), true),
    );
    sse.next_event().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !events_at(&url, &idle).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle session was not swept"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Swept past its idle time while its run was still live: kept.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let during = events_at(&url, &live);
    assert!(
        !during.is_empty() && !during.iter().any(|e| e.is_terminal()),
        "the live run's session is kept"
    );
    let audit = raw_count(
        &url,
        kind,
        "SELECT COUNT(*) FROM deletions WHERE deleted_by = 'retention' AND subject = $1",
        &idle,
    );
    assert_eq!(audit, 1, "one audit row by retention");
    // The run ends; then the session idles out too.
    while sse.next_event().is_some() {}
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !events_at(&url, &live).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the ended session was not swept"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let metrics = get(&format!("{}/metrics", tether.url()), &[]).body;
    assert!(
        metrics.contains("tether_deleted_total{scope=\"retention\"} 2"),
        "{metrics}"
    );
}

#[test]
fn retention_sweeps_idle_sessions_but_never_a_live_run_sqlite() {
    retention_sweeps_idle_sessions_but_never_a_live_run(StoreKind::Sqlite);
}

#[test]
fn retention_sweeps_idle_sessions_but_never_a_live_run_postgres() {
    retention_sweeps_idle_sessions_but_never_a_live_run(StoreKind::Postgres);
}

/// Two replicas with retention on one PostgreSQL: one holds the sweeper's lease and
/// sweeps; the other never does while it lives.
#[test]
fn exactly_one_replica_sweeps() {
    // A cluster of its own: the sweep removes every idle session in it, other tests' too.
    let Some(cluster) = crate::outage::pg_cluster::Cluster::start() else {
        return;
    };
    let url = cluster.url();
    let agent = FakeAgent::start();
    let conf = retention_conf();
    let start = |id: &str| {
        Tether::start(
            &agent.url(),
            "openai-chat",
            &url,
            &["--conf", &conf.arg(), "--replica-id", id],
        )
    };
    let (a, b) = (start("sweeper-a"), start("sweeper-b"));
    let sessions: Vec<String> = (0..4).map(|_| unique("ret-two")).collect();
    for (i, s) in sessions.iter().enumerate() {
        chat(if i % 2 == 0 { &a } else { &b }, s, "hello", &[]);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while sessions.iter().any(|s| !events_at(&url, s).is_empty()) {
        assert!(std::time::Instant::now() < deadline, "not swept");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let swept = |t: &Tether| -> u64 {
        let metrics = get(&format!("{}/metrics", t.url()), &[]).body;
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("tether_deleted_total{scope=\"retention\"} "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let (by_a, by_b) = (swept(&a), swept(&b));
    assert!(
        (by_a == 0) != (by_b == 0),
        "one replica swept: a {by_a}, b {by_b}"
    );
    for s in &sessions {
        let rows = raw_count(
            &url,
            StoreKind::Postgres,
            "SELECT COUNT(*) FROM deletions WHERE deleted_by = 'retention' AND subject = $1",
            s,
        );
        assert_eq!(rows, 1, "{s}");
    }
}

/// An account's own maximum (`[retention.accounts]`) is swept by, whatever the default.
#[test]
fn an_account_s_own_maximum_idle_time_is_swept_by() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let conf = Conf::write(
        "[retention]\nmax_idle_seconds = 3600\nsweep_interval_seconds = 1\n\
         [retention.accounts]\nlocal = 2\n",
    );
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
    );
    let s = unique("ret-account");
    chat(&tether, &s, "hello", &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !store.events("local", &s).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "not swept by the account's maximum"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Quotas: a write that would pass one is refused in the surface's format (OpenAI's
/// `error`, the control envelope) naming the quota, before anything is stored or reaches
/// the agent (raw counts of the tables); a session that exists goes on; a delete frees
/// the quota at once.
fn quotas_refuse_before_anything_is_written(kind: StoreKind) {
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let (account, key, auth_table) = own_account("quota");
    let conf = Conf::write(&format!(
        "{auth_table}[quotas]\nsessions = 2\nupload_bytes = 40\n\n\
         [quotas.accounts.someone-else]\nsessions = 100\n"
    ));
    let agent = FakeAgent::start();
    let tether = Tether::start(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
    );
    let bearer = format!("Bearer {key}");
    let auth = [("authorization", bearer.as_str())];
    let api = Api {
        base: tether.url(),
        key: Some(key.clone()),
    };
    let send = |path: &str, body: &Value| {
        post(&format!("{}{path}", tether.url()), &body.to_string(), &auth)
    };
    let (s1, s2, s3) = (unique("q1"), unique("q2"), unique("q3"));
    chat(&tether, &s1, "first", &auth);
    chat(&tether, &s2, "second", &auth);
    store.wait_for_terminal(&account, &s2, 1);
    let counts = || {
        let count = |table: &str| {
            let sql = format!("SELECT COUNT(*) FROM {table} WHERE account_id = $1");
            raw_count(&store.url, kind, &sql, &account)
        };
        (
            count("sessions"),
            count("events"),
            count("attachments"),
            agent.requests().len() as i64,
        )
    };
    let before = counts();
    assert_eq!(before.0, 2);

    // A third session: 429 in OpenAI's error shape, naming the quota.
    let refused = send(
        "/v1/chat/completions",
        &Surface::Chat.body("third", Some(&s3), false),
    );
    assert_eq!(refused.status, 429, "{}", refused.body);
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "quota_exceeded", "{error}");
    assert_eq!(error["param"], "sessions");
    assert!(error["message"].as_str().unwrap().contains("'sessions'"));
    // A Conversations API create is a new session too.
    let conv = send("/v1/conversations", &json!({}));
    assert_eq!(conv.status, 429, "{}", conv.body);
    assert_eq!(
        counts(),
        before,
        "nothing stored, nothing sent to the agent"
    );

    // An upload past `upload_bytes`: 413, in the control envelope and in a turn.
    let (status, envelope) = api.call(
        "UploadAttachment",
        json!({ "Data": text_file(&"x".repeat(41)), "FileName": "big.txt" }),
    );
    assert_eq!(status, 413);
    assert_eq!(envelope["Data"]["code"], "quota_exceeded");
    assert!(envelope["Message"]
        .as_str()
        .unwrap()
        .contains("'upload_bytes'"));
    let body = json!({ "model": "fake", "conversation": s1, "input": [{ "role": "user", "content": [
        { "type": "input_text", "text": "read this" },
        { "type": "input_file", "filename": "big.txt", "file_data": text_file(&"y".repeat(41)) }] }] });
    let refused = send("/v1/responses", &body);
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert_eq!(refused.json()["error"]["param"], "upload_bytes");
    assert_eq!(
        counts(),
        before,
        "nothing stored, nothing sent to the agent"
    );

    // A session that exists goes on; a small upload fits.
    chat(&tether, &s1, "still here", &auth);
    api.ok(
        "UploadAttachment",
        json!({ "Data": text_file("small"), "FileName": "small.txt" }),
    );
    let (status, _) = api.call(
        "ForkSession",
        json!({ "SessionId": s1, "NewSessionId": unique("fork") }),
    );
    assert_eq!(status, 429, "a fork is a new session");
    // A delete frees the quota at once.
    api.ok("DeleteSession", json!({ "SessionId": s2 }));
    chat(&tether, &s3, "third, now", &auth);
}

/// Quotas on the A2A surface: a send that would pass one is refused in each binding's
/// own error shape, naming the quota, before anything is stored or reaches the agent:
/// JSON-RPC (v0.3 and v1.0) an error in a 200 whose `data` names it, HTTP+JSON a
/// `google.rpc.Status` `RESOURCE_EXHAUSTED` with Tether's status (429 for `sessions`).
#[test]
fn quota_refusals_in_each_a2a_binding() {
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    // One session stored (through another surface), the whole quota.
    let chat_gateway = Tether::start(&agent.url(), "openai-chat", &store.url, &[]);
    chat(&chat_gateway, &unique("q"), "hello", &[]);
    drop(chat_gateway);
    let conf = Conf::write("[quotas]\nsessions = 1\n");
    let tether = Tether::start(&agent.url(), "a2a", &store.url, &["--conf", &conf.arg()]);
    let count = || {
        (
            raw_count(
                &store.url,
                StoreKind::Sqlite,
                "SELECT COUNT(*) FROM sessions WHERE account_id = $1",
                "local",
            ),
            raw_count(
                &store.url,
                StoreKind::Sqlite,
                "SELECT COUNT(*) FROM events WHERE account_id = $1",
                "local",
            ),
            agent.requests().len(),
        )
    };
    let before = count();
    let message_id = || uuid::Uuid::new_v4().to_string();

    // JSON-RPC v0.3: Tether's type, code and quota in `data`.
    let body = json!({ "jsonrpc": "2.0", "id": "1", "method": "message/send", "params": { "message": {
        "kind": "message", "role": "user", "messageId": message_id(),
        "parts": [{ "kind": "text", "text": "hi" }], "contextId": unique("ctx") } } });
    let r = post(&format!("{}/", tether.url()), &body.to_string(), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    let error = &r.json()["error"];
    assert_eq!(error["code"], -32603, "{error}");
    assert_eq!(error["data"]["code"], "quota_exceeded", "{error}");
    assert_eq!(error["data"]["param"], "sessions", "{error}");
    assert!(error["message"]
        .as_str()
        .unwrap_or_default()
        .contains("'sessions'"));
    assert_eq!(r.json()["id"], "1");

    // JSON-RPC v1.0: an ErrorInfo naming the quota.
    let v10 = json!({ "role": "ROLE_USER", "parts": [{ "text": "hi" }], "messageId": message_id(),
        "contextId": unique("ctx") });
    let body =
        json!({ "jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": { "message": v10 } });
    let r = post(
        &format!("{}/", tether.url()),
        &body.to_string(),
        &[("A2A-Version", "1.0")],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let error = &r.json()["error"];
    assert_eq!(error["code"], -32603, "{error}");
    assert_eq!(error["data"][0]["reason"], "QUOTA_EXCEEDED", "{error}");
    assert_eq!(error["data"][0]["metadata"]["quota"], "sessions", "{error}");

    // HTTP+JSON: google.rpc.Status, RESOURCE_EXHAUSTED, with Tether's 429.
    let body = json!({ "message": v10 });
    let r = post(
        &format!("{}/message:send", tether.url()),
        &body.to_string(),
        &[("A2A-Version", "1.0")],
    );
    assert_eq!(r.status, 429, "{}", r.body);
    let error = &r.json()["error"];
    assert_eq!(error["code"], 429, "{error}");
    assert_eq!(error["status"], "RESOURCE_EXHAUSTED", "{error}");
    assert_eq!(error["details"][0]["reason"], "QUOTA_EXCEEDED", "{error}");
    assert_eq!(
        error["details"][0]["metadata"]["quota"], "sessions",
        "{error}"
    );
    assert!(error["message"]
        .as_str()
        .unwrap_or_default()
        .contains("'sessions'"));

    assert_eq!(count(), before, "nothing stored, nothing sent to the agent");
}

#[test]
fn quotas_refuse_before_anything_is_written_sqlite() {
    quotas_refuse_before_anything_is_written(StoreKind::Sqlite);
}

#[test]
fn quotas_refuse_before_anything_is_written_postgres() {
    quotas_refuse_before_anything_is_written(StoreKind::Postgres);
}
