//! What the user decided, kept under `$ZOT_HOME`: installed extensions and
//! trusted workspaces.
//!
//! Everything here writes only inside `$ZOT_HOME` (or, for a project install,
//! the workspace's `.zot/extensions/`), through one atomic-write path, and
//! never reads a decision from the workspace: a cloned repository cannot
//! install, trust or approve anything by itself (see `THREATS.md`).
//!
//! - [`install`]: copy an extension folder into place, exactly as shown on
//!   the consent screen, or not at all;
//! - [`pack`]: an extension folder as a reproducible `.tar.gz`;
//! - [`registry`]: a registry's signed index, and the checks of an entry
//!   and its archive against the policy's keys and rules;
//! - [`secret`]: the values of the user's secrets, in a file only the user
//!   can read, handed to the sandbox the moment a request is sent;
//! - [`trust`]: the records of workspaces the user trusted, bound to the
//!   workspace's canonical path and a hash of every file that can run;
//! - [`signature`]: minisign-compatible ed25519 keys and signatures.

pub mod install;
pub mod pack;
pub mod registry;
pub mod secret;
pub mod signature;
pub mod trust;
