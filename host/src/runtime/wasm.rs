//! WebAssembly extensions: WASI components and core modules run in-process under wasmtime.
//!
//! A guest speaks the protocol on its WASI stdin/stdout, which are in-memory
//! pipes ([`pipe`]) to its session. It runs on its own tokio task and yields
//! to the executor at every epoch tick, so a guest that spins never stalls
//! another extension or the host.
//!
//! # What a guest gets
//!
//! Deny by default: stdin/stdout as the protocol; stderr appended to its log;
//! `argv` = its name; clocks and random. No preopened directories, no
//! environment variables, and no network: `wasi:sockets` is linked and
//! every use refused ([`net`]).
//!
//! # Limits
//!
//! - memory: `memory_mb` covers all of a guest's linear memories and tables
//!   together; a growth beyond it is refused, and a guest that needs it traps
//!   and its exit says it ran out of memory, naming the limit. A guest has at
//!   most 100 core instances, 16 memories and 100 tables; a program that
//!   declares more fails to load ([`limiter`] has the rules);
//! - time: when a request misses its deadline while the guest is computing
//!   (not parked waiting on stdin), the guest is killed; so is a guest that
//!   computes longer than twice its call timeout without reading its input,
//!   a request open or not ([`compute`]);
//! - output: stdout is a bounded pipe, so a flooding guest waits for the host;
//! - the program: a regular file of at most `MAX_WASM_BYTES`.

mod cache;
mod compute;
mod guest;
mod host_api;
pub mod limiter;
mod net;
mod p1_stdin;
mod pipe;
mod ticker;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use tokio::sync::watch;
use wasmtime::component::{Component, Linker as ComponentLinker};
use wasmtime::{Config, Engine, Linker as ModuleLinker, Module};

use super::Transport;
use cache::{ArtifactCache, Kind};
use guest::{ComponentState, GuestControl, GuestLog, ModuleState};

pub use cache::DEFAULT_CAP as DEFAULT_CACHE_CAP;

/// The largest wasm file loaded: many times the largest real guest (a
/// Python component is 18 MB), and a bound on what a `wasm` path linked to
/// something endless costs before it is refused.
pub const MAX_WASM_BYTES: u64 = 256 * 1024 * 1024;

/// A wasm extension could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The file could not be read.
    #[error("cannot read `{}`: {error}", path.display())]
    Read {
        /// The wasm file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not WebAssembly.
    #[error("`{}` is not a WebAssembly component or module", path.display())]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// Compilation failed.
    #[error("cannot compile `{}`: {reason}", path.display())]
    Compile {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason.
        reason: String,
    },
    /// The guest imports something the host does not provide.
    #[error("cannot load `{}`: {reason}", path.display())]
    Link {
        /// The file.
        path: PathBuf,
        /// wasmtime's reason, naming the import.
        reason: String,
    },
    /// The program declares more memories or tables than a guest may have.
    #[error("cannot load `{}`: {reason}", path.display())]
    Limit {
        /// The file.
        path: PathBuf,
        /// What it declares, and the cap.
        reason: String,
    },
    /// The file is not the content a start expected: it changed after the
    /// start checked it (against a workspace's trust or the lockfile).
    #[error(
        "`{}` changed after zotbox checked it and before it was read, so it was not loaded: \
         start it again to have it checked anew",
        path.display()
    )]
    Changed {
        /// The file.
        path: PathBuf,
    },
    /// The engine could not be configured.
    #[error("cannot set up the wasm engine: {0}")]
    Engine(String),
}

/// Per-guest settings.
#[derive(Debug, Clone)]
pub struct GuestLimits {
    /// Ceiling of all linear memories and tables together, bytes.
    pub memory_bytes: usize,
    /// The most a guest computes between two reads of its input (see
    /// `compute`): twice its call timeout.
    pub compute: std::time::Duration,
}

#[derive(Clone)]
enum Prepared {
    Component(wasmtime::component::InstancePre<ComponentState>),
    Module(wasmtime::InstancePre<ModuleState>),
}

/// Identifies a wasm file's contents cheaply, so a restart skips hashing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileStamp {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

/// A program prepared from one wasm path.
#[derive(Clone)]
struct Memo {
    stamp: FileStamp,
    prepared: Prepared,
    // SHA-256 of the bytes it was prepared from, when a start expected one.
    sha256: Option<[u8; 32]>,
    // When it was last prepared or served, on the [`Memos`] clock.
    used: u64,
}

/// Programs kept prepared. A host serving many workspaces over a long day
/// would otherwise keep the compiled code of every wasm path it ever ran;
/// an evicted program still running keeps its code until it ends, and its
/// next start loads it from the disk cache (about a millisecond).
const MAX_PREPARED: usize = 64;

/// The programs prepared so far, one per wasm path, the least recently used
/// evicted past [`MAX_PREPARED`].
#[derive(Default)]
struct Memos {
    by_path: HashMap<PathBuf, Memo>,
    clock: u64,
}

