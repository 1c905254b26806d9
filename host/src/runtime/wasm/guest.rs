//! One running guest: its store, what it is linked against, its limits and its end.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::AbortHandle;
use wasmtime::component::{Linker as ComponentLinker, ResourceTable};
use wasmtime::{
    Engine, Linker as ModuleLinker, ResourceLimiter, Store, UpdateDeadline, WasmBacktrace,
};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::compute::{ComputeBudget, ComputeClock};
use super::limiter::Limiter;
use super::pipe::{GuestStdin, GuestStdout};
use super::{GuestLimits, Prepared};
use crate::runtime::stderr_log::StderrLog;
use crate::runtime::{Control, Exit};

/// The tail of stderr kept in memory to explain a trap.
const LOG_TAIL: usize = 4096;

/// Store data of a component guest.
pub(crate) struct ComponentState {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    /// What the guest may do through the `zot:host` imports.
    pub(crate) sandbox: Option<Arc<crate::sandbox::Sandbox>>,
    http: wasmtime_wasi_http::WasiHttpCtx,
    http_hooks: super::net::RefusedHttp,
}

impl wasmtime_wasi_http::WasiHttpView for ComponentState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl WasiView for ComponentState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

/// Store data of a core-module (WASI preview 1) guest.
pub(crate) struct ModuleState {
    pub(crate) p1: WasiP1Ctx,
    limiter: Limiter,
    /// Where a refused `sock_*` call is audited.
    pub(crate) sandbox: Option<Arc<crate::sandbox::Sandbox>>,
    /// fd 0, read without waiting once the guest knows it is non-blocking.
    pub(crate) stdin: GuestStdin,
    /// The guest was told fd 0 is non-blocking (see [`super::p1_stdin`]).
    pub(crate) stdin_nonblocking: bool,
}

/// The WASI interfaces a component may import: io, clocks, random, cli,
/// filesystem (with no preopens, so no file is reachable), and
/// `wasi:sockets` and `wasi:http` (linked and refused: see [`super::net`]).
pub(crate) fn component_linker(
    engine: &Engine,
) -> wasmtime::Result<ComponentLinker<ComponentState>> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
    use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random};
    use wasmtime_wasi::random::WasiRandom;

    let mut linker = ComponentLinker::new(engine);
    let l = &mut linker;
    wasmtime_wasi_io_add(l)?;
    clocks::wall_clock::add_to_linker::<_, WasiClocks>(l, ComponentState::clocks)?;
    clocks::monotonic_clock::add_to_linker::<_, WasiClocks>(l, ComponentState::clocks)?;
    random::random::add_to_linker::<_, WasiRandom>(l, |s| s.ctx.random())?;
    random::insecure::add_to_linker::<_, WasiRandom>(l, |s| s.ctx.random())?;
    random::insecure_seed::add_to_linker::<_, WasiRandom>(l, |s| s.ctx.random())?;
    cli::exit::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::environment::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::stdin::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::stdout::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::stderr::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::terminal_input::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::terminal_output::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::terminal_stdin::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::terminal_stdout::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    cli::terminal_stderr::add_to_linker::<_, WasiCli>(l, ComponentState::cli)?;
    filesystem::types::add_to_linker::<_, WasiFilesystem>(l, ComponentState::filesystem)?;
    filesystem::preopens::add_to_linker::<_, WasiFilesystem>(l, ComponentState::filesystem)?;
    super::net::add_to_component_linker(l)?;
    super::net::add_http_to_component_linker(l)?;
    super::host_api::add_to_linker(l)?;
    Ok(linker)
}

fn wasmtime_wasi_io_add(linker: &mut ComponentLinker<ComponentState>) -> wasmtime::Result<()> {
    wasmtime_wasi_io::add_to_linker_async(linker)
}

impl wasmtime_wasi_io::IoView for ComponentState {
    fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

/// WASI preview 1 for core modules, its socket calls refused (see
/// [`super::net`]) and fd 0 non-blocking (see [`super::p1_stdin`]).
pub(crate) fn module_linker(engine: &Engine) -> wasmtime::Result<ModuleLinker<ModuleState>> {
    let mut linker = ModuleLinker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |s: &mut ModuleState| &mut s.p1)?;
    super::net::add_to_module_linker(&mut linker)?;
    super::p1_stdin::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// What a guest run is given.
pub(crate) struct GuestIo {
    pub(crate) name: String,
    pub(crate) stdin: GuestStdin,
    pub(crate) stdout: GuestStdout,
    pub(crate) log: GuestLog,
    pub(crate) limits: GuestLimits,
    pub(crate) sandbox: Option<Arc<crate::sandbox::Sandbox>>,
}

impl GuestIo {
    /// The deny-by-default WASI context: stdio, argv = name, and only the
    /// environment variables the sandbox grants.
    fn wasi(&self) -> WasiCtxBuilder {
        let mut builder = WasiCtxBuilder::new();
        if let Some(sandbox) = &self.sandbox {
            builder.envs(&sandbox.env());
        }
        builder
            .stdin(self.stdin.clone())
            .stdout(self.stdout.clone())
            .stderr(self.log.clone())
            .arg(&self.name)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        builder
    }

