//! End-to-end tests of zotbox: the library (`zotbox::Host`) and the real
//! `zotbox` binary, driving one configurable Python extension
//! (`tests/fixtures/pyext/ext.py`) and the unmodified reference example
//! (`tests/fixtures/hello-py`).
//!
//! Every test works in a fresh temp dir (its own `$ZOT_HOME` and
//! workspace) and waits on host events or on the frames an extension
//! recorded, never on sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "e2e/support.rs"]
mod support;

// The example and test guests, built once per run for every suite.
#[path = "e2e/guests.rs"]
mod guests;
#[path = "e2e/https.rs"]
mod https;

#[path = "e2e/attack.rs"]
mod attack;

#[path = "e2e/authoring.rs"]
mod authoring;
#[path = "e2e/chain.rs"]
mod chain;
#[path = "e2e/cli.rs"]
mod cli;
#[path = "e2e/confinement.rs"]
mod confinement;
#[path = "e2e/control_paths.rs"]
mod control_paths;
#[path = "e2e/data.rs"]
mod data;
#[path = "e2e/deny_rules.rs"]
mod deny_rules;
#[path = "e2e/distribution.rs"]
mod distribution;
#[path = "e2e/events.rs"]
mod events;
#[path = "e2e/failure.rs"]
mod failure;
#[path = "e2e/fault.rs"]
mod fault;
#[path = "e2e/guard_liveness.rs"]
mod guard_liveness;
#[path = "e2e/http_client.rs"]
mod http_client;
#[path = "e2e/install.rs"]
mod install;
#[path = "e2e/intercept.rs"]
mod intercept;
#[path = "e2e/langs.rs"]
mod langs;
#[path = "e2e/limits.rs"]
mod limits;
#[path = "e2e/load.rs"]
mod load;
#[path = "e2e/protocol.rs"]
mod protocol;
#[path = "e2e/publish.rs"]
mod publish;
#[path = "e2e/registry.rs"]
mod registry;
#[path = "e2e/secrets.rs"]
mod secrets;
#[path = "e2e/shared_host.rs"]
mod shared_host;
#[path = "e2e/sources.rs"]
mod sources;
#[path = "e2e/trust.rs"]
mod trust;
#[path = "e2e/wasm.rs"]
mod wasm;
#[path = "e2e/zot.rs"]
mod zot;
