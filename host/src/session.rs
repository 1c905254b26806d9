//! One extension's protocol state, written once over any [`Transport`].
//!
//! A session performs the handshake (`hello` → `hello_ack` → registrations →
//! `ready`), then correlates requests with answers, delivers events, applies
//! deadlines, and fails every pending call the moment the extension goes away.

mod error;
mod handshake;
mod intercept;
pub(crate) mod reader;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::{Instant, timeout};
use zotbox_protocol::{
    CommandInvoked, CommandResponse, DEFAULT_MAX_LINE, DecodeError, Event, ExtensionFrame, Hello,
    HelloAck, HostFrame, InterceptResponse, PanelClose, PanelKey, PanelResize, RegisterCommand,
    Shutdown, ToolCall, ToolResult, Undecoded, encode_to_vec,
};

use crate::event::HostEvent;
use crate::runtime::{Control, Exit, Transport};
pub use error::{CallError, Closed, SessionError};
pub(crate) use handshake::Registrar;
pub use handshake::RegistrationLimits;
use handshake::{HandshakeFailure, handshake, publish_unsolicited};
pub use intercept::{Interceptable, Verdict};
/// What a session reads: an extension's output.
type ExtensionReader =
    reader::FrameReader<ExtensionFrame, Box<dyn tokio::io::AsyncRead + Send + Unpin>>;

/// How long to keep reading after the process exited, for frames still in the pipe.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// How long to wait for an exit status once the output stream has ended.
const EXIT_AFTER_EOF: Duration = Duration::from_millis(200);
/// Frames queued for an extension that is not reading its input.
const OUTGOING_QUEUE: usize = 1024;

pub use crate::policy::FailMode;

/// Deadlines and limits of a session. The defaults are zot's.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The first frame must arrive within this. Default 10 s.
    pub hello_timeout: Duration,
    /// Registration ends after this long without frames. Default 250 ms.
    pub ready_idle: Duration,
    /// Deadline of a tool call or a command. Default 60 s.
    pub call_timeout: Duration,
    /// Deadline of an intercept answer. Default 5 s.
    pub intercept_timeout: Duration,
    /// What a missed intercept means. Default [`FailMode::Open`].
    pub intercept_failure: FailMode,
    /// After `shutdown`, how long to wait for exit before terminating. Default 2 s.
    pub shutdown_grace: Duration,
    /// After terminating, how long to wait before killing. Default 1 s.
    pub kill_grace: Duration,
    /// The frame cap: the longest line the extension may write. A line over
    /// it ends the extension at once. Default 4 MiB.
    pub max_line: usize,
    /// What one extension may register. Default `RegistrationLimits::default`.
    pub registrations: RegistrationLimits,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            hello_timeout: Duration::from_secs(10),
            ready_idle: Duration::from_millis(250),
            call_timeout: Duration::from_secs(60),
            intercept_timeout: Duration::from_secs(5),
            intercept_failure: FailMode::Open,
            shutdown_grace: Duration::from_secs(2),
            kill_grace: Duration::from_secs(1),
            max_line: DEFAULT_MAX_LINE,
            registrations: RegistrationLimits::default(),
        }
    }
}

/// A registered tool, its schema checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisteredTool {
    /// The tool name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Its JSON Schema (an object).
    pub schema: Value,
}

/// What an extension registered during its handshake.
#[derive(Debug, Clone, Default)]
pub struct Registration {
    /// Its `hello`.
    pub hello: Hello,
    /// Slash commands, in registration order.
    pub commands: Vec<RegisterCommand>,
    /// Tools, in registration order.
    pub tools: Vec<RegisteredTool>,
    /// Events delivered one way.
    pub events: BTreeSet<String>,
    /// Events it intercepts.
    pub intercepts: BTreeSet<String>,
    /// Registrations refused, with why (a bad schema, a duplicate).
    pub refused: Vec<String>,
    /// Whether it sent `ready` (rather than falling silent).
    pub sent_ready: bool,
}

/// A live session with one extension. Cheap to clone.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("extension", &self.inner.label)
            .finish_non_exhaustive()
    }
}

struct Inner {
    name: Arc<str>,
    label: String,
    config: SessionConfig,
    registration: Registration,
    outgoing: mpsc::Sender<Outgoing>,
    pending: Mutex<Pending>,
    closed: watch::Sender<Option<Closed>>,
    control: Arc<dyn Control>,
    exit: watch::Receiver<Option<Exit>>,
}

