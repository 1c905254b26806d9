//! `zotbox serve`: the data side of zotbox as one zot extension.
//!
//! zot runs it like any extension (`zotbox setup` registers it). It speaks
//! the protocol on stdio as the extension `zotbox`:
//!
//! - every data tool (shell / http / read) becomes a zot tool taking one
//!   optional `arg` string, run through the capability layer;
//! - every data skill becomes a slash command answering `prompt` with the
//!   skill's body (and the user's arguments appended);
//! - it intercepts `tool_call` and applies the refusal plugins' deny rules to
//!   zot's own tools too (`bash` → `command`; `read`/`write`/`edit` → `path`);
//! - at `session_start` it shows each refusal plugin's appendix as a note;
//! - on `shutdown` it answers and exits, so zot's `/reload-ext` restarts it
//!   with fresh files.
//!
//! It does not run the extensions in zot's folders: zot already does.
//!
//! # The guard never waits and never stays silent
//!
//! zot allows a tool call whose `event_intercept` is not answered within
//! 5 s, so a late or missing answer is a refusal lost. These rules keep every
//! check answered, at once:
//!
//! 1. **Checks are answered on the spot.** One loop reads zot's frames and
//!    answers each `event_intercept` itself, from the deny rules (synchronous
//!    and fast); it never waits on a tool or a command.
//! 2. **Tools run beside the loop, bounded.** Each `tool_call` runs as a task:
//!    at most [`MAX_RUNNING`] at once, at most [`MAX_ADMITTED`] admitted
//!    (running or waiting for a slot); past that a call is refused at once
//!    with an error result, so neither memory nor the loop grows with zot's
//!    call rate. A slash command is a skill lookup, answered in place. Answers
//!    go out through one writer, one whole line at a time.
//! 3. **A check that cannot be read is blocked.** A line that does not decode
//!    (nested past the parser's limit, not UTF-8, a lone surrogate, over the
//!    4 MiB frame cap) is answered by the `id` a lenient scan finds: a check
//!    with a block that says why, a tool call or a command with an error.
//! 4. **The workspace is the one `hello_ack` names**, however late it comes;
//!    there is no fallback to serve's own directory (which would drop the
//!    workspace's refusal plugins). Frames that arrive before it are held, at
//!    most [`MAX_HELD`], and answered, in order, once the host for that
//!    workspace is built; past the cap a check is blocked and a request
//!    refused at once.
//! 5. **The checks are subscribed before anything is read.** zot takes an
//!    extension as ready 250 ms after its last frame when no `ready` comes,
//!    and reading the workspace's data files and compiling its plugins
//!    takes what their author makes it take. So the `tool_call` intercept
//!    goes out the moment `hello_ack` names the workspace; frames are read
//!    and held while the host is built, and a check held
//!    [`HELD_CHECK_PATIENCE`] is blocked then, never left to zot's 5 s.
//! 6. **A host that cannot be built blocks everything.** When the policy
//!    or the data folders cannot be read, serve does not exit (zot would
//!    then ask no one, and allow): it blocks every check with why, says so
//!    in zot's notes, and exits with the error at `shutdown`
//!    (`refuse_all`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use zotbox_protocol::{
    CommandAction, CommandInvoked, CommandResponse, Content, DEFAULT_MAX_LINE, EventIntercept,
    ExtensionFrame, Hello, HelloAck, HostFrame, InterceptResponse, Notify, Ready, RegisterCommand,
    RegisterTool, ShutdownAck, Subscribe, ToolCall, ToolResult, Undecoded, encode_to_vec,
    event_name,
};

use crate::Verdict;
use crate::home::ZotHome;
use crate::host::Host;
use crate::session::reader::FrameReader;

/// The name `serve` introduces itself with.
pub const SERVE_NAME: &str = crate::discovery::SERVE_LAUNCHER;

/// zot's own tool names and the names refusal plugins often use for them,
/// so a rule written for either catches both.
const TOOL_ALIASES: &[(&str, &str)] = &[
    ("write", "write_file"),
    ("edit", "edit_file"),
    ("read", "read_file"),
];

/// Tool calls running at once.
pub const MAX_RUNNING: usize = 16;

/// Tool calls admitted at once, running or waiting for one of the
/// [`MAX_RUNNING`] slots; a call past this is refused at once.
pub const MAX_ADMITTED: usize = 64;

