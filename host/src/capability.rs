//! The capability layer: the host functions every extension reaches the world through.
//!
//! One implementation, two front ends: wasm guests call these through the WIT
//! interfaces in `wit/` (`zot:host/fs`, `http`, `shell`), and declarative data
//! tools call the same Rust functions directly. Each capability is a grant
//! (what the manifest declared, intersected with the policy) plus an operation
//! that checks the grant before it touches anything:
//!
//! - [`fs`]: workspace files through a cap-std jail, read and write globs;
//!   control paths (`.git`, `.zot`, `.shiro`, `$ZOT_HOME` and extension
//!   folders inside the workspace) never written, hard-linked files refused;
//! - [`http`]: HTTPS only, to granted origins, never to private addresses by name;
//! - [`shell`]: command patterns, one-word argument quoting, a scrubbed
//!   environment, a timeout and an output cap;
//! - [`granted_env`]: only the named environment variables.
//!
//! Every failure is a [`CapabilityError`], which maps one to one onto the WIT
//! `types.error` variant; a refusal is always [`CapabilityError::Denied`]
//! (also when the kernel or cap-std caught it: `EACCES`, `EPERM`, an escape
//! from the jail's directory handle), so the guard chain, the audit log and
//! the wire error read it without parsing strings.

pub mod confine;
pub mod fs;
pub mod http;
pub(crate) mod repository;
pub mod shell;

use std::fmt;

/// The longest URL a fetch may name, in bytes. Servers refuse far less
/// (8 KiB is common); the cap is what keeps a guest from making the host
/// parse, check and quote a URL the size of its memory.
pub const MAX_URL_BYTES: usize = 64 * 1024;

/// The most a fetch's request headers may hold, names and values together.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// The longest shell command line: the kernel refuses a longer single
/// argument (`MAX_ARG_STRLEN`), and `sh -c` gets the line as one.
pub const MAX_COMMAND_BYTES: usize = 128 * 1024;

/// The longest workspace path (`PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// Refuses `what` of `len` bytes past `max`, before anything reads it.
///
/// A guest can pass a string as long as its memory to any host call, and
/// the host's checks of it (parsing, pattern matching, the guard chain,
/// the refusal's text) run on threads every extension shares, where the
/// epoch deadline that stops a spinning guest does not reach: checking
/// the length first keeps each check small.
///
/// # Errors
///
/// [`CapabilityError::Invalid`] naming the length and the most allowed.
pub fn within_size(what: &str, len: usize, max: usize) -> Result<(), CapabilityError> {
    if len <= max {
        return Ok(());
    }
    Err(CapabilityError::Invalid(format!(
        "{what} is {len} bytes; the most is {max}"
    )))
}

/// Which capability a call used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// Reading, listing and describing workspace files.
    FsRead,
    /// Creating and replacing workspace files.
    FsWrite,
    /// HTTPS requests.
    Http,
    /// Shell commands.
    Shell,
    /// Environment variables.
    Env,
}

impl Capability {
    /// The name used on the wire and in manifests: `fs-read`, `fs-write`,
    /// `http`, `shell` or `env`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FsRead => "fs-read",
            Self::FsWrite => "fs-write",
            Self::Http => "http",
            Self::Shell => "shell",
            Self::Env => "env",
        }
    }

    /// The noun for one use of it in messages: ``read of `x` refused``.
    pub fn verb(self) -> &'static str {
        match self {
            Self::FsRead => "read",
            Self::FsWrite => "write",
            Self::Http => "fetch",
            Self::Shell => "command",
            Self::Env => "env read",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a capability call failed; maps one to one onto the WIT `types.error`.
///
/// A failure is an answer to the caller, not a trap: the guest keeps running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// Refused by the grant, the policy, the jail or the guard.
    #[error("{} of `{subject}` refused: {reason}", capability.verb())]
    Denied {
        /// The capability that was asked for.
        capability: Capability,
        /// What was asked for: a path, a URL, a command line.
        subject: String,
        /// Why it was refused, naming the rule that decided.
        reason: String,
    },
    /// The path or resource does not exist.
    #[error("`{0}` not found")]
    NotFound(String),
    /// A size cap was hit.
    #[error("{what} exceeds the {limit}-byte cap")]
    TooLarge {
        /// What was too large.
        what: String,
        /// The cap in bytes.
        limit: u64,
    },
    /// A time cap was hit.
    #[error("{what} timed out after {ms} ms")]
    Timeout {
        /// What took too long.
        what: String,
        /// The cap in milliseconds.
        ms: u64,
    },
    /// The request itself is malformed (a bad URL, an empty command, a bad glob).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The operation was allowed but failed (connection refused, an I/O error).
    #[error("{0}")]
    Failed(String),
}