enum Outgoing {
    Line(Vec<u8>),
    Close,
}

#[derive(Default)]
struct Pending {
    next_id: u64,
    calls: HashMap<u64, PendingCall>,
    closed: Option<Closed>,
    shutting_down: bool,
}

struct PendingCall {
    expected: &'static str,
    reply: oneshot::Sender<Result<ExtensionFrame, CallError>>,
}

impl Session {
    /// Performs the handshake over `transport` and returns the running session.
    ///
    /// `name` is the manifest's name, used in errors until `hello` arrives.
    /// Unsolicited frames (notes, panels) are published on `events`.
    ///
    /// # Errors
    ///
    /// [`SessionError`] when the extension does not complete the handshake;
    /// it is then killed.
    pub async fn start(
        name: &str,
        hello_ack: HelloAck,
        config: SessionConfig,
        transport: Transport,
        events: broadcast::Sender<HostEvent>,
    ) -> Result<Self, SessionError> {
        let Transport {
            output,
            input,
            control,
            exit,
            direct_output: _,
        } = transport;
        let name: Arc<str> = Arc::from(name);
        // An extension may not write a line over the frame cap: its stream
        // ends there, and the session with it (see `read_loop`).
        let mut reader = ExtensionReader::new(output, config.max_line).ending_at_overlong_line();
        let (outgoing, outgoing_rx) = mpsc::channel(OUTGOING_QUEUE);
        tokio::spawn(write_loop(input, outgoing_rx));

        let mut unreadable = UnreadableLines::default();
        let handshake = handshake(
            &name,
            hello_ack,
            &config,
            &mut reader,
            &mut unreadable,
            &outgoing,
            &events,
        );
        let registration = match handshake.await {
            Ok(registration) => registration,
            Err(err) => {
                control.kill();
                return Err(match err {
                    HandshakeFailure::Error(err) => err,
                    HandshakeFailure::Ended => SessionError::EndedEarly {
                        name: name.to_string(),
                        reason: match reader.cut_at() {
                            Some(limit) => Closed::Exited(Exit::Killed(over_cap(limit))),
                            None => ended_reason(exit.clone()).await,
                        },
                    },
                });
            }
        };
        if registration.hello.name != *name {
            tracing::warn!(
                "extension `{name}` introduced itself as `{}`; using the manifest's name",
                registration.hello.name
            );
        }
        let label = if registration.hello.version.is_empty() {
            format!("extension `{name}`")
        } else {
            format!("extension `{name}` {}", registration.hello.version)
        };
        let inner = Arc::new(Inner {
            name,
            label,
            config,
            registration,
            outgoing,
            pending: Mutex::new(Pending::default()),
            closed: watch::Sender::new(None),
            control,
            exit,
        });
        tokio::spawn(read_loop(inner.clone(), reader, unreadable, events));
        Ok(Self { inner })
    }

    /// The extension's (manifest) name.
    pub fn name(&self) -> &Arc<str> {
        &self.inner.name
    }

    /// `extension `name` version`, the prefix of every error it causes.
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// What it registered.
    pub fn registration(&self) -> &Registration {
        &self.inner.registration
    }

    /// Why the session ended, once it has.
    #[cfg(any(test, feature = "internals"))]
    pub fn closed_reason(&self) -> Option<Closed> {
        self.inner.closed.borrow().clone()
    }