/// Frames held while waiting for `hello_ack`, and then for the host.
pub const MAX_HELD: usize = 256;

/// How long a check that comes while the host is built is held for it
/// before it is blocked: zot allows a check unanswered for 5 s, and once
/// the host is built its deny check may take up to its own 2 s deadline
/// more.
pub const HELD_CHECK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Encoded lines queued for the writer; past this the reading loop waits
/// for zot to read its stdout.
const OUTBOX: usize = 256;

/// How `serve` names itself in answers to frames it could not read.
const READER: &str = "zotbox";

/// Serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The host could not be built (a bad policy, say).
    #[error(transparent)]
    Build(#[from] crate::host::BuildError),
    /// Reading or writing stdio failed.
    #[error("serve: {0}")]
    Io(#[from] std::io::Error),
}

/// The one way to zot's stdout: whole lines, queued for the writer.
#[derive(Clone)]
struct Outbox(mpsc::Sender<Vec<u8>>);

impl Outbox {
    async fn send(&self, frame: &ExtensionFrame) -> Result<(), ServeError> {
        let line = encode_to_vec(frame).map_err(std::io::Error::other)?;
        self.0.send(line).await.map_err(|_| {
            ServeError::Io(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the writer to zot has stopped",
            ))
        })
    }
}

/// Writes queued lines to `output` until every [`Outbox`] is gone,
/// coalescing what is queued into one write and one flush.
async fn write_loop(
    mut output: impl AsyncWrite + Unpin,
    mut queue: mpsc::Receiver<Vec<u8>>,
) -> std::io::Result<()> {
    const BATCH: usize = 1024 * 1024;
    let mut batch = Vec::new();
    while let Some(line) = queue.recv().await {
        batch.clear();
        batch.extend_from_slice(&line);
        while batch.len() < BATCH
            && let Ok(line) = queue.try_recv()
        {
            batch.extend_from_slice(&line);
        }
        output.write_all(&batch).await?;
        output.flush().await?;
    }
    output.flush().await
}

/// Serves zot on `input`/`output` until `shutdown` or end of input.
///
/// # Errors
///
/// [`ServeError`] when the host cannot be built or stdio fails.
pub async fn serve(
    home: ZotHome,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin,
) -> Result<(), ServeError> {
    let (outbox, queue) = mpsc::channel(OUTBOX);
    let writer = write_loop(output, queue);
    let work = session(home, input, Outbox(outbox));
    tokio::pin!(writer, work);
    tokio::select! {
        biased;
        // Done reading: every outbox is gone, so the writer drains and ends.
        served = &mut work => {
            // The session's outboxes are gone with it, so the writer
            // drains and ends: what it queued reaches zot before its
            // outcome is returned, an error's last answers too.
            let written = writer.await;
            served?;
            written?;
        }
        // The writer only ends early when zot's stdout fails.
        written = &mut writer => written?,
    }
    Ok(())
}

/// Whether the reading loop goes on after a frame.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