impl Memos {
    /// What was prepared for `stamp` if it is still current, marked used.
    fn serve(&mut self, stamp: &FileStamp) -> Option<Memo> {
        self.clock += 1;
        let memo = self
            .by_path
            .get_mut(&stamp.path)
            .filter(|memo| memo.stamp == *stamp)?;
        memo.used = self.clock;
        Some(memo.clone())
    }

    fn keep(&mut self, mut memo: Memo) {
        self.clock += 1;
        memo.used = self.clock;
        self.by_path.insert(memo.stamp.path.clone(), memo);
        while self.by_path.len() > MAX_PREPARED {
            let Some(oldest) = self
                .by_path
                .iter()
                .min_by_key(|(_, memo)| memo.used)
                .map(|(path, _)| path.clone())
            else {
                break;
            };
            self.by_path.remove(&oldest);
        }
    }
}

impl Memo {
    /// The prepared program, if it may stand for `expected` bytes.
    fn serves(self, expected: Option<&[u8; 32]>) -> Option<Prepared> {
        match expected {
            Some(expected) if self.sha256.as_ref() != Some(expected) => None,
            _ => Some(self.prepared),
        }
    }
}

/// The wasm engine, its linkers, and every program loaded so far.
pub struct WasmRuntime {
    engine: Engine,
    // Advances the epoch while a guest runs (rules in `ticker`).
    ticker: ticker::Owned,
    components: ComponentLinker<ComponentState>,
    modules: ModuleLinker<ModuleState>,
    cache: ArtifactCache,
    // One entry per wasm path: a rebuilt file replaces its old code.
    prepared: Mutex<Memos>,
    // One lock per cache entry: identical guests starting together compile
    // once; the others wait and load what the first one cached.
    compiling: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    // Where first compiles are announced (a caller may show them).
    events: Option<tokio::sync::broadcast::Sender<crate::event::HostEvent>>,
    // The process a first compile runs in (`zotbox host compile`); `None`:
    // this one.
    compiler: Option<CompilerProcess>,
}

/// A first compile's process: the zotbox executable and the data memory
/// it may use (the policy's, which may change while a long-lived host runs).
#[derive(Debug)]
struct CompilerProcess {
    zotbox: PathBuf,
    memory_mb: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmRuntime").finish_non_exhaustive()
    }
}

impl WasmRuntime {
    /// An engine with epoch interruption, caching compiled code in
    /// `cache_dir` (none when `None`).
    ///
    /// # Errors
    ///
    /// [`WasmError::Engine`] when wasmtime rejects the configuration.
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Self, WasmError> {
        let engine = engine()?;
        let components =
            guest::component_linker(&engine).map_err(|e| WasmError::Engine(format!("{e:#}")))?;
        let modules =
            guest::module_linker(&engine).map_err(|e| WasmError::Engine(format!("{e:#}")))?;
        let ticker = ticker::Ticker::start(&engine);
        Ok(Self {
            engine,
            ticker,
            components,
            modules,
            cache: ArtifactCache::new(cache_dir),
            prepared: Mutex::new(Memos::default()),
            compiling: Mutex::new(HashMap::new()),
            events: None,
            compiler: None,
        })
    }

    /// This runtime, running each first compile in a child process,
    /// `zotbox host compile` of the executable `zotbox`, which stores the
    /// program in the disk cache this runtime then loads it from.
    ///
    /// Two reasons. A compile leaves the compiler's code and heap resident
    /// (about 17 MiB for the example guest) for as long as the process
    /// lives; a long-lived process that hosts many guests, the shared host,
    /// keeps none of it this way. And the compiler's appetite is the
    /// program author's to choose: the child may use at most `memory_mb` MiB
    /// of data memory (`RLIMIT_DATA`, set on itself before it reads the
    /// program; [`Policy::compile_memory_mb`](crate::policy::Policy::compile_memory_mb)),
    /// and a program it cannot compile within that is refused, never
    /// compiled here instead. Only a child that cannot be started, or a
    /// disk cache it cannot store into, leaves the compile to this process.
    pub fn with_compiler_process(mut self, zotbox: PathBuf, memory_mb: u64) -> Self {
        self.compiler = Some(CompilerProcess {
            zotbox,
            memory_mb: memory_mb.into(),
        });
        self
    }