    /// Resolves when the session has ended, with why.
    pub async fn closed(&self) -> Closed {
        let mut closed = self.inner.closed.subscribe();
        match closed.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or(Closed::StreamEnded),
            // Unreachable while `self` holds the sender; be conservative.
            Err(_) => Closed::StreamEnded,
        }
    }

    /// Invokes slash command `name` with `args`.
    ///
    /// # Errors
    ///
    /// [`CallError`] when the extension is gone, does not answer in time, or
    /// answers with the wrong frame.
    pub async fn invoke_command(
        &self,
        name: &str,
        args: &str,
    ) -> Result<CommandResponse, CallError> {
        let what = format!("command `{name}`");
        let frame = self
            .request(
                &what,
                "command_response",
                self.inner.config.call_timeout,
                |id| {
                    HostFrame::CommandInvoked(CommandInvoked {
                        id,
                        name: name.to_owned(),
                        args: args.to_owned(),
                    })
                },
            )
            .await?;
        match frame {
            ExtensionFrame::CommandResponse(response) => Ok(response),
            other => Err(self.wrong_answer(what, "command_response", &other)),
        }
    }

    /// Calls tool `name` with `args`, waiting up to `deadline` (the session's
    /// call timeout when `None`).
    ///
    /// # Errors
    ///
    /// As [`Session::invoke_command`].
    pub async fn call_tool(
        &self,
        name: &str,
        args: Value,
        deadline: Option<Duration>,
    ) -> Result<ToolResult, CallError> {
        let what = format!("tool `{name}`");
        let deadline = deadline.unwrap_or(self.inner.config.call_timeout);
        let frame = self
            .request(&what, "tool_result", deadline, |id| {
                HostFrame::ToolCall(ToolCall {
                    id,
                    name: name.to_owned(),
                    args,
                })
            })
            .await?;
        match frame {
            ExtensionFrame::ToolResult(result) => Ok(result),
            other => Err(self.wrong_answer(what, "tool_result", &other)),
        }
    }

    /// Asks the extension for a verdict. A missed deadline, a departed
    /// extension or a malformed answer yields the configured [`FailMode`].
    /// Beside it, why a rewrite the extension's grant does not allow was
    /// dropped (its verdict holds), for the audit.
    pub async fn intercept(&self, subject: &Interceptable) -> (Verdict, Option<String>) {
        let event = subject.event();
        let what = format!("intercept of `{event}`");
        let answer = self
            .request(
                &what,
                "event_intercept_response",
                self.inner.config.intercept_timeout,
                |id| HostFrame::EventIntercept(subject.frame(id)),
            )
            .await;
        let response = match answer {
            Ok(ExtensionFrame::EventInterceptResponse(response)) => response,
            Ok(other) => {
                let err = self.wrong_answer(what, "event_intercept_response", &other);
                return (self.missed(&err), None);
            }
            Err(err) => return (self.missed(&err), None),
        };
        if response.block {
            let reason = response
                .reason
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| format!("blocked by {}", self.inner.label));
            return (Verdict::Block { reason }, None);
        }
        let rewrites = response.modified_args.is_some() || response.replace_text.is_some();
        if rewrites && !self.inner.config.registrations.events.may_rewrite(event) {
            // Its verdict holds; the change it may not make is dropped.
            let why = format!(
                "its answer to an intercept of `{event}` rewrites it, which its grant does not \
                 allow (`capabilities.rewrite`); the rewrite is ignored"
            );
            tracing::warn!("{}: {why}", self.inner.label);
            return (Verdict::Allow, Some(why));
        }
        (self.verdict(subject, response), None)
    }

    /// What an answer that does not block decides.
    fn verdict(&self, subject: &Interceptable, response: InterceptResponse) -> Verdict {
        match subject {
            Interceptable::ToolCall { .. } => match response.modified_args {
                Some(args @ Value::Object(_)) => Verdict::Rewrite { args },
                Some(other) => {
                    tracing::warn!(
                        "{}: `modified_args` must be a JSON object, got `{other}`; ignored",
                        self.inner.label
                    );
                    Verdict::Allow
                }
                None => Verdict::Allow,
            },
            Interceptable::AssistantMessage { .. } => match response.replace_text {
                Some(text) => Verdict::Replace { text },
                None => Verdict::Allow,
            },
            Interceptable::TurnStart { .. } => Verdict::Allow,
        }
    }

    fn missed(&self, err: &CallError) -> Verdict {
        match self.inner.config.intercept_failure {
            FailMode::Open => {
                tracing::warn!("{err}; allowing (intercepts fail open)");
                Verdict::Allow
            }
            FailMode::Closed => Verdict::Block {
                reason: format!("{err}; blocking (intercepts fail closed)"),
            },
        }
    }

    /// Delivers a one-way event. Never waits: if the extension is not reading
    /// and its queue is full, the event is dropped and logged.
    pub fn emit_event(&self, event: &Event) {
        self.send_now(&HostFrame::Event(event.clone()));
    }

    /// Whether the extension subscribed to `event` (one way).
    pub fn subscribes_to(&self, event: &str) -> bool {
        self.inner.registration.events.contains(event)
    }

    /// Whether the extension intercepts `event`.
    pub fn intercepts(&self, event: &str) -> bool {
        self.inner.registration.intercepts.contains(event)
    }

    /// Forwards a key press to one of the extension's panels.
    pub fn panel_key(&self, panel_id: &str, key: &str, text: Option<&str>) {
        self.send_now(&HostFrame::PanelKey(PanelKey {
            panel_id: panel_id.to_owned(),
            key: key.to_owned(),
            text: text.map(str::to_owned),
        }));
    }

    /// Tells the extension a panel's new size.
    pub fn panel_resize(&self, panel_id: &str, width: u32, height: u32) {
        self.send_now(&HostFrame::PanelResize(PanelResize {
            panel_id: panel_id.to_owned(),
            width,
            height,
        }));
    }

    /// Tells the extension the user closed a panel.
    pub fn panel_close(&self, panel_id: &str) {
        self.send_now(&HostFrame::PanelClose(PanelClose {
            panel_id: panel_id.to_owned(),
        }));
    }

    /// Ends the session: `shutdown`, then terminate after the grace period,
    /// then kill. Pending calls fail with [`Closed::ShutDown`].
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        lock(&inner.pending).shutting_down = true;
        if inner.exit.borrow().is_none() {
            if let Ok(line) = encode_to_vec(&HostFrame::Shutdown(Shutdown {})) {
                let queued = inner
                    .outgoing
                    .send_timeout(Outgoing::Line(line), inner.config.shutdown_grace);
                let _ = queued.await;
            }
            let _ = inner.outgoing.try_send(Outgoing::Close);
            if !inner.exited_within(inner.config.shutdown_grace).await {
                tracing::debug!("{}: no exit after `shutdown`; terminating", inner.label);
                inner.control.terminate();
                if !inner.exited_within(inner.config.kill_grace).await {
                    tracing::debug!("{}: no exit after terminate; killing", inner.label);
                    inner.control.kill();
                    if !inner.exited_within(inner.config.kill_grace).await {
                        tracing::warn!("{}: still running after being killed", inner.label);
                    }
                }
            }
        }
        inner.close(Closed::ShutDown);
    }

    /// Stops the extension at once, without the shutdown handshake.
    #[cfg(any(test, feature = "internals"))]
    pub fn kill(&self) {
        self.inner.control.kill();
    }

    fn send_now(&self, frame: &HostFrame) {
        let Ok(line) = encode_to_vec(frame) else {
            return;
        };
        match self.inner.outgoing.try_send(Outgoing::Line(line)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => tracing::warn!(
                "{}: not reading its input; dropped a `{}` frame",
                self.inner.label,
                frame.frame_type()
            ),
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    async fn request(
        &self,
        what: &str,
        expected: &'static str,
        deadline: Duration,
        build: impl FnOnce(String) -> HostFrame,
    ) -> Result<ExtensionFrame, CallError> {
        let inner = &self.inner;
        let (reply, answer) = oneshot::channel();
        let id = {
            let mut pending = lock(&inner.pending);
            if let Some(reason) = &pending.closed {
                return Err(inner.closed_error(reason.clone()));
            }
            pending.next_id += 1;
            let id = pending.next_id;
            pending.calls.insert(id, PendingCall { expected, reply });
            id
        };
        // Whatever ends this call — an answer, the deadline, or the caller
        // giving up on it — its entry leaves the table.
        let _forget = Forget { inner, id };
        let started = Instant::now();
        let outcome = async {
            let line =
                encode_to_vec(&build(id.to_string())).map_err(|err| CallError::WrongAnswer {
                    extension: inner.label.clone(),
                    what: format!("{what} (unencodable request: {err})"),
                    expected,
                    got: "nothing",
                })?;
            if inner.outgoing.send(Outgoing::Line(line)).await.is_err() {
                return Err(inner.closed_error(inner.current_reason()));
            }
            match answer.await {
                Ok(result) => result,
                Err(_) => Err(inner.closed_error(inner.current_reason())),
            }
        };
        match timeout(deadline, outcome).await {
            Ok(result) => result,
            Err(_) => {
                inner.control.deadline_missed();
                tracing::warn!(
                    "{}: {what} timed out after {:?}",
                    inner.label,
                    started.elapsed()
                );
                Err(CallError::Timeout {
                    extension: inner.label.clone(),
                    what: what.to_owned(),
                    after: deadline,
                })
            }
        }
    }

    fn wrong_answer(
        &self,
        what: String,
        expected: &'static str,
        got: &ExtensionFrame,
    ) -> CallError {
        CallError::WrongAnswer {
            extension: self.inner.label.clone(),
            what,
            expected,
            got: got.frame_type(),
        }
    }
}

impl Inner {
    async fn exited_within(&self, grace: Duration) -> bool {
        let mut exit = self.exit.clone();
        timeout(grace, exit.wait_for(Option::is_some)).await.is_ok()
    }

    fn closed_error(&self, reason: Closed) -> CallError {
        CallError::Closed {
            extension: self.label.clone(),
            reason,
        }
    }

    fn current_reason(&self) -> Closed {
        {
            let pending = lock(&self.pending);
            if let Some(reason) = &pending.closed {
                return reason.clone();
            }
            // A shutdown under way is why, whatever ends first: a call whose
            // request meets the writer already closed by `shutdown`, before
            // `close` has run, fails as `close` would fail it.
            if pending.shutting_down {
                return Closed::ShutDown;
            }
        }
        match &*self.exit.borrow() {
            Some(exit) => Closed::Exited(exit.clone()),
            None => Closed::StreamEnded,
        }
    }

    /// Ends the session once: every pending call fails at once with `reason`.
    fn close(&self, reason: Closed) -> Option<Closed> {
        let calls = {
            let mut pending = lock(&self.pending);
            if pending.closed.is_some() {
                return None;
            }
            let reason = if pending.shutting_down {
                Closed::ShutDown
            } else {
                reason
            };
            pending.closed = Some(reason);
            std::mem::take(&mut pending.calls)
        };
        let reason = self.current_reason();
        for (_, call) in calls {
            let _ = call.reply.send(Err(self.closed_error(reason.clone())));
        }
        self.closed.send_replace(Some(reason.clone()));
        Some(reason)
    }

    fn answer(&self, id: &str, frame: ExtensionFrame) {
        let call = id
            .parse::<u64>()
            .ok()
            .and_then(|id| lock(&self.pending).calls.remove(&id));
        let Some(call) = call else {
            tracing::warn!(
                "{}: `{}` for unknown or expired id `{id}` ignored",
                self.label,
                frame.frame_type()
            );
            return;
        };
        let got = frame.frame_type();
        let result = if got == call.expected {
            Ok(frame)
        } else {
            Err(CallError::WrongAnswer {
                extension: self.label.clone(),
                what: format!("request `{id}`"),
                expected: call.expected,
                got,
            })
        };
        let _ = call.reply.send(result);
    }
}

/// Removes a request's pending entry when the request ends, however it ends.
struct Forget<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        lock(&self.inner.pending).calls.remove(&self.id);
    }
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    // A panic while holding the lock leaves the map consistent; keep going.
    pending.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn read_loop(
    inner: Arc<Inner>,
    mut reader: ExtensionReader,
    mut unreadable: UnreadableLines,
    events: broadcast::Sender<HostEvent>,
) {
    let mut exit = inner.exit.clone();
    let mut exit_watch_live = true;
    let mut drain_deadline: Option<Instant> = None;
    loop {
        let drain = async {
            match drain_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            item = reader.next() => match item {
                None => break,
                Some(Err(Undecoded { error: DecodeError::TooLong { limit, .. }, .. })) => {
                    // Stop it at once rather than read an endless line to its
                    // end: its calls fail now, naming the cap.
                    let why = over_cap(limit);
                    tracing::error!("{}: {why}; stopping it", inner.label);
                    inner.control.kill();
                    inner.close(Closed::Exited(Exit::Killed(why)));
                    break;
                }
                Some(Err(err)) => unreadable.report(&inner.name, &err),
                Some(Ok(frame)) => dispatch(&inner, frame, &events),
            },
            changed = exit.changed(), if exit_watch_live => {
                exit_watch_live = false;
                if changed.is_ok() {
                    // Frames written just before exit may still be in the pipe.
                    drain_deadline = Some(Instant::now() + DRAIN_AFTER_EXIT);
                }
            }
            () = drain => break,
        }
    }
    unreadable.sum_up(&inner.name);
    let reason = ended_reason(inner.exit.clone()).await;
    if let Some(reason) = inner.close(reason) {
        tracing::debug!("{}: session ended: {reason}", inner.label);
    }
    // An extension that closed its output but kept running can no longer be
    // talked to; leaving it would leak a process (and a restart would start
    // a second copy beside it).
    if inner.exit.borrow().is_none() {
        inner.control.kill();
    }
}

