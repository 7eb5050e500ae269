//! End-to-end tests: the real gateway process in front of fake agents that are real HTTP
//! servers, against real SQLite and PostgreSQL stores.

mod harness;

mod accounts;
mod agents;
mod auth;
mod bad_input;
mod browser;
mod chaos;
mod checkpoints;
mod cli;
mod clients;
mod console;
mod control;
mod deploy;
mod failures;
mod full_disk;
mod hardening;
mod history;
mod input_limits;
mod interop;
mod metrics;
mod outage;
mod passthrough;
mod process;
mod rate_limits;
mod replicas;
mod seed;
mod slow_postgres;
mod smuggling;
mod tour;
mod traces;
