//! Transports: what carries an extension's frames, and how it is stopped.
//!
//! A runtime only moves bytes. It hands the session a [`Transport`]: the
//! extension's output as a byte stream, its input as a byte sink, a way to
//! stop it, and a signal that says when (and why) it ended. Nothing above
//! this module knows whether the extension is a subprocess or a wasm guest.

pub mod native;
mod stderr_log;
pub mod wasm;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// Why an extension stopped running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited with a status code.
    Code(i32),
    /// It was ended by a signal.
    Signal(i32),
    /// A wasm guest trapped (panic, `unreachable`, a limit).
    Trap(String),
    /// A wasm guest ran out of memory.
    OutOfMemory {
        /// The limit it hit, in MiB, across all its memories and tables.
        limit_mb: u64,
    },
    /// The host stopped it after a deadline.
    Killed(String),
    /// The host stopped a wasm guest that computed past its budget without
    /// reading its input (see the wasm runtime's compute budget): started
    /// again, it would do the same.
    OverCompute {
        /// The budget it spent: computing allowed between two reads.
        limit: Duration,
    },
}

impl Exit {
    /// Whether this is an orderly exit (status 0).
    pub fn is_clean(&self) -> bool {
        matches!(self, Self::Code(0))
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Code(code) => write!(f, "exited with status {code}"),
            Self::Signal(signal) => {
                write!(f, "killed by signal {signal} ({})", signal_name(*signal))
            }
            Self::Trap(reason) => write!(f, "trapped: {reason}"),
            Self::OutOfMemory { limit_mb } => {
                write!(
                    f,
                    "ran out of memory (limit {limit_mb} MiB across all memories and tables)"
                )
            }
            Self::Killed(why) => write!(f, "killed: {why}"),
            Self::OverCompute { limit } => write!(
                f,
                "killed: computed for {} s without reading its input (twice the longest a \
                 tool call of it may take)",
                limit.as_secs_f64()
            ),
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "signal",
    }
}

/// Stops a running extension. Both calls are idempotent and harmless after exit.
pub trait Control: Send + Sync {
    /// Ask it to stop (a subprocess gets SIGTERM).
    fn terminate(&self);
    /// Stop it now (a subprocess gets SIGKILL; a guest traps at once).
    fn kill(&self);
    /// A request to it missed its deadline. A runtime that can tell a busy
    /// extension from an idle one may stop a busy one here; by default
    /// nothing happens (zot keeps a slow native extension running).
    fn deadline_missed(&self) {}
}

/// The channel to one running extension.
pub struct Transport {
    /// What the extension writes (its stdout).
    pub output: Box<dyn AsyncRead + Send + Unpin>,
    /// What the extension reads (its stdin).
    pub input: Box<dyn AsyncWrite + Send + Unpin>,
    /// How to stop it.
    pub control: Arc<dyn Control>,
    /// Becomes `Some` once it has stopped.
    pub exit: watch::Receiver<Option<Exit>>,
    /// Where a reader of `output` may take the extension's writes on the
    /// extension's own task instead (a wasm guest's; `None`: a process).
    pub(crate) direct_output: Option<OutputSlot>,
}

/// Takes an extension's writes where it makes them, on its own task, for
/// a reader of its output that would otherwise be woken for every one: no
/// task switch, and no copy through the pipe.
pub(crate) trait DirectOutput: Send + Sync {
    /// Takes `bytes`, written by the extension after everything its output
    /// pipe held was read (the pipe is empty, and the extension writes
    /// nothing else meanwhile).
    fn write(&self, bytes: &[u8]) -> Direct;
}

/// What a [`DirectOutput`] did with a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direct {
    /// Taken: the write is done.
    Taken,
    /// Not now (the reader is behind): the bytes go through the pipe.
    Later,
    /// The reader is gone: the write fails as a closed stream's.
    Closed,
}

