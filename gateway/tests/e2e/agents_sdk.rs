//! tests/interop/agents_sdk/test_agents_sdk.py, the OpenAI Agents SDK (`SQLiteSession`,
//! `previous_response_id`, `conversation_id`, `OpenAIConversationsSession`,
//! `run_streamed`) through the real binary on both stores, in front of the fake agent the
//! file kills and restarts between turns.

use std::process::Command;

use crate::harness::*;
use crate::interop::{interop_python, run_pytest_with};

fn agents_sdk_on(kind: StoreKind) {
    let Some(python) = interop_python() else {
        return;
    };
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    let agent_port = free_port();
    let tether = Tether::start(
        &format!("http://127.0.0.1:{agent_port}"),
        "openai-chat",
        &store.url,
        &[],
    );
    let mut pytest = Command::new(python);
    pytest
        .env("TETHER_URL", tether.url())
        .env("AGENT_PORT", agent_port.to_string())
        // Otherwise the SDK posts its traces to the vendor.
        .env("OPENAI_AGENTS_DISABLE_TRACING", "1");
    run_pytest_with(
        pytest,
        &["tests/interop/agents_sdk/test_agents_sdk.py"],
        &[&tether],
    );
}

#[test]
fn openai_agents_sdk_across_an_agent_restart_sqlite() {
    agents_sdk_on(StoreKind::Sqlite);
}

#[test]
fn openai_agents_sdk_across_an_agent_restart_postgres() {
    agents_sdk_on(StoreKind::Postgres);
}
