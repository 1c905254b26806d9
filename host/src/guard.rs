//! The guard chain: what every tool call passes before it runs.
//!
//! In order: the refusal plugins' deny rules ([`DenyRules`], case-insensitive
//! regexes on the `path` / `command` arguments, tried on what will run as
//! well as on what was written, compiled once for the chain within a
//! budget), then the extensions that intercept `tool_call`. The first block wins and its reason goes back to
//! the caller. Data `shell` tools and the `shell` capability pass the same
//! chain, so an installed tool cannot do what the agent itself may not.
//!
//! This module holds the deny-rule stage, and how zot's own tools read
//! their arguments ([`zot_args`]), which both stages check by; the
//! intercepting stage lives with the sessions in [`crate::host`].

pub mod deny;
pub mod zot_args;

pub use deny::DenyRules;
