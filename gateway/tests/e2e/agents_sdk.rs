//! tests/interop/agents_sdk/test_agents_sdk.py, the OpenAI Agents SDK (`SQLiteSession`,
//! `previous_response_id`, `conversation_id`, `OpenAIConversationsSession`,
//! `run_streamed`) through the real binary on both stores, in front of the fake agent the
//! file kills and restarts between turns.

use crate::harness::*;
use crate::interop::{interop_python, run_pytest_behind_tether};

fn agents_sdk_on(kind: StoreKind) {
    let Some(python) = interop_python() else {
        return;
    };
    let Some(store) = TestStore::new(kind) else {
        return;
    };
    run_pytest_behind_tether(
        python,
        &store,
        "openai-chat",
        "tests/interop/agents_sdk/test_agents_sdk.py",
        // Otherwise the SDK posts its traces to the vendor.
        &[("OPENAI_AGENTS_DISABLE_TRACING", "1")],
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