    fn limiter(&self) -> Limiter {
        Limiter::new(self.limits.memory_bytes)
    }
}

/// Runs a guest to its end, then reports why it ended and closes its pipes.
/// If the task is aborted (killed), the guard reports that instead.
pub(crate) async fn run(
    engine: Engine,
    prepared: Prepared,
    io: GuestIo,
    exit: watch::Sender<Option<Exit>>,
    control: Arc<GuestControl>,
) {
    let mut guard = ExitGuard {
        exit,
        stdout: io.stdout.clone(),
        stdin: io.stdin.clone(),
        log: io.log.clone(),
        control,
        outcome: None,
    };
    let limit_mb = (io.limits.memory_bytes / (1024 * 1024)) as u64;
    let outcome = match prepared {
        Prepared::Component(pre) => {
            let state = ComponentState {
                ctx: io.wasi().build(),
                table: ResourceTable::new(),
                limiter: io.limiter(),
                sandbox: io.sandbox.clone(),
                http: wasmtime_wasi_http::WasiHttpCtx::new(),
                http_hooks: super::net::RefusedHttp::new(io.sandbox.clone()),
            };
            let mut store = new_store(&engine, state, |s| &mut s.limiter, watch(&io, &guard));
            let result = async {
                let command = wasmtime_wasi::p2::bindings::CommandPre::new(pre)?
                    .instantiate_async(&mut store)
                    .await?;
                command.wasi_cli_run().call_run(&mut store).await
            }
            .await;
            let out_of_memory = store.data().limiter.hit();
            match result {
                Ok(Ok(())) => Exit::Code(0),
                Ok(Err(())) => Exit::Code(1),
                Err(err) => classify(&err, out_of_memory, limit_mb, &io.log),
            }
        }
        Prepared::Module(pre) => {
            let state = ModuleState {
                p1: io.wasi().build_p1(),
                limiter: io.limiter(),
                sandbox: io.sandbox.clone(),
                stdin: io.stdin.clone(),
                stdin_nonblocking: false,
            };
            let mut store = new_store(&engine, state, |s| &mut s.limiter, watch(&io, &guard));
            let result = async {
                let instance = pre.instantiate_async(&mut store).await?;
                let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
                start.call_async(&mut store, ()).await
            }
            .await;
            let out_of_memory = store.data().limiter.hit();
            match result {
                Ok(()) => Exit::Code(0),
                Err(err) => classify(&err, out_of_memory, limit_mb, &io.log),
            }
        }
    };
    guard.outcome = Some(outcome);
}

/// What a guest's store checks at each epoch tick: its compute budget, and
/// whom to tell when it is spent.
struct Watch {
    budget: ComputeBudget,
    control: Arc<GuestControl>,
}

fn watch(io: &GuestIo, guard: &ExitGuard) -> Watch {
    Watch {
        budget: ComputeBudget::new(io.limits.compute, guard.control.clock(), io.stdin.clone()),
        control: guard.control.clone(),
    }
}

fn new_store<T: Send + 'static>(
    engine: &Engine,
    state: T,
    limiter: impl (FnMut(&mut T) -> &mut Limiter) + Send + Sync + 'static,
    mut watch: Watch,
) -> Store<T> {
    let mut store = Store::new(engine, state);
    let mut limiter = limiter;
    store.limiter(move |s| limiter(s) as &mut dyn ResourceLimiter);
    // Yield to the executor at every tick: a spinning guest shares its
    // worker thread, and an abort takes effect at the next tick. A guest
    // past its compute budget is killed there (the abort lands as it yields).
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if let Some(exit) = watch.budget.exceeded() {
            watch.control.kill_with(exit);
        }
        Ok(UpdateDeadline::Yield(1))
    });
    store
}

