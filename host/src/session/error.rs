//! How a session, or a request in it, fails.

use std::fmt;
use std::time::Duration;

use crate::runtime::Exit;

/// A session could not be established.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// No frame arrived in time.
    #[error("extension `{name}` sent no `hello` within {after:?}")]
    NoHello {
        /// The extension (manifest name).
        name: String,
        /// The deadline.
        after: Duration,
    },
    /// The first frame was something else.
    #[error("extension `{name}` sent `{found}` before `hello`; the first frame must be `hello`")]
    NotHello {
        /// The extension.
        name: String,
        /// The frame type it sent.
        found: &'static str,
    },
    /// It stopped before finishing the handshake.
    #[error("extension `{name}` ended before it was ready: {reason}")]
    EndedEarly {
        /// The extension.
        name: String,
        /// Why it ended.
        reason: Closed,
    },
    /// Registration did not end in time.
    #[error("extension `{name}` did not finish registering within {after:?}")]
    RegistrationTimeout {
        /// The extension.
        name: String,
        /// The deadline.
        after: Duration,
    },
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closed {
    /// The extension stopped running.
    Exited(Exit),
    /// Its output stream ended while it kept running.
    StreamEnded,
    /// The host shut it down.
    ShutDown,
}

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exited(exit) => exit.fmt(f),
            Self::StreamEnded => f.write_str("closed its output"),
            Self::ShutDown => f.write_str("was shut down"),
        }
    }
}

/// A request to an extension failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The extension went away before answering (or was already gone).
    #[error("{extension}: {reason}")]
    Closed {
        /// The extension's identity.
        extension: String,
        /// Why it went away.
        reason: Closed,
    },
    /// No answer within the deadline.
    #[error("{extension}: {what} timed out after {}", humanize(*after))]
    Timeout {
        /// The extension's identity.
        extension: String,
        /// What was asked (`tool `x``).
        what: String,
        /// The deadline.
        after: Duration,
    },
    /// The answer was of the wrong type.
    #[error("{extension}: answered {what} with `{got}` instead of `{expected}`")]
    WrongAnswer {
        /// The extension's identity.
        extension: String,
        /// What was asked.
        what: String,
        /// The frame type expected.
        expected: &'static str,
        /// The frame type received.
        got: &'static str,
    },
}

fn humanize(duration: Duration) -> String {
    if duration.as_millis().is_multiple_of(1000) {
        format!("{}s", duration.as_secs())
    } else {
        format!("{}ms", duration.as_millis())
    }
}