async fn session(
    home: ZotHome,
    input: impl AsyncRead + Unpin,
    out: Outbox,
) -> Result<(), ServeError> {
    let mut input = FrameReader::<HostFrame, _>::new(input, DEFAULT_MAX_LINE);
    out.send(&ExtensionFrame::Hello(Hello {
        name: SERVE_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: vec!["commands".into(), "tools".into(), "events".into()],
    }))
    .await?;
    // The workspace decides which refusal plugins apply: wait for zot to
    // name it, however long that takes, holding what comes first.
    let mut held = VecDeque::new();
    let ack = loop {
        match input.next().await {
            None => return Ok(()),
            Some(Ok(HostFrame::HelloAck(ack))) => break ack,
            Some(Ok(HostFrame::Shutdown(_))) => {
                return out.send(&ExtensionFrame::ShutdownAck(ShutdownAck {})).await;
            }
            Some(Ok(frame)) => hold(&mut held, frame, &out).await?,
            Some(Err(undecoded)) => unreadable(&undecoded, &out).await?,
        }
    };
    // The checks first (rule 5): the build below reads what the
    // workspace's author wrote, for as long as that takes.
    out.send(&ExtensionFrame::Subscribe(Subscribe {
        events: vec![event_name::SESSION_START.to_owned()],
        intercept: vec![event_name::TOOL_CALL.to_owned()],
    }))
    .await?;
    let builder = Host::builder()
        .workspace(workspace_of(&ack))
        .zot_home(home.root())
        .run_extensions(false);
    // Reading the data files blocks: on a thread of its own, so that this
    // loop reads on and the writer sends the subscription meanwhile.
    let runtime = tokio::runtime::Handle::current();
    let building = tokio::task::spawn_blocking(move || runtime.block_on(builder.build()));
    let building = async move {
        match building.await {
            Ok(built) => built.map_err(ServeError::from),
            Err(failed) => Err(ServeError::Io(std::io::Error::other(format!(
                "building the host failed: {failed}"
            )))),
        }
    };
    let host = match build_holding(building, &mut input, &mut held, &out).await {
        Ok(host) => host,
        Err(failed) => return refuse_all(failed, &mut input, held, &out).await,
    };
    let mut serving = Serving::new(host, out);
    serving.register().await?;

    let mut flow = Flow::Continue;
    while flow == Flow::Continue {
        if let Some(frame) = held.pop_front() {
            flow = serving.handle(frame).await?;
            continue;
        }
        tokio::select! {
            item = input.next() => match item {
                None => break,
                Some(Ok(frame)) => flow = serving.handle(frame).await?,
                Some(Err(undecoded)) => unreadable(&undecoded, &serving.out).await?,
            },
            // Finished calls leave the set, so it holds only live ones.
            Some(_) = serving.calls.join_next(), if !serving.calls.is_empty() => {}
        }
    }
    serving.stop().await;
    Ok(())
}

/// Waits for the host `build` makes, reading zot's frames meanwhile (rule
/// 5): each is held (see [`hold`]), a check at most [`HELD_CHECK_PATIENCE`]
/// from when it came or from `hello_ack`, whichever is later; then it is
/// blocked. After a `shutdown` (held too, past the cap as well) or the end
/// of zot's input nothing more is read: the frames held are answered in
/// order once the host is built. A build that fails blocks the checks held
/// (and leaves the rest held for [`refuse_all`]).
async fn build_holding<R: AsyncRead + Unpin>(
    build: impl std::future::Future<Output = Result<Host, ServeError>>,
    input: &mut FrameReader<HostFrame, R>,
    held: &mut VecDeque<HostFrame>,
    out: &Outbox,
) -> Result<Host, ServeError> {
    use tokio::time::Instant;
    const WHILE: &str = "while it loads the data files and refusal plugins";
    tokio::pin!(build);
    // When each held check is blocked, oldest first; frames held before
    // `hello_ack` count from now.
    let acked = Instant::now();
    let mut due: VecDeque<(Instant, String)> = held
        .iter()
        .filter_map(|frame| match frame {
            HostFrame::EventIntercept(check) => {
                Some((acked + HELD_CHECK_PATIENCE, check.id.clone()))
            }
            _ => None,
        })
        .collect();
    let mut reading = true;
    loop {
        let next = due.front().map(|(at, _)| *at);
        tokio::select! {
            biased;
            built = &mut build => match built {
                Ok(host) => return Ok(host),
                Err(err) => {
                    let why = could_not_start(&err);
                    for (_, id) in due.drain(..) {
                        held.retain(|frame| {
                            !matches!(frame, HostFrame::EventIntercept(check) if check.id == id)
                        });
                        out.send(&block(id, &why)).await?;
                    }
                    return Err(err);
                }
            },
            () = tokio::time::sleep_until(next.unwrap_or(acked)), if next.is_some() => {
                let now = Instant::now();
                while let Some((_, id)) = due.front().filter(|(at, _)| *at <= now).cloned() {
                    due.pop_front();
                    held.retain(|frame| {
                        !matches!(frame, HostFrame::EventIntercept(check) if check.id == id)
                    });
                    let why = format!(
                        "zotbox could not check this call within {} s {WHILE}",
                        HELD_CHECK_PATIENCE.as_secs()
                    );
                    tracing::warn!("serve: {why}; blocked a check");
                    out.send(&block(id, &why)).await?;
                }
            }
            item = input.next(), if reading => match item {
                None => reading = false,
                Some(Ok(frame @ HostFrame::Shutdown(_))) => {
                    held.push_back(frame);
                    reading = false;
                }
                Some(Ok(frame)) => {
                    if let HostFrame::EventIntercept(check) = &frame
                        && held.len() < MAX_HELD
                    {
                        due.push_back((Instant::now() + HELD_CHECK_PATIENCE, check.id.clone()));
                    }
                    hold_while(held, frame, out, WHILE).await?;
                }
                Some(Err(undecoded)) => unreadable(&undecoded, out).await?,
            },
        }
    }
}