/// Turns wasmtime's error into why the guest ended. A trap's own message
/// ("wasm `unreachable` instruction executed") says little about a Rust
/// panic, so the guest's last stderr line is added when there is one.
fn classify(err: &wasmtime::Error, out_of_memory: bool, limit_mb: u64, log: &GuestLog) -> Exit {
    if let Some(exit) = err.downcast_ref::<I32Exit>() {
        return Exit::Code(exit.0);
    }
    if out_of_memory {
        return Exit::OutOfMemory { limit_mb };
    }
    log.note(&format!("zotbox: guest failed: {}", failure_report(err)));
    let what = match err.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        // The first line names the failure; the rest is a backtrace.
        None => format!("{err:#}")
            .lines()
            .next()
            .unwrap_or("unknown failure")
            .to_owned(),
    };
    match log.last_words() {
        Some(words) => Exit::Trap(format!("{what} ({words})")),
        None => Exit::Trap(what),
    }
}

/// A guest's failure as its log shows it: the causes, outermost first, then
/// the wasm backtrace if one was taken, with Rust names demangled (wasmtime's
/// own demangling is not built in: it brings a C++ demangler along).
fn failure_report(err: &wasmtime::Error) -> String {
    let Some(trace) = err.downcast_ref::<WasmBacktrace>() else {
        return format!("{err:#}");
    };
    // The backtrace is one of the error's contexts; it is the cause whose
    // text is its own.
    let trace_text = trace.to_string();
    let causes: Vec<String> = err
        .chain()
        .map(ToString::to_string)
        .filter(|cause| *cause != trace_text)
        .collect();
    let mut report = causes.join(": ");
    report.push_str("\nwasm backtrace:");
    for (i, frame) in trace.frames().iter().enumerate() {
        let module = frame.module().name().unwrap_or("<unknown>");
        let _ = match frame.func_name() {
            Some(name) => write!(
                report,
                "\n  {i:>3}: {module}!{:#}",
                rustc_demangle::demangle(name)
            ),
            None => write!(
                report,
                "\n  {i:>3}: {module}!<wasm function {}>",
                frame.func_index()
            ),
        };
    }
    report
}

/// Reports the guest's end exactly once, whether it returned or was aborted.
struct ExitGuard {
    exit: watch::Sender<Option<Exit>>,
    stdout: GuestStdout,
    stdin: GuestStdin,
    log: GuestLog,
    control: Arc<GuestControl>,
    outcome: Option<Exit>,
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let exit = self
            .outcome
            .take()
            .unwrap_or_else(|| self.control.kill_reason());
        if !exit.is_clean() {
            self.log.note(&format!("zotbox: guest {exit}"));
        }
        // The exit first, so that the session finds it when it sees EOF.
        let _ = self.exit.send(Some(exit));
        self.stdout.close();
        self.stdin.close();
    }
}

/// Stops a guest: aborting its task drops its store at the next epoch tick
/// or the next time it waits on I/O.
pub(crate) struct GuestControl {
    task: Mutex<Option<AbortHandle>>,
    reason: Mutex<Option<Exit>>,
    stdin: GuestStdin,
    /// How long its task has been polled (see [`super::compute`]).
    clock: Arc<ComputeClock>,
}

impl GuestControl {
    pub(crate) fn new(stdin: GuestStdin) -> Self {
        Self {
            task: Mutex::new(None),
            reason: Mutex::new(None),
            stdin,
            clock: Arc::default(),
        }
    }

    /// The clock its task's polls are charged to.
    pub(crate) fn clock(&self) -> Arc<ComputeClock> {
        self.clock.clone()
    }

    pub(crate) fn attach(&self, handle: AbortHandle) {
        *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
    }

    /// Stops the guest, which ends as `exit` (the first reason given wins).
    fn kill_with(&self, exit: Exit) {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(exit);
        if let Some(task) = &*self.task.lock().unwrap_or_else(PoisonError::into_inner) {
            task.abort();
        }
    }

    fn kill_reason(&self) -> Exit {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| Exit::Killed("stopped by the host".to_owned()))
    }
}

impl Control for GuestControl {
    fn terminate(&self) {
        self.kill_with(Exit::Killed("did not exit after `shutdown`".to_owned()));
    }

    fn kill(&self) {
        self.kill_with(Exit::Killed("stopped by the host".to_owned()));
    }

    fn deadline_missed(&self) {
        // Parked on stdin means idle: it merely ignored a request. Anything
        // else past a deadline is a guest hogging its only thread.
        if !self.stdin.guest_is_idle() {
            self.kill_with(Exit::Killed(
                "still running after a request's deadline".to_owned(),
            ));
        }
    }
}

/// A guest's stderr: appended to its log file (capped), with a tail kept in memory.
#[derive(Clone)]
pub(crate) struct GuestLog(Arc<Mutex<LogState>>);

