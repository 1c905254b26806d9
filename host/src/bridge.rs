//! `zotbox run`: one extension hosted in the sandbox, bridged to zot's stdio.
//!
//! zot starts `zotbox run` as the extension's `exec`, in the extension's
//! folder, and speaks the protocol on its stdin/stdout. The bridge starts
//! the extension (a wasm guest, in the sandbox, or a native one, if the
//! policy allows) and forwards every line, byte for byte, in both
//! directions, but for the guest's registrations and its lines zot could
//! read otherwise or that hold what a terminal acts on. It adds no frame,
//! and loses none but refused registrations, such a line it cannot parse,
//! and frames of a type the protocol does not let an extension send (a
//! later zot's `submit` would send a prompt as if the user typed it). It
//! looks at what passes:
//!
//! - `hello_ack` names the workspace, which becomes the sandbox's root;
//! - requests (`tool_call`, `command_invoked`, `event_intercept`) start a
//!   deadline, which only the answer of its kind ends; a wasm guest still
//!   computing past it is killed;
//! - `shutdown` or the end of zot's input ends the guest, gracefully first;
//! - the guest's `hello`, `register_*` and `subscribe` reach zot as the
//!   library would hold them (`registered`): refused ones not at all (a
//!   warning in zot's log), descriptions and the `hello` escaped, keys the
//!   protocol does not have dropped;
//! - a guest line zot's JSON decoder could read otherwise than a quick look
//!   does, or that holds a character a terminal acts on, is read as zot
//!   reads it and written anew, the text zot prints escaped (`shown`).
//!
//! When the extension ends, the bridge exits with its status, so zot sees
//! exactly what it would see of a native extension.
//!
//! Two rules keep the guard from going silent (zot allows a tool call whose
//! check goes unanswered for 5 s):
//!
//! 1. **A check that cannot be read is blocked by the bridge.** An
//!    `event_intercept` that does not decode (nested past the parser's limit,
//!    not UTF-8, a lone surrogate, over the 4 MiB frame cap) is not forwarded:
//!    the bridge answers it with a block naming why, written to zot between
//!    the guest's lines, never inside one. A tool call or command over the cap,
//!    which the guest could never see, gets an error the same way.
//! 2. **A guest line over the frame cap ends the guest at once.** The bridge
//!    stops it, logs an error naming the cap, and exits as a crashed extension
//!    would, rather than reading an endless line to its end.

mod registered;
mod shown;
pub mod stdio;
mod to_zot;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;
use zotbox_protocol::{
    DEFAULT_MAX_LINE, DecodeError, HostFrame, Line, LineSplitter, MAX_DEPTH, TOO_LONG_HEAD,
    Undecoded, decode_line, encode_to_vec, nested_deeper_than, peek, peek_borrowed,
};

use self::to_zot::{Ended, ToZot};

use crate::audit::AuditLog;
use crate::home::ZotHome;
use crate::host::launch::{self, LaunchError};
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::policy::Policy;
use crate::runtime::{Exit, Launcher, Transport};
use crate::sandbox::{CommandGuard, Services};
use crate::session::reader::ReadChunk;
use crate::text::Shown;

/// The bridge could not start the extension.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The manifest or a policy file is missing, unreadable or invalid.
    #[error(transparent)]
    File(#[from] crate::user_file::FileError),
    /// The policy refuses this extension.
    #[error("extension `{name}`: {reason}")]
    Refused {
        /// The extension.
        name: String,
        /// Why.
        reason: String,
    },
    /// It is a workspace's, and that workspace is not trusted.
    #[error("extension `{name}` {reason}")]
    Untrusted {
        /// The extension.
        name: String,
        /// ``comes from the workspace `…`, which …``.
        reason: String,
    },
    /// Its installed files are not the locked ones (`store::lock`).
    #[error(transparent)]
    Locked(#[from] crate::store::lock::LockError),
    /// It could not be started.
    #[error("extension `{name}`: cannot start: {error}")]
    Start {
        /// The extension.
        name: String,
        /// Why.
        error: crate::runtime::StartError,
    },
    /// Reading or writing zot's stdio failed.
    #[error("the bridge to zot failed")]
    Io(#[from] std::io::Error),
}

/// Deadlines the bridge enforces on requests it forwards (zot keeps its own).
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// A tool call or command.
    pub call_timeout: Duration,
    /// An intercept.
    pub intercept_timeout: Duration,
    /// After `shutdown` or end of input, before the extension is stopped.
    pub shutdown_grace: Duration,
    /// The zotbox executable a first compile runs in, under the policy's
    /// memory cap (see [`crate::runtime::Launcher::with_compiler_process`]);
    /// `None`: in this process, uncapped.
    pub compiler: Option<std::path::PathBuf>,
    /// zot's `hello_ack` from before, when this run takes over an extension
    /// whose handshake is done (a relay whose shared host kept dying): the
    /// guest gets it at once, and its `hello` and registrations, which zot
    /// already has, are not forwarded.
    pub resume: Option<Vec<u8>>,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(60),
            intercept_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(2),
            compiler: None,
            resume: None,
        }
    }
}

/// The guard for shell commands inside `zotbox run`: the refusal plugins of
/// the workspace (zot runs the intercepting extensions; they cannot be
/// asked from here).
struct PluginGuard {
    services: std::sync::Weak<Services>,
    home: ZotHome,
    rules: std::sync::OnceLock<crate::guard::DenyRules>,
}

#[async_trait::async_trait]
impl CommandGuard for PluginGuard {
    async fn check_command(&self, _caller: &str, command: &str) -> Result<(), (String, String)> {
        let rules = match self.rules.get() {
            Some(rules) => rules,
            None => {
                // Reading the data files and compiling the plugins blocks
                // (within their budgets): on a thread of its own, not the
                // runtime's, which is the only one of a standalone run.
                let workspace = (self.services.upgrade())
                    .and_then(|s| s.workspace().map(Path::to_path_buf))
                    .unwrap_or_default();
                let home = self.home.clone();
                let loaded = tokio::task::spawn_blocking(move || {
                    let set = crate::data::DataSearch::new(&workspace, home.root()).load();
                    crate::guard::DenyRules::for_data(&set, &workspace)
                })
                .await
                .map_err(|err| {
                    let why = format!("the refusal plugins could not be loaded: {err}");
                    ("guard".to_owned(), why)
                })?;
                self.rules.get_or_init(|| loaded)
            }
        };
        match rules.check("bash", &serde_json::json!({ "command": command })) {
            Some(hit) => Err((hit.decider(), hit.reason)),
            None => Ok(()),
        }
    }
}

/// How the bridge names itself in answers to frames it could not read.
const READER: &str = "zotbox";