/// Serves zot when the host could not be built (a policy file that does
/// not parse, a data folder that cannot be read): no refusal plugin can be
/// read without it, and the `tool_call` intercept is subscribed already
/// (rule 5). Ending here would leave zot no one to ask, and zot allows
/// the calls of an extension that has gone: silence is consent (rule 7 of
/// `THREATS.md`; a team's `intercept_failure: "closed"` is in the file
/// that did not load). So serve stays up: it says why in zot's notes, at
/// once and at each session start, blocks every check and answers every
/// request with the error, `held` first, until `shutdown` or the end of
/// zot's input. `/reload-ext` starts it again once the cause is fixed.
///
/// # Errors
///
/// `failed` itself once zot is done, so that serve's exit status still
/// says it could not start; or a failure to write to zot.
async fn refuse_all<R: AsyncRead + Unpin>(
    failed: ServeError,
    input: &mut FrameReader<HostFrame, R>,
    mut held: VecDeque<HostFrame>,
    out: &Outbox,
) -> Result<(), ServeError> {
    let why = could_not_start(&failed);
    tracing::error!("serve: {why}; every check is blocked until zot stops serve");
    let note = || {
        ExtensionFrame::Notify(Notify {
            level: "error".to_owned(),
            message: format!(
                "{why}. Every tool call is blocked until it can: fix this, then run /reload-ext."
            ),
        })
    };
    out.send(&note()).await?;
    out.send(&ExtensionFrame::Ready(Ready {})).await?;
    loop {
        let frame = match held.pop_front() {
            Some(frame) => frame,
            None => match input.next().await {
                None => break,
                Some(Ok(frame)) => frame,
                Some(Err(undecoded)) => {
                    unreadable(&undecoded, out).await?;
                    continue;
                }
            },
        };
        let answer = match frame {
            HostFrame::Shutdown(_) => {
                out.send(&ExtensionFrame::ShutdownAck(ShutdownAck {}))
                    .await?;
                break;
            }
            HostFrame::Event(event) if event.event == event_name::SESSION_START => Some(note()),
            request => refused(request, &why),
        };
        if let Some(answer) = answer {
            out.send(&answer).await?;
        }
    }
    Err(failed)
}

/// Why serve answers nothing from its rules: the build's error, on one
/// line, escaped for zot's screen (a path in it may be a workspace's).
fn could_not_start(err: &ServeError) -> String {
    let why = format!("zotbox could not start: {}", crate::text::chain(err));
    crate::text::shown(&why).into_owned()
}

/// Keeps a frame that came before `hello_ack`, or, past [`MAX_HELD`],
/// answers it at once: a check with a block, a request with an error.
async fn hold(
    held: &mut VecDeque<HostFrame>,
    frame: HostFrame,
    out: &Outbox,
) -> Result<(), ServeError> {
    hold_while(held, frame, out, "while it waits for `hello_ack`").await
}

/// [`hold`], `waiting` saying for what (in the refusal past the cap).
async fn hold_while(
    held: &mut VecDeque<HostFrame>,
    frame: HostFrame,
    out: &Outbox,
    waiting: &str,
) -> Result<(), ServeError> {
    if held.len() < MAX_HELD {
        held.push_back(frame);
        return Ok(());
    }
    let why = format!("zotbox already holds {MAX_HELD} frames {waiting}");
    tracing::warn!("serve: {why}; refused a `{}`", frame.frame_type());
    match refused(frame, &why) {
        Some(answer) => out.send(&answer).await,
        None => Ok(()),
    }
}