    /// The data memory, MiB, the next first compiles' processes may use
    /// (nothing without `WasmRuntime::with_compiler_process`): the shared
    /// host sets it from the policy each extension is started under.
    pub fn set_compile_memory_mb(&self, memory_mb: u64) {
        if let Some(compiler) = &self.compiler {
            compiler
                .memory_mb
                .store(memory_mb, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// This runtime, announcing each first compile on `events`
    /// ([`HostEvent::Compiling`](crate::event::HostEvent::Compiling), then
    /// [`HostEvent::Compiled`](crate::event::HostEvent::Compiled)).
    pub fn with_events(
        mut self,
        events: tokio::sync::broadcast::Sender<crate::event::HostEvent>,
    ) -> Self {
        self.events = Some(events);
        self
    }

    /// This runtime, its disk cache holding at most `cap` bytes of
    /// compiled programs (default [`DEFAULT_CACHE_CAP`]): writing a new one
    /// evicts the least recently used beyond it.
    pub fn with_cache_cap(mut self, cap: u64) -> Self {
        self.cache = self.cache.with_cap(cap);
        self
    }

    /// Compiles (or loads from cache) and links `path`, without running it.
    ///
    /// # Errors
    ///
    /// [`WasmError`] when the file cannot be read, compiled or linked.
    pub fn prepare(&self, name: &str, path: &Path) -> Result<(), WasmError> {
        self.load(name, path, None).map(drop)
    }

    /// What `path` identifies now, and what was prepared for it if that is
    /// still current.
    fn memoized(&self, path: &Path) -> Result<(FileStamp, Option<Memo>), WasmError> {
        let meta = std::fs::metadata(path).map_err(|error| WasmError::Read {
            path: path.to_owned(),
            error,
        })?;
        let stamp = FileStamp {
            path: path.to_owned(),
            len: meta.len(),
            modified: meta.modified().ok(),
        };
        let memo = self.memo().serve(&stamp);
        Ok((stamp, memo))
    }

    /// Prepares `path`; with `expected`, only from bytes whose SHA-256 it
    /// is (a trusted workspace's file, checked as it is read).
    fn load(
        &self,
        name: &str,
        path: &Path,
        expected: Option<&[u8; 32]>,
    ) -> Result<Prepared, WasmError> {
        let (stamp, memo) = self.memoized(path)?;
        if let Some(prepared) = memo.and_then(|memo| memo.serves(expected)) {
            return Ok(prepared);
        }
        // Capped, and only a regular file: a workspace's `wasm` linked to
        // `/proc/self/pagemap` or a FIFO must not fill memory or wait forever.
        let wasm = crate::user_file::read_regular(path, MAX_WASM_BYTES)
            .map_err(|error| WasmError::Read {
                path: path.to_owned(),
                error,
            })?
            .ok_or_else(|| too_large(path.to_owned()))?;
        let sha256 = match expected {
            Some(expected) => {
                let read: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(&wasm).into();
                if read != *expected {
                    return Err(WasmError::Changed {
                        path: path.to_owned(),
                    });
                }
                Some(read)
            }
            None => None,
        };
        let kind = detect_kind(&wasm).ok_or_else(|| WasmError::NotWasm {
            path: path.to_owned(),
        })?;
        let entry = self.cache.entry(&self.engine, kind, &wasm);
        let entry_lock = entry.as_ref().map(|entry| {
            self.compiling
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(entry.clone())
                .or_default()
                .clone()
        });
        let _compiling = entry_lock
            .as_ref()
            .map(|lock| lock.lock().unwrap_or_else(PoisonError::into_inner));
        let link_error = |e: wasmtime::Error| WasmError::Link {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        };
        let limit_error = |reason: String| WasmError::Limit {
            path: path.to_owned(),
            reason,
        };
        let prepared = match kind {
            Kind::Component => {
                let component = self.compiled(
                    name,
                    path,
                    entry.as_deref(),
                    &wasm,
                    |verified| match verified {
                        // SAFETY: see `compiled`; `path` opens the sealed
                        // copy that was verified.
                        #[allow(unsafe_code)]
                        cache::Verified::Sealed { path, .. } => unsafe {
                            Component::deserialize_file(&self.engine, path)
                        },
                        // SAFETY: see `compiled`; these are the verified bytes.
                        #[allow(unsafe_code)]
                        cache::Verified::Bytes(bytes) => unsafe {
                            Component::deserialize(&self.engine, bytes)
                        },
                    },
                    |wasm| Component::new(&self.engine, wasm),
                    Component::serialize,
                )?;
                limiter::check_declared(component.resources_required().as_ref())
                    .map_err(limit_error)?;
                Prepared::Component(
                    self.components
                        .instantiate_pre(&component)
                        .map_err(link_error)?,
                )
            }
            Kind::Module => {
                let module = self.compiled(
                    name,
                    path,
                    entry.as_deref(),
                    &wasm,
                    |verified| match verified {
                        // SAFETY: see `compiled`; `file` is the sealed copy
                        // that was verified.
                        #[allow(unsafe_code)]
                        cache::Verified::Sealed { file, .. } => unsafe {
                            Module::deserialize_open_file(&self.engine, file)
                        },
                        // SAFETY: see `compiled`; these are the verified bytes.
                        #[allow(unsafe_code)]
                        cache::Verified::Bytes(bytes) => unsafe {
                            Module::deserialize(&self.engine, bytes)
                        },
                    },
                    |wasm| Module::new(&self.engine, wasm),
                    Module::serialize,
                )?;
                limiter::check_declared(Some(&module.resources_required())).map_err(limit_error)?;
                Prepared::Module(self.modules.instantiate_pre(&module).map_err(link_error)?)
            }
        };
        self.memo().keep(Memo {
            stamp,
            prepared: prepared.clone(),
            sha256,
            used: 0,
        });
        Ok(prepared)
    }

    /// The compiled program: from the disk cache when a verified entry
    /// exists, else compiled now and stored.
    ///
    /// Deserializing is `unsafe` in wasmtime for two reasons, and both hold
    /// here. (1) An artifact is trusted machine code: entries are only ever
    /// written by this function, are named by the engine's compatibility
    /// hash (so a different wasmtime or configuration never reads them), and
    /// end in a checksum of their bytes that rejects truncated or altered
    /// entries; wasmtime re-checks its own header too. Whoever can forge an
    /// entry with a valid checksum can equally edit the user's manifests and
    /// policy, so the cache adds no new trust. (2) A mapped file must not
    /// change while mapped: wasmtime never maps the entry itself but the
    /// copy that was checked, a memfd sealed against writing, shrinking and
    /// growing (or plain bytes, which it copies), so nobody — not even a
    /// process that rewrites the entry in place — can change it.
    #[allow(clippy::too_many_arguments)]
    fn compiled<T>(
        &self,
        name: &str,
        path: &Path,
        entry: Option<&Path>,
        wasm: &[u8],
        deserialize_cached: impl Fn(cache::Verified) -> wasmtime::Result<T>,
        compile: impl FnOnce(&[u8]) -> wasmtime::Result<T>,
        serialize: impl FnOnce(&T) -> wasmtime::Result<Vec<u8>>,
    ) -> Result<T, WasmError> {
        let cached = |entry: &Path| match deserialize_cached(ArtifactCache::open(entry)?) {
            Ok(compiled) => Some(compiled),
            Err(err) => {
                tracing::warn!(
                    "cached artifact for `{}` rejected ({err:#}); recompiling",
                    crate::text::shown(name)
                );
                None
            }
        };
        if let Some(compiled) = entry.and_then(cached) {
            return Ok(compiled);
        }
        let extension: Arc<str> = Arc::from(name);
        self.announce(|| crate::event::HostEvent::Compiling {
            extension: extension.clone(),
            bytes: u64::try_from(wasm.len()).unwrap_or(u64::MAX),
        });
        let started = Instant::now();
        let announce_compiled = || {
            self.announce(|| crate::event::HostEvent::Compiled {
                extension: extension.clone(),
                took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        };
        if let (Some(compiler), Some(entry)) = (&self.compiler, entry) {
            let outcome = compiler
                .compile(&self.cache, wasm)
                .and_then(|verdict| match verdict {
                    CompileVerdict::Stored => cached(entry)
                        .map(Ok)
                        .ok_or_else(|| "it stored no usable cache entry".to_owned()),
                    CompileVerdict::Refused { reason } => Ok(Err(reason)),
                });
            match outcome {
                Ok(Ok(compiled)) => {
                    announce_compiled();
                    tracing::info!(
                        "compiled `{}` in a child process in {:?}",
                        crate::text::shown(name),
                        started.elapsed()
                    );
                    return Ok(compiled);
                }
                // The program does not compile: compiling it here would only
                // say so again, with the compiler's memory left behind.
                Ok(Err(reason)) => {
                    announce_compiled();
                    return Err(WasmError::Compile {
                        path: path.to_owned(),
                        reason,
                    });
                }
                // Not compiled here either: without the child's memory cap
                // a hostile program could take the host's memory, and what
                // keeps the child from starting (no file descriptor or
                // process left, say) passes.
                Err(why) => {
                    announce_compiled();
                    return Err(WasmError::Compile {
                        path: path.to_owned(),
                        reason: format!(
                            "the compiler process did not run ({why}); the host does not \
                             compile without its memory cap, so start the extension again"
                        ),
                    });
                }
            }
        }
        let compiled = compile(wasm);
        announce_compiled();
        let compiled = compiled.map_err(|e| WasmError::Compile {
            path: path.to_owned(),
            reason: format!("{e:#}"),
        })?;
        tracing::info!("compiled `{name}` in {:?}", started.elapsed());
        if let Some(entry) = entry {
            match serialize(&compiled) {
                Ok(bytes) => self.cache.write(entry, &bytes),
                Err(err) => tracing::warn!("cannot serialise `{name}` for the cache: {err}"),
            }
        }
        Ok(compiled)
    }

    /// Sends an event when someone listens (none listening is no error).
    fn announce(&self, event: impl FnOnce() -> crate::event::HostEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event());
        }
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Memos> {
        self.prepared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the guest at `path` on its own task and returns its transport;
    /// with `expected`, only from bytes whose SHA-256 it is.
    ///
    /// # Errors
    ///
    /// [`WasmError`] when the program cannot be loaded; a guest that fails
    /// later (a trap while instantiating) exits with the reason instead.
    pub async fn start(
        self: &Arc<Self>,
        name: &str,
        path: &Path,
        limits: GuestLimits,
        log: Option<std::fs::File>,
        sandbox: Option<Arc<crate::sandbox::Sandbox>>,
        expected: Option<[u8; 32]>,
    ) -> Result<Transport, WasmError> {
        // Prepared already (every start after the first): no thread hop.
        let memo = self.memoized(path)?.1;
        let prepared = if let Some(prepared) = memo.and_then(|memo| memo.serves(expected.as_ref()))
        {
            prepared
        } else {
            let runtime = self.clone();
            let (name, owned_path) = (name.to_owned(), path.to_owned());
            let load = move || runtime.load(&name, &owned_path, expected.as_ref());
            match tokio::task::spawn_blocking(load).await {
                Ok(result) => result?,
                Err(join) => {
                    return Err(WasmError::Compile {
                        path: path.to_owned(),
                        reason: format!("the compiler task failed: {join}"),
                    });
                }
            }
        };
        let (host_input, guest_stdin) = pipe::stdin_pipe(pipe::PIPE_CAPACITY);
        let (guest_stdout, host_output) = pipe::stdout_pipe(pipe::PIPE_CAPACITY);
        let direct_output = Some(guest_stdout.direct_slot());
        let log = GuestLog::new(log);
        let (exit_tx, exit_rx) = watch::channel(None);
        let control = Arc::new(GuestControl::new(guest_stdin.clone()));
        let io = guest::GuestIo {
            name: name.to_owned(),
            stdin: guest_stdin,
            stdout: guest_stdout,
            log,
            limits,
            sandbox,
        };
        let engine = self.engine.clone();
        // The epoch advances only while some guest's task runs. What the
        // task logs (the bridge writes the guest's frames to zot on it) is
        // the instance's, as the bridge's own tasks' is.
        let task = crate::instance_log::spawn(self.ticker.count_while_polled(
            guest::run(engine, prepared, io, exit_tx, control.clone()),
            control.clock(),
        ));
        control.attach(task.abort_handle());
        Ok(Transport {
            output: Box::new(host_output),
            input: Box::new(host_input),
            control,
            exit: exit_rx,
            direct_output,
        })
    }
}

impl CompilerProcess {
    /// Runs `zotbox host compile` on `wasm` (given on its stdin, not by
    /// path: the bytes compiled are the bytes read and keyed here, whatever
    /// the file holds by now), which stores it in `cache`; its verdict, or
    /// why there is none (it could not be started). A child that ends
    /// without a verdict (killed by a signal, out of memory, crashed) is a
    /// refusal: this process would fare no better, and must not try without
    /// the child's cap. Its stderr is this process's (the host's log).
    fn compile(&self, cache: &ArtifactCache, wasm: &[u8]) -> Result<CompileVerdict, String> {
        use std::io::{Read as _, Write as _};
        use std::os::unix::process::ExitStatusExt as _;
        use std::process::{Command, Stdio};
        let (dir, cap) = cache.place().ok_or("no disk cache")?;
        let memory_mb = self.memory_mb.load(std::sync::atomic::Ordering::Relaxed);
        let mut child = Command::new(&self.zotbox)
            .args(["host", "compile", "--cache"])
            .arg(dir)
            .arg("--cap")
            .arg(cap.to_string())
            .arg("--memory-mb")
            .arg(memory_mb.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|err| format!("cannot start `{}`: {err}", self.zotbox.display()))?;
        // It reads all of its stdin before it writes its one short line, so
        // neither side waits on the other.
        let sent = child.stdin.take().map(|mut stdin| stdin.write_all(wasm));
        let mut answer = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = stdout.take(64 * 1024).read_to_end(&mut answer);
        }
        let status = child.wait().map_err(|err| err.to_string())?;
        if let (true, Ok(verdict)) = (
            status.success(),
            serde_json::from_slice::<CompileVerdict>(&answer),
        ) {
            return Ok(verdict);
        }
        if let Some(Err(err)) = sent {
            // It stopped reading: what it wrote on stderr says why.
            tracing::debug!("the compiler process took only part of the program: {err}");
        }
        // SIGXCPU: what the kernel sends a process past its soft `RLIMIT_CPU`.
        let reason = match status.signal() {
            Some(signal) if signal == nix::sys::signal::Signal::SIGXCPU as i32 => format!(
                "the compiler process used its {COMPILE_CPU_SECS} s of CPU time without a verdict"
            ),
            signal => {
                let ended = match signal {
                    Some(signal) => format!("was killed by signal {signal}"),
                    None => format!("ended ({status})"),
                };
                format!(
                    "the compiler process {ended} without a verdict; it may use at most \
                     {memory_mb} MiB (policy `max_compile_memory_mb`)"
                )
            }
        };
        Ok(CompileVerdict::Refused { reason })
    }
}

/// The engine of every runtime (and of `zotbox host compile`): epoch
/// interruption, the component model.
fn engine() -> Result<Engine, WasmError> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    Engine::new(&config).map_err(|e| WasmError::Engine(format!("{e:#}")))
}

/// The CPU time `zotbox host compile` may use, seconds (`RLIMIT_CPU`, all
/// its threads together). The largest guests zotbox builds (the 18 MB
/// components of componentize-py and componentize-js) take well under a
/// minute; a program made to compile for longer is refused rather than
/// holding a core of the machine, and a thread of the host, for as long as
/// its author likes.
pub const COMPILE_CPU_SECS: u64 = 600;

/// What `zotbox host compile` answers on stdout, one JSON line.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum CompileVerdict {
    /// Compiled and stored in the cache.
    Stored,
    /// The program does not compile: wasmtime's reason.
    Refused {
        /// As a compile in the runtime's own process would give it.
        reason: String,
    },
}

/// What `zotbox host compile` does for a runtime made
/// `WasmRuntime::with_compiler_process`: reads the program from `program`
/// (at most `MAX_WASM_BYTES`), compiles it with the engine every runtime
/// uses and stores it in the disk cache `cache_dir` (holding at most `cap`
/// bytes), under the entry a runtime looks it up by; then writes its
/// verdict (stored, or refused with the compiler's reason) to `verdict`.
///
/// # Errors
///
/// When the program cannot be read, is too large or is no wasm, the engine
/// cannot be configured, or the verdict cannot be written: no verdict is
/// written then, and the runtime compiles in its own process. A failed
/// store is only logged, as a runtime's own would be; the runtime notices
/// the missing entry.
pub fn compile_into_cache(
    cache_dir: PathBuf,
    cap: u64,
    program: impl std::io::Read,
    mut verdict: impl std::io::Write,
) -> std::io::Result<()> {
    let answer = match compile_program(cache_dir, cap, program) {
        Ok(()) => CompileVerdict::Stored,
        Err(WasmError::Compile { reason, .. }) => CompileVerdict::Refused { reason },
        Err(err) => return Err(std::io::Error::other(err)),
    };
    let mut line = serde_json::to_vec(&answer).map_err(std::io::Error::other)?;
    line.push(b'\n');
    verdict.write_all(&line)?;
    verdict.flush()
}

/// [`compile_into_cache`] without its verdict.
fn compile_program(
    cache_dir: PathBuf,
    cap: u64,
    program: impl std::io::Read,
) -> Result<(), WasmError> {
    let stdin = || PathBuf::from("<stdin>");
    let wasm = crate::user_file::read_at_most(program, MAX_WASM_BYTES)
        .map_err(|error| WasmError::Read {
            path: stdin(),
            error,
        })?
        .ok_or_else(|| too_large(stdin()))?;
    let wasm = wasm.as_slice();
    let engine = engine()?;
    let kind = detect_kind(wasm).ok_or_else(|| WasmError::NotWasm { path: stdin() })?;
    let cache = ArtifactCache::new(Some(cache_dir)).with_cap(cap);
    let Some(entry) = cache.entry(&engine, kind, wasm) else {
        return Ok(());
    };
    let artifact = match kind {
        Kind::Component => Component::new(&engine, wasm).and_then(|c| c.serialize()),
        Kind::Module => Module::new(&engine, wasm).and_then(|m| m.serialize()),
    }
    .map_err(|e| WasmError::Compile {
        path: stdin(),
        reason: format!("{e:#}"),
    })?;
    cache.write(&entry, &artifact);
    Ok(())
}

/// A program over `MAX_WASM_BYTES`, refused before it is compiled.
fn too_large(path: PathBuf) -> WasmError {
    WasmError::Limit {
        path,
        reason: format!(
            "it is larger than the {} MiB a guest may be",
            MAX_WASM_BYTES >> 20
        ),
    }
}

/// Tells a component (`\0asm` version 0x0d, layer 1) from a core module (version 1).
fn detect_kind(wasm: &[u8]) -> Option<Kind> {
    match wasm.get(..8)? {
        [0, b'a', b's', b'm', 1, 0, 0, 0] => Some(Kind::Module),
        [0, b'a', b's', b'm', _, _, 1, 0] => Some(Kind::Component),
        _ => None,
    }
}

impl GuestLimits {
    /// The limits a policy's [`crate::policy::EffectiveLimits`] set.
    pub fn from_effective(limits: &crate::policy::EffectiveLimits) -> Self {
        Self {
            memory_bytes: limits.memory_bytes(),
            compute: limits.call_timeout.value.saturating_mul(2),
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_told_apart_by_header() {
        assert_eq!(detect_kind(b"\0asm\x01\0\0\0rest"), Some(Kind::Module));
        assert_eq!(detect_kind(b"\0asm\x0d\0\x01\0rest"), Some(Kind::Component));
        assert_eq!(detect_kind(b"\x7fELF\x02\x01\x01\0"), None);
        assert_eq!(detect_kind(b"\0asm"), None);
    }

    /// The smallest valid core module: no imports, nothing to run.
    const EMPTY_MODULE: &[u8] = b"\0asm\x01\0\0\0";

    fn entries(dir: &Path) -> usize {
        std::fs::read_dir(dir).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    e.path()
                        .extension()
                        .is_some_and(|x| x == cache::ENTRY_EXTENSION)
                })
                .count()
        })
    }

