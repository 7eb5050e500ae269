//! Applied migrations never change: sqlx refuses to start on a database whose applied
//! migration's text (comments included) differs from the binary's.

// Every migration's version and the SHA-384 of its text, as databases have applied it.
// A change of schema is a new migration; add its checksum here once it has landed.

const SQLITE: &[(i64, &str)] = &[
    (
        1,
        "8c9860feb538b9cba44ce9da57e0ce42eec01eaacc533797cf60b7ce936aec86f24fc89b65c7d075f67e6609362c98fd",
    ),
    (
        2,
        "b5c2e3519a8cbf72ac0bc6959b2a88cf579037ce0de39491150052e6ef90b83eb22a1ef34ad53b1591d2263a33d8f8e1",
    ),
    (
        3,
        "da9a30cf6e58be6e90d8cdbdd0842c1be2c1e597436f097f1047f36213003b9fe45f34129977681f69941739baefd115",
    ),
    (
        4,
        "7c10560bf98a731fe08577ae4db047fc175f5200e16d885379284b1fbf0079d2d0a7a313a1a52a0770eeeabeb80649f5",
    ),
    (
        5,
        "a31bc25317e10118bf02a036de99a6a971a9c6c34541a3afe05e356c7224fafb57b3618f580f301c220bc8a780e402cb",
    ),
    (
        6,
        "55613c19418e0b8c85b1ff1127ceb5c2c2de3e02798d93d08461504a13b23fd8f4c5f1a8817eeec4ff7b067a837c22ab",
    ),
    (
        7,
        "6e8efdc934d3e24d177abaedb396fc2e461864864722dec1e59c0ad7ed17127db7edff43cda1b7357d6466d4b5466148",
    ),
    (
        8,
        "78ab6387edc4dcd0225cc790927025e1131d4850ee7d151dd853b1e0c341f48fe540923dde4648102bad8b858a7f7cfe",
    ),
    (
        9,
        "c72443ce002d3617dab141423a5dde24fb5519756a6b1860e0eb0e1ccca986f1f785711b622fb16a01a22f0c8f07426d",
    ),
    (
        10,
        "0af047ce02f7f30a860ec648c08d65abb968a3117d566319088c9b680366b456752b52247e44fffb34adbe4bd3f1e2c2",
    ),
    (
        11,
        "b8ff3a2a66a049c7234f331f7982353ddc87cc9b03fc587fe938ce2b99d72d713ed91b86746fa896836f3fa5eb153a90",
    ),
    (
        12,
        "34354f90a7d313968f1caee99f6cf9ef87787ae622956e47407bf2cbd82c47f637a4c4bf65f4a7ed4922ee2a7af9d680",
    ),
    (
        13,
        "e278efb27bd2354f0c240d0af0c66390f4227733fd85b984c83a14d254a0fad22f313fad9f5f76efffccd48712ec2f26",
    ),
    (
        14,
        "bb9f154a7216a5b6ac4448863983fcb9c74b33e59e2c13bf10671bb4b2310fe9c859dd904f273c259390fa03f0a73500",
    ),
    (
        15,
        "dfaf34ecf83c216e732ada39ec243ae07d1c68c61fcccf2e37c20655cb4bb165e00bcb43f33766ddb1ed35ec4651ff88",
    ),
    (
        16,
        "032c2a3ade996b3c881316498e85ca7709301f3e5f0b837565f3625504eac86f8e1935bbdaa50c62dcacea08ee142800",
    ),
    (
        17,
        "b32ead1ad411c0ae234895afd772b276fd73882d8e627f3397d64430eaa5046e0bde4c1ad79a5c29d4ed85c5335cb666",
    ),
    (
        19,
        "e9a05f2b97040eefb2aacba63cfaad74560f1a61353b739ae27ddd6c894a6a3fa7b302f84a1d0348f35fca45a6bfb9a2",
    ),
    (
        20,
        "8c42ad186c38c60447bfab84b48fb275e11ec2cbc39aad5dae750b8009e4e9b5ede82fdbe98c21c07f0607ef57b46d8e",
    ),
];
const POSTGRES: &[(i64, &str)] = &[
    (
        1,
        "242801481ab3dd86fd4080e8804c57c84eabccf19654a028e50a30f90dda3917bb30fed7bbd285eb732e9282bf558fdc",
    ),
    (
        2,
        "129e6f0a35af2a9825a3843df7408c4152c76ad65fbbc7dffedd31bc433250c108e375a8c7f25f7fe79bc6b95d5d49ff",
    ),
    (
        3,
        "ff10ddf326338dcbd40b01fd26c7ea0f49511e29cb4e555578033c5500f47ae4f599e9ef4af8a7cb62e8df5033c0756a",
    ),
    (
        4,
        "6b8aa2522a76d762bccb38215f9a14c2896b9049b1a234792a7bd9628601be05e9b9b5b352edc2aa40fb3ee8e5e2b0b5",
    ),
    (
        5,
        "1ac1701b4bf68d03e75f7d4aa24c03a7ea2ace8b6e031e5733c6831acacd13d45d8b7aae99ae27f58699751f8f55f13d",
    ),
    (
        6,
        "a31bc25317e10118bf02a036de99a6a971a9c6c34541a3afe05e356c7224fafb57b3618f580f301c220bc8a780e402cb",
    ),
    (
        7,
        "1274a33ecda184ed3e572b3fb94e449c3b8d9310a4fc22369771a92f8b6f058299af016d5fcf12873fa15c09d04e103b",
    ),
    (
        8,
        "0d0913e5b73a623ab56bb88edbf4cd5dc15838a9ce847f9c7772c9bcbf8f7c273be0764ca34c1c77b22e9d67d5378e90",
    ),
    (
        9,
        "06b3776cd0a2d19537d29bff9437b8fc76ba0cf8e2dcb4b1325907c15e3cae90ff58e53ce155316f691ff43f0e428ab5",
    ),
    (
        10,
        "9583d3de2b1814b21d33fcb2822a88e3d9821e09696aba9a3576e70b1dc622b2b30723be1fd6d9f3a6aa659bee856be8",
    ),
    (
        11,
        "9444a378eb247ac4752d46229b0acf69d63c52d0ebeea8aac6b47e6d0b5d08262c37fdd330876cd2f8b3e6662594f6d1",
    ),
    (
        12,
        "19bcf08cd961ed17017ff961088e841dea5ba008803598f0b4b8e426cf44e5bc4a3bc9b8463d20897d8e99f5a091c112",
    ),
    (
        13,
        "b47a66562d112c9c16586503162c7c9502874c822a5a2c759e6d5f769dd7740e02f0a83c6a6d0fae85efb761392ba234",
    ),
    (
        14,
        "2ea5bbfc01586be3bacf34855165681503abe93aa5a6c759eacf8ad674c44c0b65f6694122c58aacf11d93c149007c09",
    ),
    (
        15,
        "0be06b2a1b93df6dbe684d1b8f6ab34c69a34ed6013933b857be7ae6ca9ccf2fdb86c9d6e70dd0830ce7895a157c7813",
    ),
    (
        16,
        "445940e801869ea254e706e5ee37f46bfc6c74747aff3cd0676e9d1300aed70550812e45c4d51013ae96535e2dca23cd",
    ),
    (
        17,
        "e6c10221d96fad47171742977fc7777eb038d3c122b5531ebcb817ee3186779e8ca6deb13af551c687cf28b96b4d7c24",
    ),
    (
        18,
        "78a5eea26e9538620c3bf9d323b13373890b1409e06bf32b8976e16af528416d831d8b8d8d29afd4ee5aea312662be58",
    ),
    (
        19,
        "b32ead1ad411c0ae234895afd772b276fd73882d8e627f3397d64430eaa5046e0bde4c1ad79a5c29d4ed85c5335cb666",
    ),
    (
        21,
        "d821239875f2c424387bbee734898f20ced778674587198887aa1b2448a12c70cad082fa3fd0c7f4fd7b0e9bb21ea736",
    ),
    (
        22,
        "e1de79c3aa7651945b28ed0da4f7722bc85991bac1b6287815b75be7418a65278e039e44c3639ce38ad8bd6d40fd03bf",
    ),
    (
        24,
        "94f0914ea111863c7716a79ed087bd7554d8c1abd0a87db8a932f802ac85aefd9298ce88284b962cd152cb09646f7087",
    ),
];

