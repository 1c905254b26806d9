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
    /// `zotbox-relay --attached FD` could not take over the socket `zotbox
    /// run` handed the extension over on.
    #[error("--attached `{}`: {why}", crate::text::shown(fd))]
    Attached {
        /// The argument.
        fd: String,
        /// What is wrong.
        why: String,
    },
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
    /// the shared host is unavailable (`why`, for zot's log); after zot's
    /// handshake, with zot's `hello_ack` to `resume` with.
    Standalone {
        /// Why, for zot's log.
        why: Option<String>,
        /// zot's `hello_ack`, when zot already sent it.
        resume: Option<String>,
    },
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
///
/// With `waiter`, the small relay executable, this process only hands the
/// extension over and then replaces itself with `waiter --attached FD DIR`
/// ([`resume`]) to wait for its exit: the hand-over is not delayed by a
/// second program's start, and what stays for zot's whole session is the
/// small program. Should that `exec` fail, this process waits itself.
pub fn launch(
    dir: &Path,
    home: &ZotHome,
    zotbox: &Path,
    build: &str,
    waiter: Option<&Path>,
) -> Relayed {
    if super::standalone_from_env() {
        return Relayed::Standalone {
            why: None,
            resume: None,
        };
    }
    let Some(name) = wasm_extension(dir) else {
        return Relayed::Standalone {
            why: None,
            resume: None,
        };
    };
    let mut relay = match Relay::new(dir, &name, home, zotbox, build) {
        Ok(relay) => relay,
        Err(err) => return relayed_as(Err(err), None),
    };
    let relayed = relay.hand_over().and_then(|stream| {
        if let Some(waiter) = waiter {
            let err = exec_waiter(waiter, &stream, &relay.dir, home);
            tracing::warn!(
                "cannot start `{}`: {err}; waiting in this process",
                waiter.display()
            );
        }
        relay.follow(stream)
    });
    relayed_as(relayed, relay.hello_ack.take())
}

/// The relay of `zotbox-relay --attached FD DIR`: waits on the socket `fd`,
/// which [`launch`] handed the extension in `dir` over on and left open
/// across its `exec`, as `Relay::follow` does.
///
/// The host holds the extension by then, so a failure to take the socket
/// over is [`Relayed::Failed`], never a fallback to hosting it here too.
pub fn resume(fd: &str, dir: &Path, home: &ZotHome, zotbox: &Path, build: &str) -> Relayed {
    let taken = attached(fd).and_then(|stream| {
        // The name is only for messages; `launch` found a wasm extension.
        let name = wasm_extension(dir).unwrap_or_else(|| dir.display().to_string());
        let relay = Relay::new(dir, &name, home, zotbox, build).map_err(|e| e.to_string())?;
        relay.check(&stream).map_err(|e| e.to_string())?;
        Ok((relay, stream))
    });
    match taken {
        Ok((mut relay, stream)) => {
            let relayed = relay.follow(stream);
            relayed_as(relayed, relay.hello_ack.take())
        }
        Err(why) => Relayed::Failed(RelayError::Attached {
            fd: fd.to_owned(),
            why,
        }),
    }
}

/// What [`launch`] and [`resume`] make of a relay's result; `hello_ack`,
/// zot's, once it passed: zot does not send it twice, so an extension
/// hosted in this process from then on resumes with it, whichever failure
/// of the host brought it here (one that died again and again, one that
/// could not be started again).
fn relayed_as(relayed: Result<Exit, RelayError>, hello_ack: Option<String>) -> Relayed {
    match relayed {
        Ok(exit) => Relayed::Exit(exit),
        Err(err) if err.falls_back() => Relayed::Standalone {
            why: Some(format!(
                "zotbox: {}; hosting the extension in this process",
                crate::text::shown(&err.to_string())
            )),
            resume: hello_ack,
        },
        Err(err) => Relayed::Failed(err),
    }
}