/// Runs the extension in `dir` bridged to `input`/`output` until it ends;
/// returns its exit status for the bridge's own. `hang_up` watches zot's
/// end of `input` ([`stdio::HangUp::of_stdin`] for the process's stdin),
/// so that zot closing it is seen while the guest does not read.
///
/// # Errors
///
/// [`BridgeError`] when the extension cannot be started or stdio fails.
pub async fn run(
    dir: &Path,
    home: ZotHome,
    config: BridgeConfig,
    (input, hang_up): (
        impl AsyncRead + Unpin + Send + 'static,
        Option<stdio::HangUp>,
    ),
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> Result<Exit, BridgeError> {
    let prepared = prepare(dir, &home, &config, None)?;
    // A confined native extension's jail is set as it starts, before zot's
    // `hello_ack` names the workspace (it answers the extension's `hello`):
    // the folder zot runs in is the one it will name.
    let confined = crate::runtime::native::NativeConfinement::wanted(&prepared.policy);
    let workspace = match &prepared.manifest.program {
        // Only a confined one needs them: finding them reads git's
        // configuration, on the path of every native start.
        crate::manifest::Program::Native { .. } if confined => zot_folder().map(|workspace| {
            let control = crate::discovery::ControlSources::new(home.root(), &[dir.to_owned()])
                .control_paths(&workspace);
            (workspace, control)
        }),
        _ => None,
    };
    let native =
        crate::runtime::native::NativeConfinement::from_policy(&prepared.policy, workspace, &home);
    if let Some(folder) = native.as_ref().and_then(|native| native.workspace.as_ref()) {
        // What `hello_ack` will name is checked against it (`take_workspace`).
        prepared.services.set_workspace(folder.clone());
    }
    let mut launcher = Launcher::new(home).with_native_confinement(native);
    if let Some(zotbox) = config.compiler {
        launcher = launcher.with_compiler_process(zotbox, prepared.policy.compile_memory_mb());
    }
    // Nothing else runs yet: load the program on this thread rather than
    // hand it to a blocking one (`start` then finds it prepared).
    if let crate::manifest::Program::Wasm { path } = &prepared.manifest.program {
        launcher
            .wasm()
            .and_then(|runtime| runtime.prepare(&prepared.name, path))
            .map_err(|error| prepared.start_error(error.into()))?;
    }
    let tap = Tap {
        hang_up,
        resume: config.resume.clone(),
        ..Tap::default()
    };
    start(prepared, &launcher, input, output, tap).await
}

/// The workspace zot's `hello_ack` names in `cwd`, when it names one: an
/// absolute path. A relative one would be read against this process's
/// folder, which in the shared host is `/`: the jail would be the whole
/// disk. zot sends an absolute path; anything else is refused and the
/// extension has no workspace.
fn named_workspace(cwd: String) -> Option<PathBuf> {
    if cwd.is_empty() {
        return None;
    }
    let named = PathBuf::from(cwd);
    if named.is_absolute() {
        return Some(named);
    }
    tracing::warn!(
        "zot named the workspace `{}`, which is not an absolute path: the extension has no \
         workspace",
        Shown(&named.to_string_lossy())
    );
    None
}

/// Takes the workspace zot's `hello_ack` names. A confined native
/// extension's was set as it started, to the folder zot runs in (its jail
/// cannot change later): should zot name another, zot's log of the
/// extension says so, for what it reaches is not what zot's user expects.
fn take_workspace(services: &Services, named: PathBuf) {
    let Some(confined) = services.workspace() else {
        services.set_workspace(named);
        return;
    };
    if std::fs::canonicalize(&named).is_ok_and(|named| named == confined) {
        return;
    }
    tracing::warn!(
        "zot names the workspace `{}`, but the extension was confined to the folder zot runs \
         in, `{}`: it reaches that folder's files, not the named one's",
        Shown(&named.to_string_lossy()),
        Shown(&confined.to_string_lossy())
    );
}

/// The folder zot runs in (the process that started this one; zot starts
/// an extension in the extension's own folder), when there is such a
/// parent: none for an orphan, whose parent is init.
fn zot_folder() -> Option<PathBuf> {
    let parent = nix::unistd::getppid();
    if parent.as_raw() <= 1 {
        return None;
    }
    std::fs::canonicalize(format!("/proc/{parent}/cwd")).ok()
}

/// An extension checked and ready to start: its manifest read, its
/// workspace trusted, its grant and limits derived from the policy.
pub(crate) struct Prepared {
    name: String,
    manifest: Manifest,
    policy: Policy,
    services: Arc<Services>,
    sandbox: Option<Arc<crate::sandbox::Sandbox>>,
    limits: crate::runtime::wasm::GuestLimits,
    // What its wasm must hold when read: its workspace's trusted content.
    wasm_sha256: Option<[u8; 32]>,
    timeouts: Timeouts,
    shutdown_grace: Duration,
    /// What it may register, the policy's ceilings applied.
    registrations: crate::session::RegistrationLimits,
}

impl Prepared {
    /// The extension's name (from its manifest).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Its manifest.
    pub(crate) fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn start_error(&self, error: crate::runtime::StartError) -> BridgeError {
        BridgeError::Start {
            name: self.name.clone(),
            error,
        }
    }
}

/// What the shared host gives each extension it prepares, in place of
/// this process's own.
pub(crate) struct Hosted {
    /// Where granted variables come from: the relay's environment.
    pub(crate) environment: Arc<HashMap<String, String>>,
    /// The host's one audit log: one writer for every instance, whose
    /// records name their extension.
    pub(crate) audit: Arc<AuditLog>,
    /// How the relay was started (what its folder is judged by).
    pub(crate) started: crate::store::trust::Started,
}

/// Reads the manifest in `dir` and the policy of `home`, checks that the
/// extension may run at all (trust, policy) and derives its grant and
/// limits. `hosted` is what the shared host provides (`None`: this
/// process's environment and an audit log of its own).
pub(crate) fn prepare(
    dir: &Path,
    home: &ZotHome,
    config: &BridgeConfig,
    hosted: Option<Hosted>,
) -> Result<Prepared, BridgeError> {
    let manifest = Manifest::load(&dir.join(MANIFEST_FILE))?;
    let name = manifest.name().to_owned();
    let policy = Policy::load_for(home)?;
    // zot starts a workspace's extensions without asking; zotbox does not.
    let started = hosted
        .as_ref()
        .map_or_else(crate::store::trust::Started::this_process, |h| {
            h.started.clone()
        });
    let trust = crate::store::trust::check_extension_dir(dir, &started, home, &policy).map_err(
        |reason| BridgeError::Untrusted {
            name: name.clone(),
            reason,
        },
    )?;
    let project = trust.as_ref().map(|trust| trust.workspace.clone());
    // The installed files are the locked ones, and meet the pins of the
    // workspace's lock: a project install's own workspace, or for a user
    // install the folder zot started the extension in (the relay's `$PWD`
    // when the shared host prepares it).
    let workspace = project.or_else(|| match &hosted {
        Some(hosted) => hosted.environment.get("PWD").map(std::path::PathBuf::from),
        None => std::env::current_dir().ok(),
    });
    let services = services(home, &policy, dir, hosted);
    // The launch step the host's supervisor takes too.
    let defaults = crate::policy::LimitDefaults {
        call_timeout: config.call_timeout,
        intercept_timeout: config.intercept_timeout,
        ..crate::policy::LimitDefaults::default()
    };
    let admitted = launch::admit(
        &manifest,
        home,
        &policy,
        &services,
        workspace.as_deref(),
        trust.as_ref(),
        &defaults,
    )
    .map_err(|err| match err {
        LaunchError::Untrusted(err) => BridgeError::Untrusted {
            name: name.clone(),
            reason: err.to_string(),
        },
        LaunchError::Locked(err) => BridgeError::Locked(err),
        LaunchError::NotBuilt(reason) | LaunchError::Refused(reason) => BridgeError::Refused {
            name: name.clone(),
            reason,
        },
    })?;
    let (sandbox, limits, wasm_sha256) = (admitted.sandbox, admitted.guest, admitted.wasm_sha256);
    let timeouts = Timeouts {
        call: admitted.limits.call_timeout.value,
        intercept: admitted.limits.intercept_timeout.value,
    };
    let registrations = crate::session::RegistrationLimits {
        events: admitted.events,
        ..crate::session::RegistrationLimits::default().within(&policy)
    };
    Ok(Prepared {
        name,
        manifest,
        policy,
        services,
        sandbox,
        limits,
        wasm_sha256,
        timeouts,
        shutdown_grace: config.shutdown_grace,
        registrations,
    })
}

/// What the shared host watches of one bridged extension, and how it steers
/// it; the default watches nothing (`zotbox run --standalone`).
#[derive(Default)]
pub(crate) struct Tap {
    /// Receives zot's `hello_ack` line when it passes.
    pub(crate) hello_ack: Option<watch::Sender<Option<Vec<u8>>>>,
    /// The requests in flight, shared with the watcher.
    pub(crate) in_flight: Arc<InFlight>,
    /// A restart: zot's earlier `hello_ack`, given to the new guest at
    /// once; its `hello` and registrations (which zot already has) are not
    /// forwarded.
    pub(crate) resume: Option<Vec<u8>>,
    /// Becomes true when whoever started this extension is gone: it is
    /// stopped at once.
    pub(crate) abandoned: Option<watch::Receiver<bool>>,
    /// A watch on zot's end of the input, for while the guest does not read.
    pub(crate) hang_up: Option<stdio::HangUp>,
}

/// Starts a prepared extension with `launcher` and bridges it to
/// `input`/`output` until it ends.
pub(crate) async fn start(
    prepared: Prepared,
    launcher: &Launcher,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    tap: Tap,
) -> Result<Exit, BridgeError> {
    // A long-lived host compiles under the policy this extension starts
    // under, not the one it found when it started.
    if let crate::manifest::Program::Wasm { .. } = prepared.manifest.program
        && let Ok(runtime) = launcher.wasm()
    {
        runtime.set_compile_memory_mb(prepared.policy.compile_memory_mb());
    }
    let transport = launcher
        .start_expecting(
            &prepared.manifest,
            prepared.limits.clone(),
            prepared.sandbox.clone(),
            prepared.wasm_sha256,
        )
        .await
        .map_err(|error| prepared.start_error(error))?;
    let registrations = registered::Registrations::new(&prepared.name, prepared.registrations)
        .audited_by(prepared.sandbox.clone());
    bridge(
        transport,
        prepared.services,
        prepared.timeouts,
        prepared.shutdown_grace,
        (input, output),
        registrations,
        tap,
    )
    .await
}

fn services(home: &ZotHome, policy: &Policy, dir: &Path, hosted: Option<Hosted>) -> Arc<Services> {
    let (audit, environment) = match hosted {
        Some(hosted) => (hosted.audit, Some(hosted.environment)),
        None => (Arc::new(AuditLog::open(&home.audit_log())), None),
    };
    let http_config = policy.http_config();
    Arc::new_cyclic(|weak| {
        let services = Services::new(
            None,
            http_config,
            audit,
            Arc::new(PluginGuard {
                services: weak.clone(),
                home: home.clone(),
                rules: std::sync::OnceLock::new(),
            }),
        )
        .with_control(crate::discovery::ControlSources::new(
            home.root(),
            &[dir.to_path_buf()],
        ))
        .with_confinement(policy, home)
        .with_secrets(Arc::new(crate::store::secret::SecretStore::new(home)));
        match environment {
            Some(environment) => services.with_environment(environment),
            None => services,
        }
    })
}

#[derive(Debug, Clone, Copy)]
struct Timeouts {
    call: Duration,
    intercept: Duration,
}

impl Timeouts {
    /// A request's type as the bridge names it, and its deadline; `None`
    /// for frames that are no request.
    fn request(self, frame_type: &str) -> Option<(&'static str, Duration)> {
        match frame_type {
            "tool_call" => Some(("tool_call", self.call)),
            "command_invoked" => Some(("command_invoked", self.call)),
            "event_intercept" => Some(("event_intercept", self.intercept)),
            _ => None,
        }
    }
}

/// How long a change to the requests in flight may wait before a relay is
/// told of it, riding with the changes after it: a relay needs them only if
/// its host dies, and telling it of every call would cost each call a
/// message and a wake-up of the relay.
pub(crate) const IN_FLIGHT_COALESCE: Duration = Duration::from_millis(5);

/// How long a request waits for the relay to be told of it before it goes
/// to the guest all the same (the relay's socket stalled: the relay is
/// ending, and so is this instance).
const TOLD_PATIENCE: Duration = Duration::from_secs(1);

/// Requests zot made that the extension has not answered yet, by id, with
/// their type and deadline.
///
/// In the shared host, each instance's relay is told of them
/// ([`InFlight::told_to_a_relay`]), so that it can answer them itself
/// should the host die. Rule: **a request reaches the guest only after the
/// relay knows of it**, unless a report is already due within
/// [`IN_FLIGHT_COALESCE`] (a burst of calls), in which case it rides with
/// that report. A host killed as a lone call reaches its guest (the usual
/// case under zot: a model calls a tool now and then) cannot lose it.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    // A plain mutex: it is never held across an await, and every frame
    // takes it once.
    requests: std::sync::Mutex<Requests>,
    changed: tokio::sync::Notify,
    /// A request came in whose deadline is before the one the watchdog
    /// sleeps until (a separate `Notify`: `changed` is the reporter's).
    sooner: tokio::sync::Notify,
    relay: Option<RelayReports>,
}