/// Where a [`DirectOutput`] is installed, once; shared with the
/// extension's end of the pipe.
pub(crate) type OutputSlot = Arc<OnceLock<Arc<dyn DirectOutput>>>;

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("exit", &*self.exit.borrow())
            .finish_non_exhaustive()
    }
}

/// Opens `path` for appending an extension's stderr, creating its folder.
/// When the log cannot be opened, the output is discarded and a warning says
/// why: a broken log folder must not stop an extension from starting.
///
/// A run writes at most [`stderr_log::LOG_CAP`], and every run appends: a
/// log that has reached the cap is moved to `….log.1` first (replacing the
/// one there), so that an extension started again and again (a
/// `/reload-ext` it asks for, a CLI in a loop) keeps less than four caps'
/// worth of log in all, not one per run (`THREATS.md` rule 6).
pub fn open_log(path: &std::path::Path) -> Option<std::fs::File> {
    if path
        .symlink_metadata()
        .is_ok_and(|meta| meta.is_file() && meta.len() >= stderr_log::LOG_CAP)
    {
        let mut older = path.as_os_str().to_owned();
        older.push(".1");
        if let Err(err) = std::fs::rename(path, &older) {
            tracing::warn!("cannot move the full log `{}` aside: {err}", path.display());
        }
    }
    let open = || crate::home::open_append(path);
    match open() {
        Ok(file) => Some(file),
        Err(err) => {
            tracing::warn!(
                "cannot open log `{}`: {err}; the extension's stderr is discarded",
                path.display()
            );
            None
        }
    }
}

