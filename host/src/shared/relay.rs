//! The relay: what `zotbox run` is under zot when the shared host is in use.
//!
//! It finds the host (starting one under the lock if none listens), hands
//! it zot's stdin and stdout, and waits for the extension's exit status to
//! exit with it. It never starts wasmtime and never reads a frame, except
//! to answer zot's requests in flight after the host died.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::fs::FileTypeExt as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::peer::{self, PeerError};
use super::place::{Place, PlaceError};
use super::wire::{HostStatus, Reply, Request, send_request};
use crate::home::ZotHome;
use crate::runtime::Exit;

/// How long a relay waits for the start lock, and for a new host to listen.
const START_PATIENCE: Duration = Duration::from_secs(20);

/// How many times the host may die under one relay within
/// [`RESTART_WINDOW`] before the relay gives up.
const MAX_RESTARTS: usize = 5;
const RESTART_WINDOW: Duration = Duration::from_secs(60);

/// The relay could not hand the extension to a host.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The socket's folder is unsafe or unusable.
    #[error(transparent)]
    Place(#[from] PlaceError),
    /// The process at the socket runs as another user.
    #[error("the zotbox host at `{}`: {error}", socket.display())]
    Peer {
        /// The socket.
        socket: PathBuf,
        /// What is wrong.
        error: PeerError,
    },
    /// Something that is not a socket sits where the socket belongs.
    #[error("`{}` is not a socket; refusing to remove it", path.display())]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A host could not be started.
    #[error("cannot start the zotbox host: {why} (see `{}`)", log.display())]
    Start {
        /// Why.
        why: String,
        /// The host's log.
        log: PathBuf,
    },
    /// The host keeps ending.
    #[error("the zotbox host ended {MAX_RESTARTS} times within a minute; giving up (see `{}`)", log.display())]
    KeepsDying {
        /// The host's log.
        log: PathBuf,
    },
    /// The extension cannot run: the host's error, as standalone prints it.
    #[error("{0}")]
    Failed(String),
    /// Talking to the host failed.
    #[error("talking to the zotbox host: {0}")]
    Io(#[from] std::io::Error),
}

impl RelayError {
    /// Whether running the extension in this process instead is the right
    /// answer: the host is unavailable, not the extension at fault and no
    /// one else's process at the socket.
    pub fn falls_back(&self) -> bool {
        matches!(
            self,
            Self::Place(_) | Self::Start { .. } | Self::KeepsDying { .. } | Self::Io(_)
        )
    }
}

/// What became of a relayed extension.
#[derive(Debug)]
pub enum Relayed {
    /// The host ran it, and it ended so.
    Exit(Exit),
    /// This process should host it: the environment says so, it is no wasm
    /// extension (or its manifest does not load: standalone reports why), or
    /// the shared host is unavailable (why, for zot's log).
    Standalone(Option<String>),
    /// It cannot run, or someone else's process sits at the socket.
    Failed(RelayError),
}

/// The name of the wasm extension in `dir`, from a quick look at its
/// manifest (the host reads it in full); `None` when it names no `wasm`
/// program or does not parse.
pub fn wasm_extension(dir: &Path) -> Option<String> {
    let path = dir.join(crate::manifest::MANIFEST_FILE);
    let text = crate::user_file::read_regular(&path, crate::user_file::MAX_MANIFEST_BYTES)
        .ok()
        .flatten()?;
    let manifest: serde_json::Value = serde_json::from_slice(&text).ok()?;
    manifest.get("wasm")?.as_str()?;
    Some(manifest.get("name")?.as_str()?.to_owned())
}

/// Relays the extension in `dir` to the shared host of `home` (started from
/// the zotbox executable `zotbox`, of build `build`), unless it should run
/// in this process.
pub fn launch(dir: &Path, home: &ZotHome, zotbox: &Path, build: &str) -> Relayed {
    if super::standalone_from_env() {
        return Relayed::Standalone(None);
    }
    let Some(name) = wasm_extension(dir) else {
        return Relayed::Standalone(None);
    };
    match relay(dir, &name, home, zotbox, build) {
        Ok(exit) => Relayed::Exit(exit),
        Err(err) if err.falls_back() => Relayed::Standalone(Some(format!(
            "zotbox: {}; hosting the extension in this process",
            crate::text::shown(&err.to_string())
        ))),
        Err(err) => Relayed::Failed(err),
    }
}

/// Relays the extension in `dir` (named `name`, for messages) to the shared
/// host of `home`, started from the zotbox executable `zotbox` (of build
/// `build`) when none runs; returns its exit.
///
/// # Errors
///
/// [`RelayError`]; see [`RelayError::falls_back`].
pub fn relay(
    dir: &Path,
    name: &str,
    home: &ZotHome,
    zotbox: &Path,
    build: &str,
) -> Result<Exit, RelayError> {
    let place = Place::for_home(home)?;
    // As zot spelled it, so the host sees a workspace's extension folder
    // that is a link as that workspace's.
    let dir = match crate::store::trust::as_spelled(dir) {
        Some(spelled) => spelled,
        None => std::path::absolute(dir)?,
    };
    let build = build.to_owned();
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let shared_stdout = crate::bridge::stdio::stdout_is_stderr();
    let log = home.logs_dir().join("zotbox-host.log");
    let mut hello_ack: Option<String> = None;
    let mut deaths: Vec<Instant> = Vec::new();
    let mut refusals = 0;
    loop {
        let stream = connect_or_start(&place, home, zotbox, &log)?;
        peer::check(&stream).map_err(|error| RelayError::Peer {
            socket: place.socket().to_owned(),
            error,
        })?;
        let request = Request::Open {
            build: build.clone(),
            dir: dir.clone(),
            env: env.clone(),
            resume: hello_ack.clone(),
            shared_stdout,
        };
        send_request(
            &stream,
            &request,
            &[
                std::io::stdin().as_fd(),
                std::io::stdout().as_fd(),
                std::io::stderr().as_fd(),
            ],
        )?;
        let mut welcomed = false;
        let mut in_flight: Vec<(String, String)> = Vec::new();
        let mut replies = BufReader::new(&stream);
        let mut text = String::new();
        let lost = loop {
            text.clear();
            match replies.read_line(&mut text) {
                Ok(0) | Err(_) => break true,
                Ok(_) => {}
            }
            match serde_json::from_str::<Reply>(&text) {
                Ok(Reply::Welcome { .. }) => welcomed = true,
                Ok(Reply::Retired { build: theirs }) => {
                    tracing::info!(
                        "the zotbox host was of build {theirs}; starting one of {build}"
                    );
                    break false;
                }
                Ok(Reply::Failed { error }) => return Err(RelayError::Failed(error)),
                Ok(Reply::HelloAck { line }) => hello_ack = Some(line),
                Ok(Reply::InFlight { requests }) => in_flight = requests,
                Ok(Reply::Exit { exit }) => return Ok(exit.into()),
                Ok(Reply::Status { .. } | Reply::Stopping) => {}
                Err(err) => tracing::warn!("an unreadable line from the zotbox host: {err}"),
            }
        };
        drop(replies);
        if !lost || !welcomed {
            // Retired, or gone before it took the extension: nothing of
            // zot's was read yet. Find (or start) a host again.
            refusals += 1;
            if refusals > MAX_RESTARTS {
                return Err(RelayError::Start {
                    why: "no host took the extension".to_owned(),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        // The host died with the extension: answer what it owed, say so,
        // and start the extension again.
        deaths.retain(|at| at.elapsed() < RESTART_WINDOW);
        deaths.push(Instant::now());
        if deaths.len() >= MAX_RESTARTS {
            return Err(RelayError::KeepsDying { log });
        }
        tracing::warn!("the zotbox host ended; restarting extension `{name}`");
        owe_answers(name, &in_flight)?;
    }
}

/// Writes to zot, on this relay's own stdout, an error for each request in
/// flight and a `notify` that the extension restarted.
fn owe_answers(name: &str, in_flight: &[(String, String)]) -> std::io::Result<()> {
    // The host made zot's pipes non-blocking; blocking writes are wanted now.
    for fd in [
        std::io::stdin().as_fd().try_clone_to_owned()?,
        std::io::stdout().as_fd().try_clone_to_owned()?,
    ] {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        if let Ok(flags) = fcntl(&fd, FcntlArg::F_GETFL) {
            let flags = OFlag::from_bits_truncate(flags) - OFlag::O_NONBLOCK;
            let _ = fcntl(&fd, FcntlArg::F_SETFL(flags));
        }
    }
    let shown = crate::text::shown(name);
    let mut lines = Vec::new();
    for (id, frame_type) in in_flight {
        let why = format!(
            "the zotbox host running extension `{shown}` ended before it answered; \
             the extension was restarted: try again"
        );
        if let Some(answer) = zotbox_protocol::failed_request(frame_type, id.clone(), why)
            && let Ok(line) = zotbox_protocol::encode_to_vec(&answer)
        {
            lines.extend_from_slice(&line);
        }
    }
    let notify = zotbox_protocol::ExtensionFrame::Notify(zotbox_protocol::Notify {
        level: "warn".to_owned(),
        message: format!("zotbox: extension `{shown}` restarted (its host ended)"),
    });
    if let Ok(line) = zotbox_protocol::encode_to_vec(&notify) {
        lines.extend_from_slice(&line);
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&lines)?;
    stdout.flush()
}

/// A connection to the host of `place`, starting one if none listens.
fn connect_or_start(
    place: &Place,
    home: &ZotHome,
    exe: &Path,
    log: &Path,
) -> Result<UnixStream, RelayError> {
    if let Ok(stream) = UnixStream::connect(place.socket()) {
        return Ok(stream);
    }
    let _lock = place.lock(START_PATIENCE)?;
    // Another relay may have started it while this one waited.
    if let Ok(stream) = UnixStream::connect(place.socket()) {
        return Ok(stream);
    }
    remove_stale(place.socket())?;
    let start_error = |why: String| RelayError::Start {
        why,
        log: log.to_owned(),
    };
    let mut child = spawn_host(exe, home, log).map_err(|err| start_error(err.to_string()))?;
    let deadline = Instant::now() + START_PATIENCE;
    loop {
        if let Ok(stream) = UnixStream::connect(place.socket()) {
            // The host outlives this relay; it is reaped by whoever inherits it.
            drop(child);
            return Ok(stream);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(start_error(format!("it {status}")));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            return Err(start_error(format!(
                "it did not listen within {} s",
                START_PATIENCE.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Removes the socket at `path` nobody listens on (a host that died).
fn remove_stale(path: &Path) -> Result<(), RelayError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            tracing::info!("removing the stale socket `{}`", path.display());
            std::fs::remove_file(path)?;
            Ok(())
        }
        Ok(_) => Err(RelayError::NotASocket {
            path: path.to_owned(),
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Starts `exe host serve` for `home`, detached from zot's terminal and
/// stdio, its log appended to `log`.
fn spawn_host(exe: &Path, home: &ZotHome, log: &Path) -> std::io::Result<std::process::Child> {
    let log = crate::home::open_append(log)?;
    let mut command = std::process::Command::new(exe);
    // Its log says when it started, retired and stopped, unless told otherwise.
    if std::env::var_os("ZOTBOX_LOG").is_none() {
        command.env("ZOTBOX_LOG", "info");
    }
    command
        .arg("--zot-home")
        .arg(home.root())
        .args(["host", "serve"])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        // Its own process group: zot's Ctrl-C and a kill of the
        // extension's group leave the other sessions' extensions alone.
        .process_group(0)
        .spawn()
}

/// A connection to the running host of `home`, if one listens.
fn connect(home: &ZotHome) -> Result<Option<UnixStream>, RelayError> {
    let place = Place::for_home(home)?;
    let Ok(stream) = UnixStream::connect(place.socket()) else {
        return Ok(None);
    };
    peer::check(&stream).map_err(|error| RelayError::Peer {
        socket: place.socket().to_owned(),
        error,
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(Some(stream))
}

/// Sends `request` to the host of `home` and reads one reply.
fn ask(home: &ZotHome, request: &Request) -> Result<Option<Reply>, RelayError> {
    let Some(stream) = connect(home)? else {
        return Ok(None);
    };
    send_request(&stream, request, &[])?;
    let mut text = String::new();
    BufReader::new(&stream).read_line(&mut text)?;
    match serde_json::from_str::<Reply>(&text) {
        Ok(Reply::Failed { error }) => Err(RelayError::Failed(error)),
        Ok(reply) => Ok(Some(reply)),
        Err(err) => Err(RelayError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the host answered `{}`: {err}",
                crate::text::shown(text.trim_end())
            ),
        ))),
    }
}

/// See [`super::status`].
pub(crate) fn status(home: &ZotHome) -> Result<Option<HostStatus>, RelayError> {
    Ok(match ask(home, &Request::Status)? {
        Some(Reply::Status { status }) => Some(status),
        _ => None,
    })
}

/// See [`super::stop`].
pub(crate) fn stop(home: &ZotHome) -> Result<bool, RelayError> {
    Ok(matches!(ask(home, &Request::Stop)?, Some(Reply::Stopping)))
}