/// How many lines of an extension's output that are not frames are logged
/// one by one; past them they are counted, and the count logged when the
/// session ends. What an extension writes must not grow the log without
/// bound (`THREATS.md` rule 6: an endless stream of garbage wrote 234 MB
/// of warnings to the terminal in 25 s).
const LOGGED_UNREADABLE_LINES: u64 = 16;

/// The lines of one extension's output that were not frames, as logged.
#[derive(Debug, Default)]
struct UnreadableLines {
    seen: u64,
}

impl UnreadableLines {
    /// Logs a line that did not decode, or counts it past
    /// [`LOGGED_UNREADABLE_LINES`].
    fn report(&mut self, name: &str, err: &Undecoded) {
        self.seen = self.seen.saturating_add(1);
        if self.seen <= LOGGED_UNREADABLE_LINES {
            tracing::warn!("extension `{name}`: {err}");
        }
        if self.seen == LOGGED_UNREADABLE_LINES {
            tracing::warn!(
                "extension `{name}`: {LOGGED_UNREADABLE_LINES} lines were not frames; more are \
                 counted, not logged"
            );
        }
    }

    /// Logs how many lines were counted and not logged, if any were.
    fn sum_up(&self, name: &str) {
        if self.seen > LOGGED_UNREADABLE_LINES {
            tracing::warn!(
                "extension `{name}`: {} lines in all were not frames, {} of them not logged",
                self.seen,
                self.seen - LOGGED_UNREADABLE_LINES
            );
        }
    }
}