impl CapabilityError {
    /// A [`CapabilityError::Denied`] from its parts.
    pub fn denied(
        capability: Capability,
        subject: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self::Denied {
            capability,
            subject: subject.into(),
            reason: reason.into(),
        }
    }

    /// Whether this is a refusal (as opposed to a failure of an allowed call).
    pub fn is_denied(&self) -> bool {
        matches!(self, Self::Denied { .. })
    }
}

/// Joins granted items for a refusal message: `a, b`, or `none`.
fn granted_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let list: Vec<&str> = items.into_iter().collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

/// The environment variables an extension was granted, as `(name, value)` pairs.
///
/// Only names in `names` that `lookup` finds are returned, in the order
/// named (duplicates once); nothing else of the host's environment ever is.
/// `lookup` is usually `|name| std::env::var(name).ok()`.
///
/// # Errors
///
/// [`CapabilityError::Invalid`] when a name is not a plain variable name
/// (`[A-Za-z_][A-Za-z0-9_]*`), so a manifest cannot smuggle in `A=B` or
/// patterns.
pub fn granted_env(
    names: &[String],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, CapabilityError> {
    let mut granted: Vec<(String, String)> = Vec::new();
    for name in names {
        validate_env_name(name)?;
        if granted.iter().any(|(seen, _)| seen == name) {
            continue;
        }
        if let Some(value) = lookup(name) {
            granted.push((name.clone(), value));
        }
    }
    Ok(granted)
}

/// Whether `name` is an environment (or shell) variable name: ASCII
/// letters, digits and `_`, not starting with a digit. The one rule for a
/// grant, a manifest's secret variable, a policy ceiling and the guard's
/// reading of `NAME=value`.
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn validate_env_name(name: &str) -> Result<(), CapabilityError> {
    if is_variable_name(name) {
        Ok(())
    } else {
        Err(CapabilityError::Invalid(format!(
            "`{}` is not an environment variable name; use letters, digits and `_`, \
             not starting with a digit",
            name.escape_default()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "LANG" => Some("C.UTF-8".to_owned()),
            "HOME" => Some("/home/user".to_owned()),
            "PATH" => Some("/usr/bin".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("hunter2".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn granted_env_returns_only_named_variables() {
        // (granted names, expected pairs)
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
        let cases: [Case<'_>; 5] = [
            // Nothing granted: nothing at all, not even HOME or PATH.
            (&[], &[]),
            // One name: only it, never HOME, PATH or secrets.
            (&["LANG"], &[("LANG", "C.UTF-8")]),
            // Missing names are skipped, not errors.
            (&["NOPE", "LANG"], &[("LANG", "C.UTF-8")]),
            // Duplicates appear once; order follows the grant.
            (
                &["EMPTY", "LANG", "EMPTY"],
                &[("EMPTY", ""), ("LANG", "C.UTF-8")],
            ),
            // Names are exact: no case folding, no prefixes.
            (&["lang", "LAN", "LANG_"], &[]),
        ];
        for (granted, expected) in cases {
            let got = granted_env(&names(granted), lookup).unwrap_or_else(|e| panic!("{e}"));
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect();
            assert_eq!(got, expected, "grant {granted:?}");
            for (name, _) in &got {
                assert!(
                    !matches!(name.as_str(), "HOME" | "PATH" | "AWS_SECRET_ACCESS_KEY"),
                    "{name} leaked"
                );
            }
        }
    }

    #[test]
    fn granted_env_refuses_names_that_are_not_plain() {
        let cases = [
            // Attack: an assignment smuggled in as a name.
            "LANG=evil",
            // Attack: a pattern that would match every variable.
            "*",
            // Empty and digit-first names.
            "",
            "1PATH",
            // Whitespace and NUL.
            "A B",
            "A\0",
        ];
        for name in cases {
            let err = granted_env(&names(&[name]), lookup).err();
            assert!(
                matches!(&err, Some(CapabilityError::Invalid(m)) if m.contains("not an environment variable name")),
                "{name:?}: {err:?}"
            );
        }
    }

    #[test]
    fn denied_reads_as_one_sentence() {
        let err = CapabilityError::denied(
            Capability::Http,
            "http://x.dev/a",
            "only https URLs are allowed",
        );
        assert_eq!(
            err.to_string(),
            "fetch of `http://x.dev/a` refused: only https URLs are allowed"
        );
        assert!(err.is_denied());
        let names: Vec<&str> = [
            Capability::FsRead,
            Capability::FsWrite,
            Capability::Http,
            Capability::Shell,
            Capability::Env,
        ]
        .iter()
        .map(|c| c.as_str())
        .collect();
        assert_eq!(names, ["fs-read", "fs-write", "http", "shell", "env"]);
        assert_eq!(
            serde_json::to_string(&Capability::FsWrite).ok().as_deref(),
            Some("\"fs-write\"")
        );
    }
}
