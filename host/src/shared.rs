//! The shared host: one zotbox process per user (and `$ZOT_HOME`) runs every
//! sandboxed extension of every zot session, with one wasm engine and one set
//! of compiled programs; `zotbox run`, what zot starts for each extension,
//! is a thin relay to it.
//!
//! # Rules
//!
//! 1. **Only the user reaches it.** The socket lives in a folder only the
//!    user can enter (`$XDG_RUNTIME_DIR/zotbox`, else `$ZOT_HOME/run`: owned
//!    by the user, mode `0700`, not a link; anything else is refused, and the
//!    relay runs the extension itself). The host checks each peer's uid
//!    (`SO_PEERCRED`) and refuses anyone else; the relay checks the host's.
//!    The uid is not enough: a shell command zotbox confines runs as the
//!    user and may connect (the kernel checks no file access on connecting
//!    to a socket), so every request carries the token the host wrote
//!    beside its socket, which such a command cannot read (`place`).
//! 2. **Never mixed.** Relay and host compare build ids (the version and the
//!    identity of the executable file). A host of another build retires: it
//!    removes its socket, accepts no one, and exits when its instances end;
//!    the relay starts a host of its own build.
//! 3. **One host.** The relay starts the host under a lock, so relays
//!    starting at once start one; a socket nobody listens on is stale and is
//!    replaced under the same lock. The host exits after an idle period with
//!    no instances.
//! 4. **Each relay is its own instance**, exactly as `zotbox run
//!    --standalone` would run it: the manifest, trust and policy are read
//!    for each (`bridge::prepare`); the workspace is its own zot's
//!    `hello_ack`; the log and the audit attribution are the extension's.
//!    Granted variables come from the relay's environment, not the host's.
//! 5. **The relay is not in the data path.** It hands zot's stdin and stdout
//!    to the host (`SCM_RIGHTS`) and waits, so a frame costs what it costs
//!    standalone. It does not start wasmtime. `zotbox run` hands over
//!    itself and then waits as the small `zotbox-relay --attached FD`,
//!    which takes over only an open socket whose peer is this user's, and
//!    never hosts the extension itself (the host may hold it already).
//! 6. **Faults stay contained.** A guest that traps ends alone. A relay
//!    whose host dies answers zot's requests in flight with an error (a
//!    request is in flight from the first bytes that name its type and id),
//!    tells zot in a `notify` that the extension restarted, and starts it
//!    again (a new host if needed), giving the new guest zot's first
//!    `hello_ack`; the new host drops the rest of a line the old one had
//!    begun. Should the host die inside a line it was writing to zot, the
//!    relay (told the moment the stream stood inside one) begins its own
//!    lines with a newline. A relay that goes away (zot ended it) ends its
//!    instance at once.

mod line_end;
pub mod peer;
pub mod place;
pub mod relay;
pub mod server;
mod wire;

pub use place::{Place, PlaceError};
pub use relay::{RelayError, Relayed, launch, relay, resume, wasm_extension};
pub use server::{ServeOptions, serve};
pub use wire::{HostStatus, InstanceStatus};

/// What `zotbox host compile` runs: the shared host compiles each program it
/// has not compiled before in that child process, so the compiler's code and
/// heap never stay resident in the host.
pub use crate::runtime::wasm::{COMPILE_CPU_SECS, compile_into_cache};

/// The idle period after which a host with no instances exits, unless
/// `ZOTBOX_HOST_IDLE` (seconds) says otherwise.
pub const DEFAULT_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// `ZOTBOX_HOST_IDLE`, or [`DEFAULT_IDLE`].
pub fn idle_from_env() -> std::time::Duration {
    std::env::var("ZOTBOX_HOST_IDLE")
        .ok()
        .and_then(|secs| secs.trim().parse::<f64>().ok())
        .filter(|secs| secs.is_finite() && *secs >= 0.0)
        .map_or(DEFAULT_IDLE, std::time::Duration::from_secs_f64)
}

/// The exit status `zotbox run` gives zot for `exit`, and the line it
/// writes on stderr (zot's log of the extension) when the exit was not a
/// plain status.
pub fn status_for_zot(exit: &crate::Exit) -> (u8, Option<String>) {
    match exit {
        crate::Exit::Code(code) => (u8::try_from(*code).unwrap_or(1), None),
        other => (
            1,
            Some(format!(
                "zotbox: the extension {}",
                crate::text::shown(&other.to_string())
            )),
        ),
    }
}

/// Whether the environment asks for `zotbox run` to host the extension
/// itself (`ZOTBOX_STANDALONE=1`).
pub fn standalone_from_env() -> bool {
    std::env::var("ZOTBOX_STANDALONE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// What the host running for `home` says about itself, if one runs.
///
/// # Errors
///
/// [`relay::RelayError`] when the socket's folder is unsafe or the host
/// answers something unexpected.
pub fn status(home: &crate::home::ZotHome) -> Result<Option<HostStatus>, RelayError> {
    relay::status(home)
}

/// Asks the host running for `home` to stop (its instances end first);
/// whether one was running.
///
/// # Errors
///
/// As [`status`].
pub fn stop(home: &crate::home::ZotHome) -> Result<bool, RelayError> {
    relay::stop(home)
}
