//! End-to-end tests: the real gateway process in front of fake agents that are real HTTP
//! servers, against real SQLite and PostgreSQL stores.

mod harness;

mod accounts;
mod agents;
mod agents_sdk;
mod approvals;
mod auth;
mod bad_input;
mod browser;
mod chaos;
mod checkpoints;
mod cli;
mod clients;
mod conformance;
mod console;
mod control;
mod conversations;
mod deploy;
mod failures;
mod full_disk;
mod hardening;
mod history;
mod input_limits;
mod interop;
mod lifecycle;
mod metrics;
mod openai_turns;
mod outage;
mod passthrough;
mod process;
mod rate_limits;
mod replicas;
mod sdk_clients;
mod search;
mod seed;
mod slow_postgres;
mod smuggling;
mod tour;
mod traces;
mod upgrade;
mod web_origins;
mod webhooks;