#[derive(Debug, Default)]
struct Requests {
    by_id: rustc_hash::FxHashMap<String, (&'static str, Instant)>,
    /// Changes so far: what a report covers when it is taken.
    changes: u64,
    /// When the watchdog wakes next, if it plans to: only a request due
    /// before then wakes it sooner, so a steady stream of calls costs it
    /// about one wake-up per timeout rather than one per call.
    watched: Option<Instant>,
}

/// What an instance's relay has been told of its requests.
#[derive(Debug)]
struct RelayReports {
    /// The changes the relay has been told of (`u64::MAX`: it will be told
    /// of nothing more, so nothing waits for it).
    told: watch::Sender<u64>,
    /// A report is due within [`IN_FLIGHT_COALESCE`]: changes ride with it.
    due: std::sync::atomic::AtomicBool,
    /// A request waits for the relay: the next report goes at once.
    urgent: std::sync::atomic::AtomicBool,
}

/// A report of the requests in flight for a relay.
#[derive(Debug)]
pub(crate) struct InFlightReport {
    /// The changes it covers (for [`InFlight::told`]).
    pub(crate) changes: u64,
    /// `(id, type)` of every request in flight.
    pub(crate) requests: Vec<(String, String)>,
}

impl InFlight {
    /// Requests a relay is told of (see the rule above).
    pub(crate) fn told_to_a_relay() -> Self {
        Self {
            relay: Some(RelayReports {
                told: watch::Sender::new(0),
                due: false.into(),
                urgent: false.into(),
            }),
            ..Self::default()
        }
    }