const ADVICE: &str = "an applied migration was edited (existing databases would refuse \
                      to start: restore its text and write a new migration), or a new \
                      migration's checksum is not pinned here yet";

fn checksums(migrator: &sqlx::migrate::Migrator) -> Vec<(i64, String)> {
    migrator
        .iter()
        .map(|m| {
            let hex = m.checksum.iter().map(|b| format!("{b:02x}")).collect();
            (m.version, hex)
        })
        .collect()
}

fn pinned(list: &[(i64, &str)]) -> Vec<(i64, String)> {
    list.iter().map(|(v, c)| (*v, (*c).to_owned())).collect()
}

#[test]
fn applied_sqlite_migrations_are_unchanged() {
    let now = checksums(&sqlx::migrate!("./migrations/sqlite"));
    assert_eq!(now, pinned(SQLITE), "{ADVICE}");
}

#[test]
fn applied_postgres_migrations_are_unchanged() {
    let now = checksums(&sqlx::migrate!("./migrations/postgres"));
    assert_eq!(now, pinned(POSTGRES), "{ADVICE}");
}

/// A database that held messages before PostgreSQL's migration 0016 (the text index)
/// finds them after it, and not those whose items a client had deleted: in a session, and
/// in a fork, whose positions count its inherited history first (0016's fill missed
/// those; 0024 removes them). After the migrations, deletions are keyed by seq.
#[tokio::test]
async fn messages_written_before_the_postgres_text_index_are_found_after_it() {
    use session_log::{Deletion, Removal, Scope, SessionFilter, Store};

    let url = match std::env::var("TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var_os("CI").is_some() => panic!("TEST_DATABASE_URL must be set in CI"),
        _ => return eprintln!("TEST_DATABASE_URL is not set: skipping"),
    };
    let admin = sqlx::PgPool::connect(&url).await.expect("connect");
    let name = format!("tether_pre_search_{}", std::process::id());
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name}"))
        .execute(&admin)
        .await;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .expect("create database");
    let fresh = match url.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{name}"),
        None => panic!("TEST_DATABASE_URL names no database: {url}"),
    };
    let pool = sqlx::PgPool::connect(&fresh).await.expect("connect fresh");

    // The schema as it was before 0016.
    let mut before = sqlx::migrate!("./migrations/postgres");
    before.migrations = before
        .migrations
        .iter()
        .filter(|m| m.version < 16)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    before.run(&pool).await.expect("migrations before 0016");

    // `root`: two messages, the second deleted (position 2 = seq 2). `fork`: forked from
    // `root` at its seq 2, so its base is 2; its own messages at seqs 2 and 3 (positions 4
    // and 5), the second deleted by position 5. Item deletions as written before 0016:
    // `position` only.
    let rows: [(&str, i64, &str, serde_json::Value); 7] = [
        (
            "root",
            1,
            "message",
            serde_json::json!({"text": "alpha in the root"}),
        ),
        (
            "root",
            2,
            "message",
            serde_json::json!({"text": "bravo deleted"}),
        ),
        (
            "root",
            3,
            "item_deleted",
            serde_json::json!({"item_id": "item_2", "position": 2}),
        ),
        (
            "fork",
            1,
            "session_fork",
            serde_json::json!({"parent_session_id": "root", "parent_seq": 2, "checkpoint_id": "c"}),
        ),
        (
            "fork",
            2,
            "message",
            serde_json::json!({"text": "charlie in the fork"}),
        ),
        (
            "fork",
            3,
            "message",
            serde_json::json!({"text": "delta deleted"}),
        ),
        (
            "fork",
            4,
            "item_deleted",
            serde_json::json!({"item_id": "item_5", "position": 5}),
        ),
    ];
    for session in ["root", "fork"] {
        let last = rows.iter().filter(|r| r.0 == session).count() as i64;
        sqlx::query(
            "INSERT INTO sessions (account_id, session_id, last_seq, created_at, updated_at) \
             VALUES ('old', $1, $2, now(), now())",
        )
        .bind(session)
        .bind(last)
        .execute(&pool)
        .await
        .expect("session row");
    }
    for (session, seq, kind, content) in &rows {
        sqlx::query(
            "INSERT INTO events (account_id, session_id, seq, event_type, role, content_json, \
             metadata_json, created_at) VALUES ('old', $1, $2, $3, 'user', $4, '{}', now())",
        )
        .bind(session)
        .bind(seq)
        .bind(kind)
        .bind(content)
        .execute(&pool)
        .await
        .expect("event row");
    }
    pool.close().await;

    // Opening the store applies the rest.
    let store = session_log::postgres::PgStore::connect(&fresh)
        .await
        .expect("migrate");
    let found = |text: &'static str| {
        let store = &store;
        async move {
            let filter = SessionFilter {
                text: Some(text.into()),
                ..Default::default()
            };
            let (sessions, _) = store
                .list_sessions("old", &filter, 0, 10)
                .await
                .expect("search");
            let mut ids: Vec<String> = sessions.into_iter().map(|s| s.session_id).collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(found("alpha").await, ["root"]);
    assert_eq!(found("charlie").await, ["fork"]);
    assert!(found("bravo").await.is_empty(), "deleted in the root");
    assert!(
        found("delta").await.is_empty(),
        "deleted in the fork (by position, before 0016)"
    );

    // After the migrations: a deletion as written now (with the item's seq), and a
    // removal, each drop what they take from the index.
    let deleted = session_log::NewEvent::new(
        "old",
        "fork",
        session_log::EventType::ItemDeleted,
        serde_json::json!({"item_id": "item_4", "position": 4, "seq": 2}),
    );
    store.append(&[deleted]).await.expect("delete an item");
    assert!(found("charlie").await.is_empty(), "deleted by seq");
    let removal = |scope| Removal {
        deletion_id: "del-old".into(),
        account_id: "old".into(),
        scope,
        by: "test".into(),
    };
    let removed = store
        .remove(&removal(Scope::Account))
        .await
        .expect("remove");
    assert!(matches!(removed, Deletion::Removed(_)), "{removed:?}");
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM message_text")
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(left, 0, "a removal leaves no row of the index");
    store.close().await;
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&admin)
        .await;
}