/// Why an extension that wrote a line over the frame cap was stopped.
fn over_cap(limit: usize) -> String {
    format!("wrote a line over the {limit}-byte frame cap")
}

/// Why the stream ended: the exit status if it comes promptly.
async fn ended_reason(mut exit: watch::Receiver<Option<Exit>>) -> Closed {
    match timeout(EXIT_AFTER_EOF, exit.wait_for(Option::is_some)).await {
        Ok(Ok(exit)) => exit.clone().map_or(Closed::StreamEnded, Closed::Exited),
        _ => Closed::StreamEnded,
    }
}

fn dispatch(inner: &Inner, frame: ExtensionFrame, events: &broadcast::Sender<HostEvent>) {
    match frame {
        ExtensionFrame::CommandResponse(ref response) => {
            let id = response.id.clone();
            inner.answer(&id, frame);
        }
        ExtensionFrame::ToolResult(ref result) => {
            let id = result.id.clone();
            inner.answer(&id, frame);
        }
        ExtensionFrame::EventInterceptResponse(ref response) => {
            let id = response.id.clone();
            inner.answer(&id, frame);
        }
        ExtensionFrame::Hello(_)
        | ExtensionFrame::RegisterCommand(_)
        | ExtensionFrame::RegisterTool(_)
        | ExtensionFrame::Subscribe(_)
        | ExtensionFrame::Ready(_) => tracing::warn!(
            "{}: `{}` after registration ended is ignored",
            inner.label,
            frame.frame_type()
        ),
        other => publish_unsolicited(&inner.name, other, events),
    }
}

async fn write_loop(
    mut input: Box<dyn AsyncWrite + Send + Unpin>,
    mut queue: mpsc::Receiver<Outgoing>,
) {
    while let Some(item) = queue.recv().await {
        let mut close = false;
        let mut batch = match item {
            Outgoing::Line(line) => line,
            Outgoing::Close => break,
        };
        // Coalesce whatever else is queued into one write and one flush.
        while let Ok(item) = queue.try_recv() {
            match item {
                Outgoing::Line(line) => batch.extend_from_slice(&line),
                Outgoing::Close => {
                    close = true;
                    break;
                }
            }
        }
        if input.write_all(&batch).await.is_err() || input.flush().await.is_err() {
            // The extension closed its input; the reader will see it end.
            return;
        }
        if close {
            break;
        }
    }
    let _ = input.shutdown().await;
}