    fn requests(&self) -> std::sync::MutexGuard<'_, Requests> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a request in flight. `Some(changes)` when a relay is to be
    /// told of it at once: the request waits for that
    /// ([`InFlight::known_to_the_relay`]) before it reaches the guest.
    fn insert(&self, id: String, frame_type: &'static str, deadline: Instant) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let (changes, sooner) = {
            let mut requests = self.requests();
            requests.by_id.insert(id, (frame_type, deadline));
            requests.changes += 1;
            let sooner = requests.watched.is_none_or(|at| deadline < at);
            if sooner {
                requests.watched = Some(deadline);
            }
            (requests.changes, sooner)
        };
        if sooner {
            self.sooner.notify_one();
        }
        // Urgent first, due second (see `report_at_once` for the other
        // half). A request that finds a report due takes back only an
        // urgency it raised itself.
        let urgent = self.relay.as_ref().and_then(|relay| {
            let raised = !relay.urgent.swap(true, Ordering::SeqCst);
            if relay.due.load(Ordering::SeqCst) {
                if raised {
                    relay.urgent.store(false, Ordering::SeqCst);
                }
                None
            } else {
                Some(changes)
            }
        });
        self.changed.notify_one();
        urgent
    }

    /// Forgets request `id` when a frame of `response_type` answers it: a
    /// `tool_result` a `tool_call`, and so on. Any other frame naming the
    /// id (a guest's `notify`, an answer of the wrong kind) leaves it in
    /// flight, with its deadline, so a guest cannot call off its own
    /// watchdog, or the answer a relay owes zot, by echoing an id. Whether
    /// it answered a request in flight.
    fn answer(&self, id: &str, response_type: &str) -> bool {
        let Some(request_type) = zotbox_protocol::request_answered_by(response_type) else {
            return false;
        };
        let removed = {
            let mut requests = self.requests();
            let removed = requests
                .by_id
                .get(id)
                .is_some_and(|(frame_type, _)| *frame_type == request_type);
            if removed {
                requests.by_id.remove(id);
                requests.changes += 1;
            }
            removed
        };
        if removed {
            self.changed.notify_one();
        }
        removed
    }

    /// Forgets the requests past their deadline; whether there were any.
    fn expire(&self, now: Instant) -> bool {
        let mut requests = self.requests();
        let before = requests.by_id.len();
        requests.by_id.retain(|_, (_, at)| *at > now);
        let expired = before != requests.by_id.len();
        requests.changes += u64::from(expired);
        drop(requests);
        if expired {
            self.changed.notify_one();
        }
        expired
    }

    /// For the watchdog: when to wake next, which it now sleeps until (see
    /// [`InFlight::sooner_deadline`]): the earliest deadline in flight, or,
    /// with none in flight, the wake-up it had planned if that is still
    /// ahead. Keeping that one is what spares a call answered before the
    /// watchdog looks (the usual case: one call at a time) a wake-up of its
    /// own: the next call is due after it, so it does not wake the watchdog.
    fn watch_next_deadline(&self) -> Option<Instant> {
        let mut requests = self.requests();
        let earliest = requests.by_id.values().map(|(_, at)| *at).min();
        let now = Instant::now();
        let next = earliest.or_else(|| requests.watched.filter(|at| *at > now));
        requests.watched = next;
        next
    }

    /// For the watchdog: waits until a request due before the deadline it
    /// watches comes in. (A `notify_one` while nobody waits is kept, so a
    /// request that comes in between two waits is not missed.)
    async fn sooner_deadline(&self) {
        self.sooner.notified().await;
    }

    /// Waits until the set has changed since the last call.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    /// The requests in flight and the changes they reflect.
    pub(crate) fn report(&self) -> InFlightReport {
        let requests = self.requests();
        let mut all: Vec<(String, String)> = requests
            .by_id
            .iter()
            .map(|(id, (frame_type, _))| (id.clone(), (*frame_type).to_owned()))
            .collect();
        all.sort_unstable();
        InFlightReport {
            changes: requests.changes,
            requests: all,
        }
    }

    /// For the reporter, after [`InFlight::changed`] while no report is
    /// due: `true` when a request waits for a report (send one at once);
    /// else a report is now due, within [`IN_FLIGHT_COALESCE`] (then
    /// [`InFlight::report_due`]), and the changes until then ride with it.
    ///
    /// Due first, urgent second, where [`InFlight::insert`] raises urgent
    /// first and looks at due second: whichever order the two meet in, a
    /// request that found no report due is reported at once.
    pub(crate) fn report_at_once(&self) -> bool {
        if self.take_urgent() {
            return true;
        }
        self.set_due(true);
        // A request that found no report due yet.
        let urgent = self.take_urgent();
        if urgent {
            self.set_due(false);
        }
        urgent
    }

    /// For the reporter, when the report due is: the report; no report is
    /// due any more.
    pub(crate) fn report_due(&self) -> InFlightReport {
        self.set_due(false);
        self.report()
    }