/// Replaces this process with `waiter --attached FD DIR`, `stream` left
/// open for it as `FD`; returns only when that fails.
fn exec_waiter(waiter: &Path, stream: &UnixStream, dir: &Path, home: &ZotHome) -> std::io::Error {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    if let Err(err) = fcntl(stream, FcntlArg::F_SETFD(FdFlag::empty())) {
        return err.into();
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(stream);
    let err = std::process::Command::new(waiter)
        .arg("--attached")
        .arg(fd.to_string())
        .arg(dir)
        .env("ZOT_HOME", home.root())
        .exec();
    // Not inherited by anything this process starts later.
    let _ = fcntl(stream, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    err
}

/// The socket `fd` (its number, as [`exec_waiter`] wrote it), taken over
/// by this process.
fn attached(fd: &str) -> Result<UnixStream, String> {
    let raw: std::os::fd::RawFd = fd
        .parse()
        .map_err(|_| "not a descriptor number".to_owned())?;
    // Never zot's stdio, and only an open socket: a wrong number must not
    // make this process own a descriptor something else owns.
    let socket = raw > 2
        && std::fs::read_link(format!("/proc/self/fd/{raw}")).is_ok_and(|target| {
            target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(b"socket:")
        });
    if !socket {
        return Err("not an open socket".to_owned());
    }
    // SAFETY: `raw` is open (just checked) and, inherited from the process
    // this one replaced, owned by no other part of this process.
    #[allow(unsafe_code)]
    let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    Ok(UnixStream::from(owned))
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
    let mut relay = Relay::new(dir, name, home, zotbox, build)?;
    let stream = relay.hand_over()?;
    relay.follow(stream)
}

/// One extension's relay: what it keeps while the host takes, loses and
/// takes its extension again.
pub(crate) struct Relay {
    place: Place,
    home: ZotHome,
    zotbox: PathBuf,
    /// The extension's folder, as zot spelled it.
    dir: PathBuf,
    /// The extension's name, for messages.
    name: String,
    build: String,
    /// The environment granted variables come from: the relay's own.
    env: Vec<(String, String)>,
    /// How the relay was started, which the host judges `dir` by.
    started: crate::store::trust::Started,
    shared_stdout: bool,
    /// The host's log, named in errors.
    log: PathBuf,
    /// zot's `hello_ack`, once passed: a restarted guest gets it again.
    hello_ack: Option<String>,
    deaths: Vec<Instant>,
    refusals: usize,
}

impl Relay {
    /// The relay of the extension in `dir` (named `name`) to the host of
    /// `home`, started from `zotbox` (of build `build`) when none runs.
    ///
    /// # Errors
    ///
    /// [`RelayError::Place`] when the socket's folder is unusable,
    /// [`RelayError::Io`] when `dir` has no absolute form.
    pub(crate) fn new(
        dir: &Path,
        name: &str,
        home: &ZotHome,
        zotbox: &Path,
        build: &str,
    ) -> Result<Self, RelayError> {
        let place = Place::for_home(home)?;
        // As zot spelled it, so the host sees a workspace's extension folder
        // that is a link as that workspace's.
        let dir = match crate::store::trust::as_spelled(dir) {
            Some(spelled) => spelled,
            None => std::path::absolute(dir)?,
        };
        Ok(Self {
            place,
            home: home.clone(),
            zotbox: zotbox.to_owned(),
            dir,
            name: name.to_owned(),
            build: build.to_owned(),
            env: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
            started: crate::store::trust::Started::this_process(),
            shared_stdout: crate::bridge::stdio::stdout_is_stderr(),
            log: home.logs_dir().join("zotbox-host.log"),
            hello_ack: None,
            deaths: Vec::new(),
            refusals: 0,
        })
    }

    /// Finds the host (starting one if none listens), checks it is this
    /// user's, and hands it the extension with zot's stdin, stdout and
    /// stderr. Nothing is read back: the stream's first reply is
    /// `Relay::follow`'s, in this process or in one this one `exec`s.
    ///
    /// # Errors
    ///
    /// [`RelayError`]: no host could be started or reached, or someone
    /// else's process listens.
    pub(crate) fn hand_over(&self) -> Result<UnixStream, RelayError> {
        let stream = connect_or_start(&self.place, &self.home, &self.zotbox, &self.log)?;
        self.check(&stream)?;
        let request = Request::Open {
            token: self.place.token()?,
            build: self.build.clone(),
            dir: self.dir.clone(),
            env: self.env.clone(),
            started: self.started.clone(),
            resume: self.hello_ack.clone(),
            shared_stdout: self.shared_stdout,
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
        Ok(stream)
    }

    /// Checks the process at the other end of `stream` runs as this user.
    ///
    /// # Errors
    ///
    /// [`RelayError::Peer`] when it does not (or `stream` is no socket).
    pub(crate) fn check(&self, stream: &UnixStream) -> Result<(), RelayError> {
        peer::check(stream)
            .map(drop)
            .map_err(|error| RelayError::Peer {
                socket: self.place.socket().to_owned(),
                error,
            })
    }

    /// Waits on `stream`, handed over by [`Relay::hand_over`], for the
    /// extension's exit; when the host dies with it, answers what zot
    /// was owed, says so, and hands the extension over again.
    ///
    /// # Errors
    ///
    /// [`RelayError`]; see [`RelayError::falls_back`].
    pub(crate) fn follow(&mut self, mut stream: UnixStream) -> Result<Exit, RelayError> {
        loop {
            let mut welcomed = false;
            let mut in_flight: Vec<(String, String)> = Vec::new();
            // zot's stdout stands inside a line the host was writing.
            let mut cut = false;
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
                            "the zotbox host was of build {theirs}; starting one of {}",
                            self.build
                        );
                        break false;
                    }
                    Ok(Reply::Failed { error }) => return Err(RelayError::Failed(error)),
                    Ok(Reply::HelloAck { line }) => self.hello_ack = Some(line),
                    Ok(Reply::InFlight { requests }) => in_flight = requests,
                    Ok(Reply::Cut { inside }) => cut = inside,
                    Ok(Reply::Exit { exit }) => return Ok(exit.into()),
                    Ok(Reply::Status { .. } | Reply::Stopping) => {}
                    Err(err) => tracing::warn!("an unreadable line from the zotbox host: {err}"),
                }
            };
            drop(replies);
            if !lost || !welcomed {
                // Retired, or gone before it took the extension: nothing of
                // zot's was read yet. Find (or start) a host again.
                self.refusals += 1;
                if self.refusals > MAX_RESTARTS {
                    return Err(RelayError::Start {
                        why: "no host took the extension".to_owned(),
                        log: self.log.clone(),
                    });
                }
                std::thread::sleep(Duration::from_millis(10));
            } else {
                // The host died with the extension: answer what it owed, say
                // so, and start the extension again.
                self.deaths.retain(|at| at.elapsed() < RESTART_WINDOW);
                self.deaths.push(Instant::now());
                owe_answers(&self.name, &in_flight, cut)?;
                if self.deaths.len() >= MAX_RESTARTS {
                    return Err(RelayError::KeepsDying {
                        log: self.log.clone(),
                    });
                }
                tracing::warn!(
                    "the zotbox host ended; restarting extension `{}`",
                    self.name
                );
            }
            stream = self.hand_over()?;
        }
    }
}