/// An extension could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A subprocess could not be spawned.
    #[error(transparent)]
    Native(#[from] native::SpawnError),
    /// A wasm program could not be loaded.
    #[error(transparent)]
    Wasm(#[from] wasm::WasmError),
    /// A data package has no program to start (its tools, plugins and
    /// skills are loaded by the host).
    #[error("`{name}` is a data package: it has no program to start")]
    NoProgram {
        /// The package.
        name: String,
    },
}

/// Starts extensions of every kind; owns the wasm engine, created on first use.
#[derive(Debug)]
pub struct Launcher {
    home: crate::home::ZotHome,
    events: Option<tokio::sync::broadcast::Sender<crate::event::HostEvent>>,
    native: Option<native::NativeConfinement>,
    cache_cap: u64,
    // The zotbox executable first compiles run in, and the data memory
    // each may use; `None`: in-process.
    compiler: Option<(std::path::PathBuf, u64)>,
    wasm: std::sync::OnceLock<Result<Arc<wasm::WasmRuntime>, String>>,
}

impl Launcher {
    /// A launcher writing logs and the compile cache under `home`.
    pub fn new(home: crate::home::ZotHome) -> Self {
        Self {
            home,
            events: None,
            native: None,
            cache_cap: wasm::DEFAULT_CACHE_CAP,
            compiler: None,
            wasm: std::sync::OnceLock::new(),
        }
    }

    /// The data dir a confined native extension may write
    /// (`$ZOT_HOME/data/<name>/` when installed there, else keyed by its
    /// folder: `NativeConfinement::data_dir`), when native
    /// extensions are confined.
    pub fn native_data_dir(
        &self,
        manifest: &crate::manifest::Manifest,
    ) -> Option<std::path::PathBuf> {
        match (&self.native, &manifest.program) {
            (Some(native), crate::manifest::Program::Native { .. }) => {
                Some(native.data_dir(manifest))
            }
            _ => None,
        }
    }

    /// This launcher, starting native extensions confined by the kernel
    /// (`None`: as zot would, unconfined).
    pub fn with_native_confinement(mut self, native: Option<native::NativeConfinement>) -> Self {
        self.native = native;
        self
    }

    /// This launcher, announcing first compiles of wasm programs on
    /// `events` (see `wasm::WasmRuntime::with_events`).
    pub fn with_events(
        mut self,
        events: tokio::sync::broadcast::Sender<crate::event::HostEvent>,
    ) -> Self {
        self.events = Some(events);
        self
    }

    /// This launcher, compiling each wasm program it has not compiled
    /// before in a child process of the zotbox executable `zotbox` (see
    /// `wasm::WasmRuntime::with_compiler_process`), which may use at most
    /// `memory_mb` MiB of data memory.
    pub fn with_compiler_process(mut self, zotbox: std::path::PathBuf, memory_mb: u64) -> Self {
        self.compiler = Some((zotbox, memory_mb));
        self
    }

    /// This launcher, keeping at most `cap` bytes of compiled wasm in the
    /// disk cache (default `wasm::DEFAULT_CACHE_CAP`); the least recently
    /// used programs are evicted beyond it.
    pub fn with_cache_cap(mut self, cap: u64) -> Self {
        self.cache_cap = cap;
        self
    }

    /// The wasm runtime, set up on first use.
    ///
    /// # Errors
    ///
    /// `wasm::WasmError::Engine` when the engine cannot be configured.
    pub fn wasm(&self) -> Result<Arc<wasm::WasmRuntime>, wasm::WasmError> {
        self.wasm
            .get_or_init(|| {
                wasm::WasmRuntime::new(Some(self.home.cache_dir()))
                    .map(|runtime| {
                        let mut runtime = runtime.with_cache_cap(self.cache_cap);
                        if let Some((zotbox, memory_mb)) = &self.compiler {
                            runtime = runtime.with_compiler_process(zotbox.clone(), *memory_mb);
                        }
                        Arc::new(match &self.events {
                            Some(events) => runtime.with_events(events.clone()),
                            None => runtime,
                        })
                    })
                    .map_err(|err| err.to_string())
            })
            .clone()
            .map_err(wasm::WasmError::Engine)
    }

    /// Starts the extension `manifest` describes, its stderr appended to its
    /// log. A wasm guest gets `limits` and reaches the capability layer
    /// through `sandbox` (none: every capability call is refused).
    ///
    /// # Errors
    ///
    /// `StartError` when it cannot be started at all.
    pub async fn start(
        &self,
        manifest: &crate::manifest::Manifest,
        limits: wasm::GuestLimits,
        sandbox: Option<Arc<crate::sandbox::Sandbox>>,
    ) -> Result<Transport, StartError> {
        self.start_expecting(manifest, limits, sandbox, None).await
    }

    /// [`Launcher::start`], a wasm program only from bytes whose SHA-256 is
    /// `wasm_sha256` when given (what the launch step's trust or lock check
    /// asks).
    pub(crate) async fn start_expecting(
        &self,
        manifest: &crate::manifest::Manifest,
        limits: wasm::GuestLimits,
        sandbox: Option<Arc<crate::sandbox::Sandbox>>,
        wasm_sha256: Option<[u8; 32]>,
    ) -> Result<Transport, StartError> {
        let log = open_log(&self.home.extension_log(manifest.name()));
        match &manifest.program {
            crate::manifest::Program::Native { exec, args } => {
                let confinement = match &self.native {
                    Some(settings) => Some(native::Confined {
                        settings,
                        data_dir: settings.data_dir(manifest),
                        nested: settings.nested_control_paths().await.map_err(|err| {
                            native::SpawnError::Confine {
                                program: native::resolve_exec(exec, &manifest.dir)
                                    .unwrap_or_else(|_| exec.into()),
                                reason: err.to_string(),
                            }
                        })?,
                    }),
                    None => None,
                };
                let secrets = sandbox.map(|s| s.secret_env()).unwrap_or_default();
                Ok(native::spawn(
                    exec,
                    args,
                    &manifest.dir,
                    log,
                    confinement,
                    &secrets,
                )?)
            }
            crate::manifest::Program::Wasm { path } => Ok(self
                .wasm()?
                .start(manifest.name(), path, limits, log, sandbox, wasm_sha256)
                .await?),
            crate::manifest::Program::Data => Err(StartError::NoProgram {
                name: manifest.name().to_owned(),
            }),
        }
    }
}
