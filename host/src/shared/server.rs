//! The shared host: accepts relays on the socket and runs one extension
//! instance for each, until it has had none for its idle period.

use std::collections::HashMap;
use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::watch;

use super::place::Place;
use super::wire::{ExitWire, HostStatus, InstanceStatus, Reply, Request, line, recv_request};
use crate::audit::AuditLog;
use crate::bridge::{self, BridgeConfig, Hosted, Tap};
use crate::home::ZotHome;
use crate::runtime::Launcher;

/// How long an ended instance waits for its last diagnostics to reach
/// zot's log of it: a log nobody reads costs its end this, and no more.
const LOG_PATIENCE: Duration = Duration::from_secs(2);

/// How long a new connection may take to send its request.
const REQUEST_PATIENCE: Duration = Duration::from_secs(10);

/// How a host runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Exit after this long with no connection.
    pub idle: Duration,
    /// The build to claim (tests of a mismatch); `None`: this one's.
    pub build: Option<String>,
    /// The zotbox executable first compiles run in (`zotbox host compile`).
    pub compiler: std::path::PathBuf,
}

/// The host could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be bound.
    #[error("cannot listen on `{}`: {error}", path.display())]
    Bind {
        /// The socket.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The wasm engine could not be set up.
    #[error(transparent)]
    Engine(#[from] crate::runtime::wasm::WasmError),
    /// The token could not be made or written.
    #[error(transparent)]
    Token(#[from] super::PlaceError),
}

/// What every connection shares.
struct State {
    home: ZotHome,
    build: String,
    started: Instant,
    launcher: Launcher,
    /// One audit log for every instance.
    audit: Arc<AuditLog>,
    socket: PathBuf,
    /// The socket file's (device, inode): it is removed only while it is ours.
    identity: (u64, u64),
    retired: watch::Sender<bool>,
    connections: watch::Sender<usize>,
    instances: Mutex<HashMap<u64, Instance>>,
    next_instance: std::sync::atomic::AtomicU64,
    /// What every request must carry ([`Place::new_token`]).
    token: String,
}

struct Instance {
    name: String,
    dir: PathBuf,
    workspace: Option<PathBuf>,
    relay_pid: i32,
    started: Instant,
}

impl State {
    /// Removes the socket, if it is still the one this host bound.
    fn unlink_socket(&self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.socket)
            && (meta.dev(), meta.ino()) == self.identity
        {
            let _ = std::fs::remove_file(&self.socket);
        }
    }

    /// Accepts no one from now on: exits when the connections have ended.
    fn retire(&self) {
        if !*self.retired.borrow() {
            tracing::info!("retiring: no new relays; exiting when the last instance ends");
            self.unlink_socket();
            let _ = self.retired.send(true);
        }
    }

    fn status(&self) -> HostStatus {
        let instances = self
            .instances
            .lock()
            .map(|all| {
                let mut list: Vec<InstanceStatus> = all
                    .values()
                    .map(|i| InstanceStatus {
                        name: i.name.clone(),
                        dir: i.dir.clone(),
                        workspace: i.workspace.clone(),
                        relay_pid: i.relay_pid,
                        uptime_secs: i.started.elapsed().as_secs(),
                    })
                    .collect();
                list.sort_by(|a, b| (&a.name, &a.dir).cmp(&(&b.name, &b.dir)));
                list
            })
            .unwrap_or_default();
        HostStatus {
            pid: std::process::id(),
            build: self.build.clone(),
            uptime_secs: self.started.elapsed().as_secs(),
            retired: *self.retired.borrow(),
            instances,
        }
    }
}

/// Counts a connection while it lives.
struct Counted(Arc<State>);

impl Counted {
    fn new(state: Arc<State>) -> Self {
        state.connections.send_modify(|n| *n += 1);
        Self(state)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.connections.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The most open files the host asks for.
const OPEN_FILES: u64 = 65_536;

/// Raises the soft limit of open files towards the hard one (at most
/// [`OPEN_FILES`]): the host holds the pipes, logs and connections of every
/// instance of every zot session, and inherits a soft limit sized for one
/// process (1 024 on most desktops), which a few busy extensions would
/// use up for all of them.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard.min(OPEN_FILES) => {
            if let Err(err) = setrlimit(Resource::RLIMIT_NOFILE, hard.min(OPEN_FILES), hard) {
                tracing::warn!("cannot raise the open files limit from {soft}: {err}");
            }
        }
        Ok(_) => {}
        Err(err) => tracing::warn!("cannot read the open files limit: {err}"),
    }
}