struct LogState {
    file: Option<StderrLog>,
    /// What the guest wrote last, as written.
    tail: VecDeque<u8>,
}

impl GuestLog {
    pub(crate) fn new(file: Option<std::fs::File>) -> Self {
        Self(Arc::new(Mutex::new(LogState {
            file: file.map(StderrLog::new),
            tail: VecDeque::with_capacity(LOG_TAIL),
        })))
    }

    fn append(&self, bytes: &[u8]) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        state.tail.extend(bytes.iter().rev().take(LOG_TAIL).rev());
        let excess = state.tail.len().saturating_sub(LOG_TAIL);
        state.tail.drain(..excess);
        if let Some(file) = state.file.as_mut() {
            // A log that refuses writes costs the guest nothing.
            let _ = file.append(bytes);
        }
    }

    /// What the guest last said on stderr that explains a failure: a Rust
    /// panic's message (the line after `panicked at …`), else the last line
    /// that is not a hint about backtraces.
    fn last_words(&self) -> Option<String> {
        let state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let tail: Vec<u8> = state.tail.iter().copied().collect();
        let text = String::from_utf8_lossy(&tail);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if let Some(at) = lines.iter().rposition(|l| l.contains("panicked at")) {
            let location = lines[at]
                .split("panicked at")
                .nth(1)
                .unwrap_or("")
                .trim()
                .trim_end_matches(':');
            return Some(match lines.get(at + 1) {
                Some(message) if !message.starts_with("note:") => {
                    format!("panicked at {location}: {message}")
                }
                _ => format!("panicked at {location}"),
            });
        }
        lines
            .iter()
            .rev()
            .find(|l| !l.starts_with("note:"))
            .map(|l| (*l).to_owned())
    }

    /// A line from zotbox itself, always written.
    fn note(&self, line: &str) {
        let mut state = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = state.file.as_mut() {
            file.note(line);
        }
    }
}

impl IsTerminal for GuestLog {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestLog {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LogWriter(self.clone()))
    }
}

#[async_trait::async_trait]
impl OutputStream for GuestLog {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.append(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl Pollable for GuestLog {
    async fn ready(&mut self) {}
}

struct LogWriter(GuestLog);

impl tokio::io::AsyncWrite for LogWriter {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0.append(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, Module,
        NameMap, NameSection, TypeSection,
    };

    use super::failure_report;

    /// A core module exporting `boom`, which traps. With `name`, the module
    /// is `guest` and its function carries `name`, as a Rust build leaves it
    /// in the name section; without, there is no name section (stripped).
    fn trapping_module(name: Option<&str>) -> Vec<u8> {
        let mut types = TypeSection::new();
        types.ty().function([], []);
        let mut functions = FunctionSection::new();
        functions.function(0);
        let mut exports = ExportSection::new();
        exports.export("boom", ExportKind::Func, 0);
        let mut body = Function::new([]);
        body.instruction(&Instruction::Unreachable);
        body.instruction(&Instruction::End);
        let mut code = CodeSection::new();
        code.function(&body);
        let mut module = Module::new();
        module
            .section(&types)
            .section(&functions)
            .section(&exports)
            .section(&code);
        if let Some(name) = name {
            let mut names = NameMap::new();
            names.append(0, name);
            let mut section = NameSection::new();
            section.module("guest");
            section.functions(&names);
            module.section(&section);
        }
        module.finish()
    }

    fn trap_of(module: &[u8]) -> wasmtime::Error {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, module).expect("a valid module");
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiates");
        let boom = instance
            .get_typed_func::<(), ()>(&mut store, "boom")
            .expect("exports `boom`");
        boom.call(&mut store, ()).expect_err("`boom` traps")
    }

    const TRAP: &str = "wasm trap: wasm `unreachable` instruction executed\nwasm backtrace:\n";

    #[test]
    fn a_trap_report_names_the_cause_then_the_frames_with_rust_names_demangled() {
        let err = trap_of(&trapping_module(Some(
            "_ZN7hostile4boom17h0123456789abcdefE",
        )));
        assert_eq!(
            failure_report(&err),
            format!("{TRAP}    0: guest!hostile::boom")
        );
    }

    #[test]
    fn names_that_are_not_rust_stay_as_written_and_a_nameless_frame_shows_its_index() {
        let err = trap_of(&trapping_module(Some("boom_in_c")));
        assert_eq!(
            failure_report(&err),
            format!("{TRAP}    0: guest!boom_in_c")
        );
        let err = trap_of(&trapping_module(None));
        assert_eq!(
            failure_report(&err),
            format!("{TRAP}    0: <unknown>!<wasm function 0>")
        );
    }
}