/// The answer to one of zot's requests serve will not serve, saying `why`:
/// a check blocked, a tool call or a command failed. `None` for a frame
/// that asks for no answer.
fn refused(frame: HostFrame, why: &str) -> Option<ExtensionFrame> {
    Some(match frame {
        HostFrame::EventIntercept(intercept) => block(intercept.id, why),
        HostFrame::ToolCall(call) => tool_error(call.id, why.to_owned()),
        HostFrame::CommandInvoked(invoked) => ExtensionFrame::CommandResponse(CommandResponse {
            id: invoked.id,
            error: Some(why.to_owned()),
            ..CommandResponse::default()
        }),
        _ => return None,
    })
}

/// Answers a line that did not decode, when it was a request (see
/// [`Undecoded::answer`]); logs it either way.
async fn unreadable(undecoded: &Undecoded, out: &Outbox) -> Result<(), ServeError> {
    match undecoded.answer(READER) {
        Some(answer) => {
            tracing::warn!(
                "serve: answered a `{}` it could not read: {undecoded}",
                undecoded.peek.frame_type.as_deref().unwrap_or_default()
            );
            out.send(&answer).await
        }
        None => {
            tracing::warn!("serve: {undecoded}");
            Ok(())
        }
    }
}

fn block(id: String, why: &str) -> ExtensionFrame {
    ExtensionFrame::EventInterceptResponse(InterceptResponse {
        id,
        block: true,
        reason: Some(format!("{why}; blocked to be safe")),
        ..InterceptResponse::default()
    })
}

fn tool_error(id: String, text: String) -> ExtensionFrame {
    ExtensionFrame::ToolResult(ToolResult {
        id,
        content: vec![Content::text(text)],
        is_error: true,
    })
}

/// Serving, once the host for zot's workspace is built.
struct Serving {
    host: Host,
    out: Outbox,
    calls: JoinSet<()>,
    admitted: Arc<Semaphore>,
    running: Arc<Semaphore>,
}

impl Serving {
    fn new(host: Host, out: Outbox) -> Self {
        Self {
            host,
            out,
            calls: JoinSet::new(),
            admitted: Arc::new(Semaphore::new(MAX_ADMITTED)),
            running: Arc::new(Semaphore::new(MAX_RUNNING)),
        }
    }

    /// Tools and skills as commands, then `ready` (the `tool_call`
    /// intercept went out before the host was built).
    /// zot shows descriptions in its menus: an author's are escaped on the
    /// way, as every author's text zotbox shows (names are plain already).
    async fn register(&self) -> Result<(), ServeError> {
        use crate::text::shown_text;
        for tool in &self.host.tools() {
            self.out
                .send(&ExtensionFrame::RegisterTool(RegisterTool {
                    name: tool.name.clone(),
                    description: shown_text(&tool.description).into_owned(),
                    schema: tool.schema.clone(),
                }))
                .await?;
        }
        let commands: Vec<RegisterCommand> = (self.host.data().set.skills.iter())
            .map(|skill| RegisterCommand {
                name: skill.name.clone(),
                description: shown_text(&skill.description).into_owned(),
            })
            .collect();
        for command in commands {
            self.out
                .send(&ExtensionFrame::RegisterCommand(command))
                .await?;
        }
        self.out.send(&ExtensionFrame::Ready(Ready {})).await?;
        for problem in &self.host.data().set.problems {
            tracing::warn!(
                "skipped `{}`: {}",
                crate::text::Shown(&problem.path.display().to_string()),
                problem.error
            );
        }
        Ok(())
    }