/// Writes to zot, on this relay's own stdout, an error for each request in
/// flight and a `notify` that the extension restarted; after a newline
/// first when the host died inside a line (`cut`), which would otherwise
/// swallow them.
fn owe_answers(name: &str, in_flight: &[(String, String)], cut: bool) -> std::io::Result<()> {
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
    if cut {
        lines.push(b'\n');
    }
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

/// The size past which a new host starts a new log, keeping the last as
/// `zotbox-host.log.1`.
const MAX_HOST_LOG_BYTES: u64 = 16 * 1024 * 1024;

/// Starts `exe host serve` for `home`, detached from zot's terminal and
/// stdio, its log appended to `log`.
fn spawn_host(exe: &Path, home: &ZotHome, log: &Path) -> std::io::Result<std::process::Child> {
    // One earlier log is kept: each instance's diagnostics are held to a
    // budget, but a host lives for days and many sessions.
    if std::fs::metadata(log).is_ok_and(|meta| meta.len() > MAX_HOST_LOG_BYTES) {
        let mut older = log.as_os_str().to_owned();
        older.push(".1");
        let _ = std::fs::rename(log, older);
    }
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

/// A connection to the running host of `home`, if one listens, and its
/// token.
fn connect(home: &ZotHome) -> Result<Option<(UnixStream, String)>, RelayError> {
    let place = Place::for_home(home)?;
    let Ok(stream) = UnixStream::connect(place.socket()) else {
        return Ok(None);
    };
    peer::check(&stream).map_err(|error| RelayError::Peer {
        socket: place.socket().to_owned(),
        error,
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(Some((stream, place.token()?)))
}

/// Sends the request `of` the host's token to the host of `home` and
/// reads one reply.
fn ask(home: &ZotHome, of: fn(String) -> Request) -> Result<Option<Reply>, RelayError> {
    let Some((stream, token)) = connect(home)? else {
        return Ok(None);
    };
    send_request(&stream, &of(token), &[])?;
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
    Ok(match ask(home, |token| Request::Status { token })? {
        Some(Reply::Status { status }) => Some(status),
        _ => None,
    })
}

/// See [`super::stop`].
pub(crate) fn stop(home: &ZotHome) -> Result<bool, RelayError> {
    Ok(matches!(
        ask(home, |token| Request::Stop { token })?,
        Some(Reply::Stopping)
    ))
}