    #[test]
    fn a_program_compiled_for_the_cache_is_loaded_from_it_without_a_compile() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = tmp.path().join("cache");
        let mut verdict = Vec::new();
        compile_into_cache(
            cache.clone(),
            cache::DEFAULT_CAP,
            EMPTY_MODULE,
            &mut verdict,
        )
        .expect("compiles");
        assert_eq!(verdict, b"\"stored\"\n");
        assert_eq!(entries(&cache), 1);
        let program = tmp.path().join("empty.wasm");
        std::fs::write(&program, EMPTY_MODULE).expect("write");
        let (events, mut heard) = tokio::sync::broadcast::channel(8);
        let runtime = WasmRuntime::new(Some(cache.clone()))
            .expect("runtime")
            .with_events(events);
        runtime.prepare("empty", &program).expect("loads");
        assert!(heard.try_recv().is_err(), "loaded, not compiled");
        assert_eq!(entries(&cache), 1);
    }

    #[test]
    fn a_compiler_process_that_ends_without_a_verdict_is_a_refusal_not_a_retry_here() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = tmp.path().join("cache");
        let program = tmp.path().join("empty.wasm");
        std::fs::write(&program, EMPTY_MODULE).expect("write");
        let memory = |ended: &str| {
            format!(
                "the compiler process {ended} without a verdict; it may use at most 64 MiB \
                 (policy `max_compile_memory_mb`)"
            )
        };
        let cases = [
            // As a compiler over its memory cap ends: aborted, or failed.
            (
                "cat >/dev/null; kill -ABRT $$",
                memory("was killed by signal 6"),
            ),
            ("cat >/dev/null; exit 3", memory("ended (exit status: 3)")),
            // As one past its CPU time ends.
            (
                "cat >/dev/null; kill -XCPU $$",
                format!(
                    "the compiler process used its {COMPILE_CPU_SECS} s of CPU time without a \
                     verdict"
                ),
            ),
        ];
        for (script, reason) in cases {
            let fake = tmp.path().join("zotbox");
            std::fs::write(&fake, format!("#!/bin/sh\n{script}\n")).expect("write");
            std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            let runtime = WasmRuntime::new(Some(cache.clone()))
                .expect("runtime")
                .with_compiler_process(fake, 64);
            let err = runtime
                .prepare("empty", &program)
                .expect_err("refused, not compiled here");
            assert_eq!(
                err.to_string(),
                format!("cannot compile `{}`: {reason}", program.display())
            );
            assert_eq!(entries(&cache), 0, "nothing compiled here");
        }
    }

    #[test]
    fn programs_kept_prepared_are_bounded_the_least_recently_used_going_first() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let runtime = WasmRuntime::new(Some(tmp.path().join("cache"))).expect("runtime");
        let program = |n: usize| {
            let path = tmp.path().join(format!("p{n}.wasm"));
            std::fs::write(&path, EMPTY_MODULE).expect("write");
            path
        };
        for n in 0..MAX_PREPARED {
            runtime.prepare("p", &program(n)).expect("prepared");
        }
        // The first is used again, so the second is the least recent.
        runtime.prepare("p", &program(0)).expect("served");
        runtime
            .prepare("p", &program(MAX_PREPARED))
            .expect("prepared");
        let kept = |n: usize| {
            runtime
                .memo()
                .by_path
                .contains_key(&tmp.path().join(format!("p{n}.wasm")))
        };
        assert_eq!(runtime.memo().by_path.len(), MAX_PREPARED);
        assert!(kept(0) && kept(MAX_PREPARED) && !kept(1));
        // An evicted program starts again, from the disk cache.
        runtime.prepare("p", &program(1)).expect("prepared again");
        assert!(kept(1));
    }

    #[test]
    fn a_compiler_process_that_cannot_start_is_a_refusal_not_a_compile_here() {
        // What keeps the child from starting may be a hostile guest's doing
        // (the host's file descriptors used up): compiling here instead
        // would compile the next program without its memory cap.
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = tmp.path().join("cache");
        let program = tmp.path().join("empty.wasm");
        std::fs::write(&program, EMPTY_MODULE).expect("write");
        let missing = tmp.path().join("no-zotbox");
        let runtime = WasmRuntime::new(Some(cache.clone()))
            .expect("runtime")
            .with_compiler_process(missing.clone(), 64);
        let err = runtime
            .prepare("empty", &program)
            .expect_err("refused, not compiled here");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot compile `{}`: the compiler process did not run (cannot start `{}`: No \
                 such file or directory (os error 2)); the host does not compile without its \
                 memory cap, so start the extension again",
                program.display(),
                missing.display()
            )
        );
        assert_eq!(entries(&cache), 0, "nothing compiled here");
    }

    #[test]
    fn the_compile_for_the_cache_refuses_what_no_runtime_would_load() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = tmp.path().join("cache");
        let mut verdict = Vec::new();
        let not_wasm = compile_into_cache(
            cache.clone(),
            cache::DEFAULT_CAP,
            &b"#!/bin/sh\n"[..],
            &mut verdict,
        )
        .expect_err("no wasm");
        assert_eq!(
            not_wasm.to_string(),
            "`<stdin>` is not a WebAssembly component or module"
        );
        let endless = std::io::Read::take(std::io::repeat(0), MAX_WASM_BYTES + 1);
        let huge = compile_into_cache(cache.clone(), cache::DEFAULT_CAP, endless, &mut verdict)
            .expect_err("too large");
        assert_eq!(
            huge.to_string(),
            "cannot load `<stdin>`: it is larger than the 256 MiB a guest may be"
        );
        assert!(
            verdict.is_empty(),
            "no verdict: the runtime compiles itself"
        );
        assert_eq!(entries(&cache), 0);
    }

    #[test]
    fn a_start_expecting_a_digest_loads_only_those_bytes_even_from_its_memo() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let program = tmp.path().join("guest.wasm");
        std::fs::write(&program, EMPTY_MODULE).expect("write");
        let digest =
            |bytes: &[u8]| -> [u8; 32] { <sha2::Sha256 as sha2::Digest>::digest(bytes).into() };
        let trusted = digest(EMPTY_MODULE);
        // The same module with a custom section: valid, and other bytes.
        let other = [EMPTY_MODULE, b"\0\x02\x01x"].concat();
        let refusal = format!(
            "`{}` changed after zotbox checked it and before it was read, so it was not loaded: \
             start it again to have it checked anew",
            program.display()
        );
        let runtime = WasmRuntime::new(None).expect("runtime");
        runtime
            .load("guest", &program, Some(&trusted))
            .expect("the trusted bytes load");
        // Attack: other bytes where the hashed ones were.
        std::fs::write(&program, &other).expect("write");
        let changed = runtime
            .load("guest", &program, Some(&trusted))
            .err()
            .map(|e| e.to_string());
        assert_eq!(changed.as_deref(), Some(refusal.as_str()));
        // Nothing expected (a user's own file): they load, and the program
        // prepared from them, unhashed, never stands for the trusted digest.
        runtime.load("guest", &program, None).expect("loads");
        let memo = runtime.memoized(&program).expect("stamp").1;
        assert!(memo.is_some_and(|memo| memo.serves(Some(&trusted)).is_none()));
        let changed = runtime
            .load("guest", &program, Some(&trusted))
            .err()
            .map(|e| e.to_string());
        assert_eq!(changed.as_deref(), Some(refusal.as_str()));
        // A program prepared from the trusted bytes stands only for them.
        std::fs::write(&program, EMPTY_MODULE).expect("write");
        runtime
            .load("guest", &program, Some(&trusted))
            .expect("the trusted bytes load");
        let memo = runtime.memoized(&program).expect("stamp").1.expect("memo");
        assert!(memo.clone().serves(Some(&trusted)).is_some());
        assert!(memo.serves(Some(&digest(&other))).is_none());
    }

    #[test]
    fn a_program_that_does_not_compile_is_refused_with_the_compilers_reason() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let cache = tmp.path().join("cache");
        // A type section that says 5 bytes follow, then ends.
        let truncated = b"\0asm\x01\0\0\0\x01\x05\x01";
        let mut verdict = Vec::new();
        compile_into_cache(
            cache.clone(),
            cache::DEFAULT_CAP,
            &truncated[..],
            &mut verdict,
        )
        .expect("a verdict");
        let engine = engine().expect("engine");
        let reason = format!(
            "{:#}",
            Module::new(&engine, truncated).expect_err("does not compile")
        );
        let expected = serde_json::json!({"refused": {"reason": reason}});
        let got: serde_json::Value = serde_json::from_slice(&verdict).expect("one JSON line");
        assert_eq!(got, expected);
        assert_eq!(entries(&cache), 0);
    }
}