    async fn handle(&mut self, frame: HostFrame) -> Result<Flow, ServeError> {
        match frame {
            HostFrame::Shutdown(_) => {
                self.out
                    .send(&ExtensionFrame::ShutdownAck(ShutdownAck {}))
                    .await?;
                return Ok(Flow::Stop);
            }
            HostFrame::EventIntercept(intercept) => {
                let response = self.check(intercept).await;
                self.out
                    .send(&ExtensionFrame::EventInterceptResponse(response))
                    .await?;
            }
            HostFrame::ToolCall(call) => self.call(call).await?,
            HostFrame::CommandInvoked(invoked) => {
                let response = self.command(invoked);
                self.out
                    .send(&ExtensionFrame::CommandResponse(response))
                    .await?;
            }
            HostFrame::Event(event) if event.event == event_name::SESSION_START => {
                // What an untrusted workspace brings, once per session, so
                // the user knows why its tools are missing.
                if let Some(note) = self.host.workspace_note() {
                    self.out
                        .send(&ExtensionFrame::Notify(Notify {
                            level: "info".to_owned(),
                            message: note,
                        }))
                        .await?;
                }
                // zot prints notes on the user's terminal: a workspace
                // plugin's text is escaped on the way.
                let notes: Vec<String> = (self.host.data().set.plugins.iter())
                    .filter_map(|plugin| {
                        let appendix = plugin.appendix.as_deref()?.trim();
                        (!appendix.is_empty()).then(|| {
                            format!(
                                "{}: {}",
                                crate::text::Shown(&plugin.name),
                                crate::text::Shown(appendix)
                            )
                        })
                    })
                    .collect();
                for message in notes {
                    self.out
                        .send(&ExtensionFrame::Notify(Notify {
                            level: "info".to_owned(),
                            message,
                        }))
                        .await?;
                }
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    /// The verdict on one of zot's checks: the deny rules, right here.
    async fn check(&self, intercept: EventIntercept) -> InterceptResponse {
        let mut response = InterceptResponse {
            id: intercept.id,
            ..InterceptResponse::default()
        };
        if intercept.event == event_name::TOOL_CALL {
            let tool = intercept.tool_name.unwrap_or_default();
            let args = intercept.tool_args.unwrap_or(Value::Null);
            if let Some(reason) = refusal(&self.host, &tool, &args).await {
                response.block = true;
                response.reason = Some(reason);
            }
        }
        response
    }

    /// Starts a tool call beside the loop, or refuses it at once when
    /// [`MAX_ADMITTED`] calls are in already.
    async fn call(&mut self, call: ToolCall) -> Result<(), ServeError> {
        let Ok(admitted) = self.admitted.clone().try_acquire_owned() else {
            tracing::warn!("serve: {MAX_ADMITTED} tool calls in flight; refused another");
            let text = format!(
                "zotbox is running {MAX_ADMITTED} tool calls already; try again once one has finished"
            );
            return self.out.send(&tool_error(call.id, text)).await;
        };
        let running = self.running.clone();
        let host = self.host.clone();
        let out = self.out.clone();
        self.calls.spawn(async move {
            let _admitted = admitted;
            let Ok(_running) = running.acquire_owned().await else {
                return;
            };
            let result = match host.call_tool(&call.name, call.args).await {
                Ok(mut result) => {
                    result.id = call.id;
                    ExtensionFrame::ToolResult(result)
                }
                Err(err) => tool_error(call.id, err.to_string()),
            };
            // zot gone: nothing to answer.
            let _ = out.send(&result).await;
        });
        Ok(())
    }

    fn command(&self, invoked: CommandInvoked) -> CommandResponse {
        match self.host.data().set.skill(&invoked.name) {
            Some(skill) => {
                // zot shows the prompt it sends: the skill author's control
                // characters escaped (the user's own arguments as typed).
                let mut prompt = crate::text::shown_text(skill.body.trim_end()).into_owned();
                if !invoked.args.trim().is_empty() {
                    prompt.push_str("\n\n");
                    prompt.push_str(invoked.args.trim());
                }
                CommandResponse {
                    id: invoked.id,
                    action: CommandAction::Prompt,
                    prompt: Some(prompt),
                    ..CommandResponse::default()
                }
            }
            None => CommandResponse {
                id: invoked.id,
                error: Some(format!("no skill `{}`", invoked.name)),
                ..CommandResponse::default()
            },
        }
    }

    /// Ends every call still running (zot has gone or asked us to), then the host.
    async fn stop(mut self) {
        self.calls.shutdown().await;
        self.host.shutdown().await;
    }
}

/// The deny rules' verdict on one of zot's tool calls, trying the common
/// alias of zot's file tools as well.
async fn refusal(host: &Host, tool: &str, args: &Value) -> Option<String> {
    let names = std::iter::once(tool).chain(
        TOOL_ALIASES
            .iter()
            .filter(|(zot, _)| *zot == tool)
            .map(|(_, alias)| *alias),
    );
    for name in names {
        let decision = host.intercept_tool_call(name, args.clone()).await;
        if let Verdict::Block { reason } = decision.verdict {
            // A workspace plugin's reason reaches zot's screen: escaped,
            // on one line.
            let reason = format!("{reason} ({})", decision.decided_by.join(", "));
            return Some(crate::text::shown(&reason).into_owned());
        }
    }
    None
}

/// The workspace `hello_ack` names; zot always names one, as an absolute
/// path. An empty `cwd` means the directory zot started us in, as for any
/// extension; so does a relative one, said in zot's log of us, for the
/// bridge refuses it too (a path read against whatever folder a process
/// stands in is not a workspace anyone chose).
fn workspace_of(ack: &HelloAck) -> PathBuf {
    let here = || std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let named = PathBuf::from(&ack.cwd);
    if ack.cwd.is_empty() {
        return here();
    }
    if !named.is_absolute() {
        tracing::warn!(
            "zot named the workspace `{}`, which is not an absolute path: serving the folder \
             zot started zotbox in",
            crate::text::Shown(&ack.cwd)
        );
        return here();
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(cwd: &str) -> HelloAck {
        HelloAck {
            cwd: cwd.to_owned(),
            ..HelloAck::default()
        }
    }

    /// What [`build_holding`] met: its outcome, the frames it sent and the
    /// frames it left held.
    struct Held {
        built: Result<Host, ServeError>,
        sent: Vec<serde_json::Value>,
        held: Vec<String>,
    }

    /// Runs [`build_holding`] with `early` held from before `hello_ack`,
    /// over a build that waits for its gate and then gives `outcome`;
    /// `zot` plays zot: it writes frames and reads what serve sends, and
    /// opens the gate (or drops it, ending the build never) when it is done.
    async fn build_while_zot<Z, F>(
        early: Vec<HostFrame>,
        outcome: Result<Host, ServeError>,
        zot: Z,
    ) -> Held
    where
        Z: FnOnce(
            tokio::io::DuplexStream,
            mpsc::Receiver<Vec<u8>>,
            tokio::sync::oneshot::Sender<()>,
        ) -> F,
        F: std::future::Future<Output = mpsc::Receiver<Vec<u8>>>,
    {
        let (zot_end, serve_end) = tokio::io::duplex(64 * 1024);
        let mut input = FrameReader::<HostFrame, _>::new(serve_end, DEFAULT_MAX_LINE);
        let (sender, lines) = mpsc::channel(OUTBOX);
        let out = Outbox(sender);
        let (gate, opened) = tokio::sync::oneshot::channel::<()>();
        let build = async move {
            if opened.await.is_err() {
                std::future::pending::<()>().await;
            }
            outcome
        };
        let mut held: VecDeque<HostFrame> = early.into();
        let (built, mut lines) = tokio::join!(
            async {
                let built = build_holding(build, &mut input, &mut held, &out).await;
                drop(out);
                built
            },
            zot(zot_end, lines, gate)
        );
        let mut sent = Vec::new();
        while let Ok(line) = lines.try_recv() {
            sent.push(serde_json::from_slice(&line).unwrap_or_else(|e| panic!("{e}")));
        }
        Held {
            built,
            sent,
            held: held
                .iter()
                .map(|frame| frame.frame_type().to_owned())
                .collect(),
        }
    }

    fn check(id: &str) -> HostFrame {
        HostFrame::EventIntercept(EventIntercept {
            id: id.to_owned(),
            event: event_name::TOOL_CALL.to_owned(),
            tool_name: Some("bash".to_owned()),
            tool_args: Some(serde_json::json!({"command": "rm -rf /"})),
            ..EventIntercept::default()
        })
    }

    async fn write(zot: &mut tokio::io::DuplexStream, frame: &HostFrame) {
        let line = encode_to_vec(frame).unwrap_or_else(|e| panic!("{e}"));
        zot.write_all(&line).await.unwrap_or_else(|e| panic!("{e}"));
    }

    /// The next frame serve sends; a test that waits 10 s for one fails.
    async fn next(lines: &mut mpsc::Receiver<Vec<u8>>) -> serde_json::Value {
        let line = tokio::time::timeout(std::time::Duration::from_secs(10), lines.recv())
            .await
            .unwrap_or_else(|_| panic!("serve sent nothing in 10 s"))
            .unwrap_or_else(|| panic!("serve ended"));
        serde_json::from_slice(&line).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn empty_host() -> (tempfile::TempDir, Host) {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let host = Host::builder()
            .workspace(tmp.path())
            .zot_home(tmp.path().join("home"))
            .run_extensions(false)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (tmp, host)
    }

    fn blocked(id: &str, why: &str) -> serde_json::Value {
        serde_json::json!({"type": "event_intercept_response", "id": id, "block": true,
                           "reason": format!("{why}; blocked to be safe")})
    }

    const TOO_LONG: &str = "zotbox could not check this call within 2 s while it loads the data files and refusal \
         plugins";

    /// Attack: a workspace whose data files and plugins take long to read
    /// and compile (their author decides how long) must not leave zot's
    /// checks unanswered for zot's 5 s, which allows them. While the host
    /// is built, serve reads on: a check is held
    /// [`HELD_CHECK_PATIENCE`] (from `hello_ack` for one held before it),
    /// then blocked, and leaves the frames held for the host.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_held_while_the_host_is_built_are_blocked_past_their_patience() {
        let (_tmp, host) = empty_host().await;
        let call = HostFrame::ToolCall(ToolCall {
            id: "t".to_owned(),
            name: "greet".to_owned(),
            ..ToolCall::default()
        });
        let Held { built, sent, held } = build_while_zot(
            vec![check("early")],
            Ok(host),
            |mut zot, mut lines, gate| async move {
                write(&mut zot, &check("during")).await;
                write(&mut zot, &call).await;
                // The build is held until both are answered: no clock
                // decides the order.
                let answers = [next(&mut lines).await, next(&mut lines).await];
                assert_eq!(
                    answers,
                    [blocked("early", TOO_LONG), blocked("during", TOO_LONG)]
                );
                let _ = gate.send(());
                lines
            },
        )
        .await;
        assert!(built.is_ok());
        assert!(sent.is_empty(), "{sent:?}");
        // The tool call waits for the host; the checks were answered.
        assert_eq!(held, ["tool_call"]);
    }

    /// A host built in time leaves every check for its rules; a shutdown
    /// while it is built is held behind what came first, and ends the
    /// reading; a build that fails blocks the checks held rather than leave
    /// them to zot's 5 s.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prompt_build_a_shutdown_and_a_failed_build_while_checks_are_held() {
        let (_tmp, host) = empty_host().await;
        let in_time = build_while_zot(
            vec![check("early")],
            Ok(host),
            |mut zot, lines, gate| async move {
                write(&mut zot, &check("during")).await;
                let _ = gate.send(());
                lines
            },
        )
        .await;
        assert!(in_time.built.is_ok());
        assert!(in_time.sent.is_empty(), "{:?}", in_time.sent);
        // `during` may or may not have been read before the host was
        // ready: what was read is held, never answered here.
        assert_eq!(
            in_time.held.first().map(String::as_str),
            Some("event_intercept")
        );

        let (_tmp, host) = empty_host().await;
        let shut = build_while_zot(
            vec![check("early")],
            Ok(host),
            |mut zot, lines, gate| async move {
                write(&mut zot, &HostFrame::Shutdown(Default::default())).await;
                write(&mut zot, &check("after")).await;
                // Held behind the check, answered once the host is built;
                // nothing after it is read.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let _ = gate.send(());
                lines
            },
        )
        .await;
        assert!(shut.built.is_ok());
        assert!(shut.sent.is_empty(), "{:?}", shut.sent);
        assert_eq!(shut.held, ["event_intercept", "shutdown"]);

        let failed = build_while_zot(
            vec![check("early")],
            Err(crate::host::BuildError::NoHome.into()),
            |zot, mut lines, gate| async move {
                let _ = gate.send(());
                let why = format!(
                    "zotbox could not start: {}",
                    crate::host::BuildError::NoHome
                );
                assert_eq!(next(&mut lines).await, blocked("early", &why));
                drop(zot);
                lines
            },
        )
        .await;
        assert!(matches!(failed.built, Err(ServeError::Build(_))));
    }

    #[test]
    fn the_workspace_is_the_absolute_path_zot_names_else_where_zot_started_us() {
        assert_eq!(
            workspace_of(&ack("/home/me/p")),
            PathBuf::from("/home/me/p")
        );
        let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        // A relative `cwd` is not read against wherever serve stands, as
        // the bridge refuses one too.
        for cwd in ["", ".", "p", "../elsewhere"] {
            assert_eq!(workspace_of(&ack(cwd)), here, "{cwd:?}");
        }
    }
}