/// Runs the shared host for `home` on `place` until it has been idle for
/// `options.idle`, or has retired and its last instance has ended.
///
/// # Errors
///
/// [`ServeError`] when it cannot listen or set up the engine.
pub async fn serve(home: ZotHome, place: &Place, options: ServeOptions) -> Result<(), ServeError> {
    let socket = place.socket().to_owned();
    let bind_error = |error| ServeError::Bind {
        path: socket.clone(),
        error,
    };
    raise_open_files_limit();
    // Written before anyone can connect: a relay reads it once connected.
    let token = place.new_token()?;
    let listener = tokio::net::UnixListener::bind(&socket).map_err(bind_error)?;
    // The folder already keeps others out; the socket does too, should the
    // folder ever be opened up.
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600));
    }
    let identity = std::fs::symlink_metadata(&socket)
        .map(|meta| (meta.dev(), meta.ino()))
        .map_err(bind_error)?;
    // First compiles run in a child process: this one lives long and hosts
    // every guest, and a compile would leave the compiler resident in it.
    // No compile happens before an instance starts, and each instance sets
    // the memory cap of the policy it starts under (`bridge::start`):
    // nothing to read for it here.
    let launcher = Launcher::new(home.clone())
        .with_compiler_process(options.compiler, crate::policy::DEFAULT_COMPILE_MEMORY_MB);
    // One engine for every instance; set up now, before the first relay waits on it.
    launcher.wasm()?;
    let audit = Arc::new(AuditLog::open(&home.audit_log()));
    let state = Arc::new(State {
        home,
        build: options.build.unwrap_or_else(super::peer::build_id),
        started: Instant::now(),
        launcher,
        audit,
        socket,
        identity,
        retired: watch::channel(false).0,
        connections: watch::channel(0).0,
        instances: Mutex::new(HashMap::new()),
        next_instance: std::sync::atomic::AtomicU64::new(1),
        token,
    });
    tracing::info!(
        "zotbox host {} (pid {}) listening on `{}`",
        state.build,
        std::process::id(),
        state.socket.display()
    );
    let mut connections = state.connections.subscribe();
    let mut retired = state.retired.subscribe();
    let mut listener = Some(listener);
    // Stopped by the system (a logout, a shutdown): the relays restart
    // their guests in a new host, and this one's audit records are written
    // first, its suppression counts said.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|err| tracing::warn!("cannot watch for SIGTERM: {err}"))
        .ok();
    loop {
        let idle = *connections.borrow_and_update() == 0;
        let is_retired = *retired.borrow_and_update();
        if is_retired {
            // No more relays: only the running instances keep it alive.
            listener = None;
            if idle {
                break;
            }
        }
        tokio::select! {
            accepted = async {
                match &listener {
                    Some(listener) => listener.accept().await,
                    None => std::future::pending().await,
                }
            } => match accepted {
                Ok((stream, _)) => {
                    let counted = Counted::new(state.clone());
                    tokio::spawn(connection(stream, counted));
                }
                Err(err) => {
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = connections.changed() => {}
            _ = retired.changed() => {}
            Some(()) = async {
                match &mut terminate {
                    Some(terminate) => terminate.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::info!("SIGTERM; exiting");
                // What the confined commands in flight left is taken back
                // first (10 s at the most).
                if crate::capability::shell::interrupt::interrupt() > 0 {
                    crate::capability::shell::interrupt::settled(Duration::from_secs(10)).await;
                }
                break;
            }
            () = async {
                if idle {
                    tokio::time::sleep(options.idle).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => {
                tracing::info!("idle for {:?} with no instances; exiting", options.idle);
                break;
            }
        }
    }
    state.unlink_socket();
    // Every instance's records are on disk before the host exits.
    state.audit.flush();
    Ok(())
}

/// One relay (or one `zotbox host status|stop`).
async fn connection(stream: UnixStream, counted: Counted) {
    let state = counted.0.clone();
    let relay_pid = match super::peer::check(&stream) {
        Ok(pid) => pid,
        Err(err) => {
            tracing::warn!("refused a connection: {err}");
            let (_, mut writer) = stream.into_split();
            let _ = send(
                &mut writer,
                &Reply::Failed {
                    error: format!("zotbox host: {err}"),
                },
            )
            .await;
            return;
        }
    };
    let request = match tokio::time::timeout(REQUEST_PATIENCE, recv_request(&stream)).await {
        Ok(Ok(request)) => request,
        Ok(Err(err)) => {
            tracing::warn!("a relay (pid {relay_pid}) sent no request: {err}");
            return;
        }
        Err(_) => {
            tracing::warn!("a relay (pid {relay_pid}) sent no request in time");
            return;
        }
    };
    let (reader, mut writer) = stream.into_split();
    // The uid alone does not make a relay: a shell command zotbox confines
    // runs as the user too, and may connect, but cannot read the token.
    if !super::place::token_matches(request.0.token(), &state.token) {
        tracing::warn!(
            "refused a request from pid {relay_pid}: it does not carry this host's token \
             (a process zotbox confines cannot read it)"
        );
        state.audit.record(crate::audit::AuditRecord::now(
            "zotbox host",
            "host",
            format!("a request of pid {relay_pid}"),
            crate::audit::Decision::Deny,
            "it does not carry the host's token",
        ));
        let _ = send(
            &mut writer,
            &Reply::Failed {
                error: "zotbox host: refused: the request does not carry this host's token"
                    .to_owned(),
            },
        )
        .await;
        return;
    }
    match request {
        (Request::Status { .. }, _) => {
            let _ = send(
                &mut writer,
                &Reply::Status {
                    status: state.status(),
                },
            )
            .await;
        }
        (Request::Stop { .. }, _) => {
            state.retire();
            let _ = send(&mut writer, &Reply::Stopping).await;
        }
        (Request::Open { build, .. }, _) if build != state.build => {
            tracing::info!("a relay of build {build} arrived");
            state.retire();
            let _ = send(
                &mut writer,
                &Reply::Retired {
                    build: state.build.clone(),
                },
            )
            .await;
        }
        (open @ Request::Open { .. }, fds) => {
            instance(&state, open, fds, relay_pid, reader, writer).await;
        }
    }
    drop(counted);
}

/// Runs one extension for one relay, until it ends or the relay goes.
async fn instance(
    state: &Arc<State>,
    request: Request,
    fds: Vec<OwnedFd>,
    relay_pid: i32,
    mut reader: tokio::net::unix::OwnedReadHalf,
    mut writer: OwnedWriteHalf,
) {
    let Request::Open {
        dir,
        env,
        started,
        resume,
        shared_stdout,
        ..
    } = request
    else {
        return;
    };
    let [zot_in, zot_out, zot_log]: [OwnedFd; 3] = match fds.try_into() {
        Ok(fds) => fds,
        Err(_) => {
            let error =
                "zotbox host: the relay did not hand over its stdin, stdout and stderr".to_owned();
            let _ = send(&mut writer, &Reply::Failed { error }).await;
            return;
        }
    };
    if send(
        &mut writer,
        &Reply::Welcome {
            pid: std::process::id(),
        },
    )
    .await
    .is_err()
    {
        return;
    }
    let environment = Arc::new(env.into_iter().collect::<HashMap<_, _>>());
    let hosted = Hosted {
        environment,
        audit: state.audit.clone(),
        started,
    };
    let prepared = match bridge::prepare(&dir, &state.home, &BridgeConfig::default(), Some(hosted))
    {
        Ok(prepared) => prepared,
        Err(err) => {
            let _ = send(
                &mut writer,
                &Reply::Failed {
                    error: crate::text::chain(&err),
                },
            )
            .await;
            return;
        }
    };
    if !matches!(
        prepared.manifest().program,
        crate::manifest::Program::Wasm { .. }
    ) {
        let error = format!(
            "extension `{}`: a native extension runs in its own `zotbox run`, not in the shared host",
            crate::text::shown(prepared.name())
        );
        let _ = send(&mut writer, &Reply::Failed { error }).await;
        return;
    }
    let id = state
        .next_instance
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut all) = state.instances.lock() {
        all.insert(
            id,
            Instance {
                name: prepared.name().to_owned(),
                dir: dir.clone(),
                workspace: None,
                relay_pid,
                started: Instant::now(),
            },
        );
    }
    // A restarted instance has zot's `hello_ack` from its relay, not zot.
    if let Some(line) = &resume {
        note_workspace(state, id, line);
    }
    let (hello_tx, mut hello_rx) = watch::channel(None);
    let (abandon_tx, abandon_rx) = watch::channel(false);
    let tap = Tap {
        hello_ack: Some(hello_tx),
        in_flight: Arc::new(bridge::InFlight::told_to_a_relay()),
        resume: resume.map(String::into_bytes),
        abandoned: Some(abandon_rx),
        hang_up: bridge::stdio::HangUp::of(zot_in.as_fd()),
    };
    let in_flight = tap.in_flight.clone();
    let (cut_tx, mut cut_rx) = watch::channel(false);
    let writer = Arc::new(tokio::sync::Mutex::new(writer));
    // Tells the relay what it needs if this host dies: zot's `hello_ack`,
    // the requests in flight (a lone request at once, the rest of a burst
    // coalesced; see `bridge::InFlight`) and, at once, whether zot's stdout
    // stands inside a line.
    let reporter = tokio::spawn({
        let writer = writer.clone();
        let state = state.clone();
        async move {
            // When the requests in flight are next to be sent.
            let mut due: Option<tokio::time::Instant> = None;
            // A watch whose sender is gone (the bridge ending) says no more;
            // the others still do.
            let (mut hello_open, mut cut_open) = (true, true);
            loop {
                let (reply, told) = tokio::select! {
                    changed = hello_rx.changed(), if hello_open => {
                        if changed.is_err() {
                            hello_open = false;
                            continue;
                        }
                        let line = hello_rx.borrow_and_update().clone();
                        let Some(line) = line else { continue };
                        let line = String::from_utf8_lossy(&line).into_owned();
                        note_workspace(&state, id, &line);
                        (Reply::HelloAck { line }, None)
                    }
                    changed = cut_rx.changed(), if cut_open => {
                        if changed.is_err() {
                            cut_open = false;
                            continue;
                        }
                        (Reply::Cut { inside: *cut_rx.borrow_and_update() }, None)
                    }
                    // Not woken by every change while a report is due:
                    // no request can be urgent then.
                    () = in_flight.changed(), if due.is_none() => {
                        if !in_flight.report_at_once() {
                            due = Some(tokio::time::Instant::now() + bridge::IN_FLIGHT_COALESCE);
                            continue;
                        }
                        // A request waits for this report before it
                        // reaches the guest.
                        in_flight_reply(in_flight.report())
                    }
                    () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)),
                        if due.is_some() => {
                        due = None;
                        in_flight_reply(in_flight.report_due())
                    }
                };
                if send(&mut *writer.lock().await, &reply).await.is_err() {
                    in_flight.stop_telling();
                    return;
                }
                if let Some(changes) = told {
                    in_flight.told(changes);
                }
            }
        }
    });
    // The relay never writes after its request: anything else is its end.
    let watcher = tokio::spawn(async move {
        let mut byte = [0u8; 1];
        let _ = reader.read(&mut byte).await;
        let _ = abandon_tx.send(true);
    });
    let input = bridge::stdio::owned_input(zot_in);
    let output =
        super::line_end::LineEnds::new(bridge::stdio::owned_output(zot_out, shared_stdout), cut_tx);
    // The instance's own diagnostics also reach zot's log of it.
    let sink = Arc::new(std::sync::Mutex::new(crate::instance_log::Stream::new(
        std::fs::File::from(zot_log),
    )));
    let outcome = crate::instance_log::scope(
        sink.clone(),
        bridge::start(prepared, &state.launcher, input, output, tap),
    )
    .await;
    reporter.abort();
    watcher.abort();
    // The instance's last records before the relay's last line.
    let log_written = sink.lock().ok().and_then(|mut stream| stream.close());
    if let Some(log_written) = log_written {
        crate::instance_log::written(log_written, LOG_PATIENCE).await;
    }
    let reply = match outcome {
        Ok(exit) => Reply::Exit {
            exit: ExitWire::from(exit),
        },
        Err(err) => Reply::Failed {
            error: crate::text::chain(&err),
        },
    };
    let _ = send(&mut *writer.lock().await, &reply).await;
    if let Ok(mut all) = state.instances.lock() {
        all.remove(&id);
    }
}

/// A report of the requests in flight for the relay, and the changes it
/// covers.
fn in_flight_reply(report: bridge::InFlightReport) -> (Reply, Option<u64>) {
    (
        Reply::InFlight {
            requests: report.requests,
        },
        Some(report.changes),
    )
}

/// Records the workspace zot named for instance `id`.
fn note_workspace(state: &State, id: u64, hello_ack: &str) {
    let cwd = serde_json::from_str::<serde_json::Value>(hello_ack)
        .ok()
        .and_then(|ack| {
            ack.get("cwd")
                .and_then(|cwd| cwd.as_str())
                .map(PathBuf::from)
        });
    if let (Some(cwd), Ok(mut all)) = (cwd, state.instances.lock())
        && let Some(instance) = all.get_mut(&id)
    {
        instance.workspace = Some(cwd);
    }
}

async fn send(writer: &mut OwnedWriteHalf, reply: &Reply) -> std::io::Result<()> {
    writer.write_all(&line(reply)).await?;
    writer.flush().await
}