    /// Whether a request waits to be reported; taken once.
    fn take_urgent(&self) -> bool {
        self.relay.as_ref().is_some_and(|relay| {
            relay
                .urgent
                .swap(false, std::sync::atomic::Ordering::SeqCst)
        })
    }

    /// Whether a report is due (changes until then ride with it instead of
    /// being sent at once).
    fn set_due(&self, due: bool) {
        if let Some(relay) = &self.relay {
            relay.due.store(due, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// For the reporter: the relay has been told of `changes`.
    pub(crate) fn told(&self, changes: u64) {
        if let Some(relay) = &self.relay {
            relay.told.send_if_modified(|told| {
                let newer = changes > *told;
                *told = (*told).max(changes);
                newer
            });
        }
    }

    /// For the reporter, when it ends: nothing waits for the relay any more.
    pub(crate) fn stop_telling(&self) {
        self.told(u64::MAX);
    }

    /// Waits until the relay (if any) knows of `changes` (bounded by
    /// [`TOLD_PATIENCE`]).
    async fn known_to_the_relay(&self, changes: u64) {
        let Some(relay) = &self.relay else { return };
        let mut told = relay.told.subscribe();
        let known = tokio::time::timeout(TOLD_PATIENCE, told.wait_for(|told| *told >= changes));
        if known.await.is_err() {
            tracing::warn!(
                "the relay was not told of a request within {} ms; it goes to the guest all the same",
                TOLD_PATIENCE.as_millis()
            );
        }
    }
}

async fn bridge(
    transport: Transport,
    services: Arc<Services>,
    timeouts: Timeouts,
    shutdown_grace: Duration,
    (input, output): (
        impl AsyncRead + Unpin + Send + 'static,
        impl AsyncWrite + Unpin + Send + 'static,
    ),
    registrations: registered::Registrations,
    tap: Tap,
) -> Result<Exit, BridgeError> {
    let Transport {
        output: mut from_guest,
        input: to_guest,
        control,
        exit,
        direct_output,
    } = transport;
    let Tap {
        hello_ack,
        in_flight: deadlines,
        resume,
        abandoned,
        hang_up,
    } = tap;
    // Set once zot's input ends or says `shutdown`: the guest gets a grace period.
    let (ending_tx, ending) = watch::channel(false);
    let events = registrations.events().clone();
    // A restarted guest is told what zot told the first one, and its
    // startup frames (zot has them already) stop here.
    let output = ToZot::new(
        Box::new(output),
        deadlines.clone(),
        resume.is_some(),
        registrations,
    );
    if let Some(slot) = direct_output {
        // A new transport's slot is empty: this is the only install.
        let direct: Arc<dyn crate::runtime::DirectOutput> = output.clone();
        let _ = slot.set(direct);
    }
    if let Some(line) = &resume
        && let Ok(HostFrame::HelloAck(ack)) = decode_line::<HostFrame>(line)
        && let Some(named) = named_workspace(ack.cwd)
    {
        services.set_workspace(named);
    }

    let inbound = crate::instance_log::spawn(forward_inbound(
        input,
        to_guest,
        Inbound {
            to_zot: output.clone(),
            services,
            deadlines: deadlines.clone(),
            timeouts,
            ending: ending_tx,
            hello_ack,
            resume,
            hang_up,
            events,
        },
    ));

    // Deadlines and the end of the guest are watched beside the copy out.
    let watchdog = crate::instance_log::spawn({
        let deadlines = deadlines.clone();
        let control = control.clone();
        let mut ending = ending.clone();
        let mut exit = exit.clone();
        let mut abandoned = abandoned;
        async move {
            let mut ended_at: Option<Instant> = None;
            let mut escalated = 0u8;
            loop {
                // Asleep until the next thing due: a deadline, or the next
                // step of a shutdown. An idle instance costs no wake-ups.
                let escalation = next_escalation(ended_at, escalated, shutdown_grace);
                let wake = [deadlines.watch_next_deadline(), escalation]
                    .into_iter()
                    .flatten()
                    .min();
                tokio::select! {
                    () = async {
                        match wake {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    } => {}
                    () = deadlines.sooner_deadline() => {}
                    // Zot's side gone without a word counts as the end too.
                    _ = ending.changed(), if ended_at.is_none() => {
                        if ending.has_changed().is_err() {
                            ended_at = Some(Instant::now());
                        }
                    }
                    _ = exit.wait_for(Option::is_some) => return,
                    // Abandoned, or whoever could say so is gone: the same.
                    _ = async {
                        match abandoned.as_mut() {
                            Some(rx) => rx.wait_for(|gone| *gone).await.map(|_| ()),
                            None => std::future::pending().await,
                        }
                    } => {
                        control.kill();
                        return;
                    }
                }
                let now = Instant::now();
                if deadlines.expire(now) {
                    control.deadline_missed();
                }
                if *ending.borrow() && ended_at.is_none() {
                    ended_at = Some(now);
                }
                // After the grace period, terminate once; after twice
                // that, kill (as a session's shutdown does); a watchdog
                // that wakes past both kills at once.
                let mut step = escalated;
                while next_escalation(ended_at, step, shutdown_grace).is_some_and(|due| now >= due)
                {
                    step += 1;
                }
                if step > escalated {
                    if step >= 2 {
                        control.kill();
                    } else {
                        control.terminate();
                    }
                    escalated = step;
                }
            }
        }
    });

    // Out: every line the guest writes goes to zot, verbatim.
    let ended = output.copy_out(&mut *from_guest).await?;
    if ended == Ended::OverCap {
        // Stop it now: reading an endless line to its end would let it
        // keep running (and keep zot waiting) for as long as it likes.
        let why = format!("wrote a line over the {DEFAULT_MAX_LINE}-byte frame cap");
        tracing::error!("the extension {why}; stopping it");
        control.kill();
        let mut exit = exit;
        let exited = tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some));
        tokio::select! {
            _ = exited => {}
            error = output.keep_writing() => return Err(error.into()),
        }
        end_tasks(inbound, watchdog).await;
        output.written().await?;
        return Ok(Exit::Killed(why));
    }
    let mut exit = exit;
    let exited = tokio::time::timeout(Duration::from_secs(5), exit.wait_for(Option::is_some));
    // Meanwhile the copy in may still answer frames of zot's.
    let exit = tokio::select! {
        exited = exited => match exited {
            Ok(Ok(exit)) => exit.clone().unwrap_or(Exit::Code(0)),
            _ => {
                control.kill();
                Exit::Killed("closed its output but kept running".to_owned())
            }
        },
        error = output.keep_writing() => return Err(error.into()),
    };
    end_tasks(inbound, watchdog).await;
    output.written().await?;
    Ok(exit)
}

/// When the next step of a shutdown is due, `escalated` steps in, for an
/// instance whose end was seen at `ended_at`: terminate after the grace
/// period, kill after twice that, then nothing.
fn next_escalation(ended_at: Option<Instant>, escalated: u8, grace: Duration) -> Option<Instant> {
    let at = ended_at?;
    match escalated {
        0 => Some(at + grace),
        1 => Some(at + grace * 2),
        _ => None,
    }
}

/// Stops the copy in and the watchdog and waits until they are gone, so
/// that zot's input is closed here when the bridge returns.
async fn end_tasks(inbound: tokio::task::JoinHandle<()>, watchdog: tokio::task::JoinHandle<()>) {
    inbound.abort();
    watchdog.abort();
    let _ = inbound.await;
    let _ = watchdog.await;
}

/// What the copy from zot to the guest needs beside the two streams.
struct Inbound {
    to_zot: Arc<ToZot>,
    services: Arc<Services>,
    deadlines: Arc<InFlight>,
    timeouts: Timeouts,
    ending: watch::Sender<bool>,
    hello_ack: Option<watch::Sender<Option<Vec<u8>>>>,
    resume: Option<Vec<u8>>,
    hang_up: Option<stdio::HangUp>,
    /// What the guest may be told of and asked about.
    events: crate::policy::EventRights,
}

/// Writes `bytes` to the guest; `false` once it can take no more (gone).
/// While it does not take them, zot closing its end counts as the end
/// (`ending`): the grace period starts then, and the write lasts only until
/// the guest is stopped.
async fn write_to_guest(
    to_guest: &mut (dyn AsyncWrite + Send + Unpin),
    bytes: &[u8],
    hang_up: Option<&stdio::HangUp>,
    ending: &watch::Sender<bool>,
) -> bool {
    let mut write = std::pin::pin!(async {
        to_guest.write_all(bytes).await?;
        to_guest.flush().await
    });
    if let Some(hang_up) = hang_up {
        tokio::select! {
            // A guest that reads takes the bytes at once: the watch is not
            // even polled.
            biased;
            written = &mut write => return written.is_ok(),
            () = hang_up.hung_up() => {
                tracing::debug!("zot closed its input while the guest was not reading");
                let _ = ending.send(true);
            }
        }
    }
    write.await.is_ok()
}

async fn forward_inbound(
    mut input: impl AsyncRead + Unpin,
    mut to_guest: Box<dyn AsyncWrite + Send + Unpin>,
    inbound: Inbound,
) {
    let Inbound {
        to_zot,
        services,
        deadlines,
        timeouts,
        ending,
        hello_ack,
        resume,
        hang_up,
        events,
    } = inbound;
    // After a host died: its last read may have ended inside one of zot's
    // lines, whose rest now comes first. zot's frames are JSON objects; a
    // first line that is not one is that rest, and goes nowhere.
    let mut after_a_cut = resume.is_some();
    if let Some(mut line) = resume {
        line.push(b'\n');
        if to_guest.write_all(&line).await.is_err() || to_guest.flush().await.is_err() {
            let _ = ending.send(true);
            return;
        }
    }
    let mut lines = LineSplitter::new(DEFAULT_MAX_LINE);
    let mut chunk = ReadChunk::default();
    let mut out = Vec::new();
    let mut answers = Vec::new();
    // The request whose line is read only in part, once counted in flight.
    let mut begun: Option<String> = None;
    loop {
        match chunk.read(&mut input).await {
            Ok([]) | Err(_) => break,
            Ok(bytes) => lines.push(bytes),
        }
        out.clear();
        answers.clear();
        let mut answered_here = Vec::new();
        // The latest change a relay must know of before the guest sees it.
        let mut tell = None;
        while let Some(line) = lines.next() {
            let (bytes, seen) = match line {
                Line::Complete(bytes) => (bytes, peek_borrowed(bytes)),
                Line::TooLong { len, head } => {
                    // Never forwarded (the guest could not take it either):
                    // a request is answered here, anything else dropped.
                    let undecoded = Undecoded {
                        error: DecodeError::TooLong {
                            len,
                            limit: DEFAULT_MAX_LINE,
                        },
                        peek: peek(head),
                    };
                    answered_here.extend(undecoded.peek.id.clone());
                    answer_unreadable(&undecoded, &mut answers);
                    continue;
                }
            };
            if std::mem::take(&mut after_a_cut) && !bytes.trim_ascii_start().starts_with(b"{") {
                tracing::warn!(
                    "dropped the rest of a line from zot that the host before this one \
                     had begun to read ({} bytes)",
                    bytes.len()
                );
                continue;
            }
            // Lines pass on unread, so each is looked at for depth: a guest
            // whose reader goes deeper than serde (Python's) ran out of wasm
            // stack on the model's nested arguments (a call's, or a
            // `tool_call` event's) and trapped. A request is answered here,
            // anything else dropped.
            if nested_deeper_than(bytes, MAX_DEPTH) {
                let undecoded = Undecoded {
                    error: DecodeError::TooDeep { limit: MAX_DEPTH },
                    peek: seen.into_owned(),
                };
                answered_here.extend(undecoded.peek.id.clone());
                answer_unreadable(&undecoded, &mut answers);
                continue;
            }
            // The line the guest gets instead of zot's, when there is one.
            let mut as_read = None;
            let request = match seen.frame_type.as_deref() {
                Some("hello_ack") => {
                    if let Ok(HostFrame::HelloAck(ack)) = decode_line::<HostFrame>(bytes)
                        && let Some(named) = named_workspace(ack.cwd)
                    {
                        take_workspace(&services, named);
                    }
                    if let Some(tap) = &hello_ack {
                        let _ = tap.send(Some(bytes.to_vec()));
                    }
                    None
                }
                Some("shutdown") => {
                    let _ = ending.send(true);
                    None
                }
                Some("event_intercept") => match decode_line::<HostFrame>(bytes) {
                    // zot asks only those that intercept the event, and the
                    // bridge passed on only the intercepts granted; should
                    // it ask anyway, the guest is not asked (and its say
                    // would not count): the bridge allows, as not asked.
                    Ok(HostFrame::EventIntercept(check)) if !events.may_intercept(&check.event) => {
                        if let Some(id) = seen.id {
                            not_granted(&check.event, id.into_owned(), &mut answers);
                        }
                        continue;
                    }
                    Ok(frame) => {
                        as_read = as_zot_reads(bytes, &frame);
                        timeouts.request("event_intercept")
                    }
                    Err(error) => {
                        // The guest could not read it either: a guard that
                        // skips it lets the call through. Block it here.
                        let undecoded = Undecoded {
                            error,
                            peek: seen.into_owned(),
                        };
                        answered_here.extend(undecoded.peek.id.clone());
                        answer_unreadable(&undecoded, &mut answers);
                        continue;
                    }
                },
                // Likewise an event the guest may not see (a tool call's
                // arguments, the model's words) does not reach it.
                Some("event") => match decode_line::<HostFrame>(bytes) {
                    Ok(HostFrame::Event(event)) if !events.may_see(&event.event) => continue,
                    _ => None,
                },
                other => other.and_then(|frame_type| timeouts.request(frame_type)),
            };
            if let (Some((frame_type, timeout)), Some(id)) = (request, seen.id)
                && let Some(changes) =
                    deadlines.insert(id.into_owned(), frame_type, Instant::now() + timeout)
            {
                tell = Some(changes);
            }
            out.extend_from_slice(as_read.as_deref().unwrap_or(bytes));
            out.push(b'\n');
        }
        // A request counts as in flight from its first bytes: should this
        // host die before the rest arrives, the relay answers it too.
        begun = in_flight_from_its_head(lines.partial(), begun, timeouts, &deadlines);
        for id in &answered_here {
            let _ = deadlines.answer(id, "event_intercept_response");
        }
        if !answers.is_empty() && to_zot.send(&answers).is_err() {
            break;
        }
        if let Some(changes) = tell {
            deadlines.known_to_the_relay(changes).await;
        }
        if !write_to_guest(&mut *to_guest, &out, hang_up.as_ref(), &ending).await {
            break;
        }
    }
    // zot's input ended: so does the guest's.
    let _ = to_guest.shutdown().await;
    let _ = ending.send(true);
}

/// Answers check `id` of `event`, which the guest may not intercept, as
/// allowed: what zot would have had, had it not asked.
fn not_granted(event: &str, id: String, answers: &mut Vec<u8>) {
    tracing::warn!(
        "zot asked the extension about `{event}`, which it may not intercept; allowed without \
         asking it"
    );
    let answer = zotbox_protocol::ExtensionFrame::EventInterceptResponse(
        zotbox_protocol::InterceptResponse {
            id,
            ..Default::default()
        },
    );
    if let Ok(line) = encode_to_vec(&answer) {
        answers.extend_from_slice(&line);
    }
}

/// The line of an `event_intercept` of one of zot's own tools with its
/// arguments as zot's tools read them ([`crate::guard::zot_args`]), when
/// that changes them: the guest's guard sees what runs. It is made from
/// the line itself, so fields this host does not know reach the guest too.
fn as_zot_reads(line: &[u8], frame: &HostFrame) -> Option<Vec<u8>> {
    let HostFrame::EventIntercept(intercept) = frame else {
        return None;
    };
    let tool = intercept.tool_name.as_deref()?;
    let read = intercept.tool_args.as_ref()?;
    // A `null` after a value is read as Go reads it (the value stays), but
    // a guest parsing zot's line itself would take the `null`: such a line
    // is written anew too.
    let args = match crate::guard::zot_args::as_zot_reads(tool, read) {
        Some(args) => args,
        None if crate::guard::zot_args::ZOT_TOOLS.contains(&tool)
            && memchr::memmem::find(line, b"null").is_some() =>
        {
            read.clone()
        }
        None => return None,
    };
    let mut whole: serde_json::Value = serde_json::from_slice(line).ok()?;
    whole.as_object_mut()?.insert("tool_args".to_owned(), args);
    serde_json::to_vec(&whole).ok()
}

/// Counts the request whose line `partial` begins as in flight, once (`begun`
/// is the one counted already); the request now begun, if any. A head cut
/// before its type and id says nothing yet. Only the line's first
/// [`TOO_LONG_HEAD`] bytes are looked at, as for a line over the cap: a
/// large frame arriving read by read is not walked again on every read.
fn in_flight_from_its_head(
    partial: &[u8],
    begun: Option<String>,
    timeouts: Timeouts,
    deadlines: &InFlight,
) -> Option<String> {
    if partial.is_empty() {
        return None;
    }
    let seen = peek(&partial[..partial.len().min(TOO_LONG_HEAD)]);
    let (Some((frame_type, timeout)), Some(id)) = (
        seen.frame_type.as_deref().and_then(|t| timeouts.request(t)),
        seen.id,
    ) else {
        return begun;
    };
    if begun.as_deref() != Some(id.as_str()) {
        // Nothing of it reaches the guest yet, so nothing waits for the relay.
        let _ = deadlines.insert(id.clone(), frame_type, Instant::now() + timeout);
    }
    Some(id)
}

/// Queues the bridge's own answer to a request it could not read, if the
/// request can be answered; logs it either way.
fn answer_unreadable(undecoded: &Undecoded, answers: &mut Vec<u8>) {
    let frame_type = undecoded.peek.frame_type.as_deref().unwrap_or_default();
    match undecoded.answer(READER).map(|frame| encode_to_vec(&frame)) {
        Some(Ok(line)) => {
            tracing::warn!("answered a `{frame_type}` zotbox could not read: {undecoded}");
            answers.extend_from_slice(&line);
        }
        _ => tracing::warn!("dropped a line from zot: {undecoded}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shell guard of `zotbox run` reads the data files and compiles
    /// the plugins on its first command: off the runtime's thread, the only
    /// one of a standalone run, so the bridge's other tasks (zot's frames,
    /// deadlines) run meanwhile. A task spawned before the check runs
    /// before the check's answer; read on the runtime's thread, it ran only
    /// after.
    #[test]
    fn the_shell_guard_loads_its_rules_off_the_runtimes_thread() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (ws, home) = (tmp.path().join("ws"), ZotHome::new(tmp.path().join("home")));
        let plugins = home.root().join("plugins");
        for dir in [&ws, &plugins] {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(
            plugins.join("safety.json"),
            r#"{"name":"safety","description":"d","deny":[
              {"tools":["bash"],"commandPattern":"rm\\s+-rf","reason":"no wiping"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let services = services(&home, &Policy::default(), &ws, None);
        services.set_workspace(ws.clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        runtime.block_on(async {
            let ran = Arc::new(AtomicBool::new(false));
            let other = tokio::spawn({
                let ran = ran.clone();
                async move { ran.store(true, Ordering::SeqCst) }
            });
            let first = services.guard.check_command("x", "rm -rf /").await;
            assert!(
                ran.load(Ordering::SeqCst),
                "the load held the runtime's thread"
            );
            let refused = ("plugin `safety` rule 1".to_owned(), "no wiping".to_owned());
            assert_eq!(first, Err(refused.clone()));
            // Loaded once: later checks answer from the same rules.
            assert_eq!(
                services.guard.check_command("x", "rm -rf ~").await,
                Err(refused)
            );
            assert_eq!(services.guard.check_command("x", "ls").await, Ok(()));
            let _ = other.await;
        });
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn a_workspace_zot_names_is_an_absolute_path_or_none() {
        assert_eq!(
            named_workspace("/home/me/p".to_owned()),
            Some(PathBuf::from("/home/me/p"))
        );
        // Attack (on the shared host, which runs in `/`): a relative `cwd`
        // made the jail the whole disk.
        for cwd in ["", ".", "etc/..", "p"] {
            assert_eq!(named_workspace(cwd.to_owned()), None, "{cwd:?}");
        }
    }

    #[test]
    fn a_shutdown_terminates_after_the_grace_period_and_kills_after_twice_that() {
        let grace = Duration::from_millis(500);
        let end = Instant::now();
        assert_eq!(next_escalation(None, 0, grace), None, "nothing ended");
        assert_eq!(next_escalation(Some(end), 0, grace), Some(end + grace));
        assert_eq!(next_escalation(Some(end), 1, grace), Some(end + grace * 2));
        assert_eq!(next_escalation(Some(end), 2, grace), None, "killed already");
    }

    #[test]
    fn the_reporter_sends_at_once_only_for_a_request_that_found_no_report_due() {
        let in_flight = InFlight::told_to_a_relay();
        // An answer, say: a report becomes due, and a request rides with it.
        assert!(!in_flight.report_at_once());
        assert_eq!(in_flight.insert("a".into(), "tool_call", soon()), None);
        assert_eq!(in_flight.report_due().requests.len(), 1);
        // None due any more: the next request is reported at once.
        assert_eq!(in_flight.insert("b".into(), "tool_call", soon()), Some(2));
        assert!(in_flight.report_at_once());
        assert!(!in_flight.report_at_once(), "once");
    }

    #[test]
    fn without_a_relay_no_request_waits() {
        let in_flight = InFlight::default();
        assert_eq!(in_flight.insert("a".into(), "tool_call", soon()), None);
        assert!(!in_flight.take_urgent());
        assert_eq!(
            in_flight.report().requests,
            [("a".into(), "tool_call".into())]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn only_a_request_due_before_the_watched_deadline_wakes_the_watchdog() {
        let in_flight = InFlight::default();
        let woken = |in_flight: &InFlight| {
            let mut wait = std::pin::pin!(in_flight.sooner_deadline());
            let waker = std::task::Waker::noop();
            wait.as_mut()
                .poll(&mut std::task::Context::from_waker(waker))
                .is_ready()
        };
        assert_eq!(in_flight.watch_next_deadline(), None, "idle: no wake-up");
        assert!(!woken(&in_flight));
        // The first request wakes it, and it then sleeps until its deadline.
        let first = soon();
        let _ = in_flight.insert("a".into(), "tool_call", first);
        assert!(woken(&in_flight));
        assert_eq!(in_flight.watch_next_deadline(), Some(first));
        // A later deadline waits for that wake-up; a sooner one does not.
        let _ = in_flight.insert("b".into(), "tool_call", first + Duration::from_secs(1));
        assert!(!woken(&in_flight));
        let sooner = first - Duration::from_secs(1);
        let _ = in_flight.insert("c".into(), "tool_call", sooner);
        assert!(woken(&in_flight));
        assert_eq!(in_flight.watch_next_deadline(), Some(sooner));
        // Answered ones no longer count.
        in_flight.answer("c", "tool_result");
        in_flight.answer("a", "tool_result");
        let last = first + Duration::from_secs(1);
        assert_eq!(in_flight.watch_next_deadline(), Some(last));
        // None in flight: the wake-up planned stays, so the next call (due
        // after it) does not wake the watchdog. One call at a time costs
        // it no wake-up per call.
        in_flight.answer("b", "tool_result");
        assert_eq!(in_flight.watch_next_deadline(), Some(last));
        let _ = in_flight.insert("d".into(), "tool_call", last + Duration::from_secs(1));
        assert!(!woken(&in_flight));
        in_flight.answer("d", "tool_result");
        // A planned wake-up already past is not kept.
        let past = Instant::now() - Duration::from_millis(1);
        let _ = in_flight.insert("e".into(), "tool_call", past);
        assert!(woken(&in_flight));
        in_flight.answer("e", "tool_result");
        assert_eq!(in_flight.watch_next_deadline(), None, "idle again");
    }

    #[test]
    fn only_the_answer_of_its_kind_ends_a_request() {
        let in_flight = InFlight::default();
        let deadline = soon();
        let _ = in_flight.insert("k1".into(), "tool_call", deadline);
        let _ = in_flight.insert("k2".into(), "event_intercept", deadline);
        // Attack: a guest echoes the ids on frames that answer nothing, or
        // answer another kind of request, to call off its deadline.
        for (id, frame_type) in [
            ("k1", "notify"),
            ("k1", "command_response"),
            ("k1", "event_intercept_response"),
            ("k2", "tool_result"),
            ("k2", "register_tool"),
        ] {
            in_flight.answer(id, frame_type);
        }
        assert_eq!(in_flight.report().requests.len(), 2);
        assert_eq!(in_flight.watch_next_deadline(), Some(deadline));
        in_flight.answer("k1", "tool_result");
        in_flight.answer("k2", "event_intercept_response");
        assert!(in_flight.report().requests.is_empty());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_lone_request_waits_for_the_relay_and_a_burst_rides_with_a_due_report() {
        let in_flight = Arc::new(InFlight::told_to_a_relay());
        // Quiet: the request is reported at once, and waits for that.
        let changes = in_flight.insert("a".into(), "tool_call", soon());
        assert_eq!(changes, Some(1));
        assert!(in_flight.take_urgent());
        assert!(!in_flight.take_urgent(), "taken once");
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move { in_flight.known_to_the_relay(1).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it waits until the relay is told");
        let report = in_flight.report();
        assert_eq!(report.changes, 1);
        in_flight.told(report.changes);
        let waited = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(waited, Ok(Ok(()))), "{waited:?}");
        // A report is due: the next changes ride with it.
        in_flight.answer("a", "tool_result");
        in_flight.set_due(true);
        assert_eq!(
            in_flight.insert("b".into(), "command_invoked", soon()),
            None
        );
        assert!(!in_flight.take_urgent());
        let report = in_flight.report();
        assert_eq!(
            (report.changes, report.requests),
            (3, vec![("b".into(), "command_invoked".into())])
        );
        // The reporter gone: nothing waits for it.
        in_flight.set_due(false);
        let changes = in_flight.insert("c".into(), "tool_call", soon());
        assert_eq!(changes, Some(4));
        in_flight.stop_telling();
        let waited =
            tokio::time::timeout(Duration::from_secs(5), in_flight.known_to_the_relay(4)).await;
        assert!(waited.is_ok());
    }
}
